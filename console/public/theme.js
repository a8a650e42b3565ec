// Applies the theme chosen in the console (components/theme.tsx) before the first paint: this
// file is loaded, blocking, from <head>, so a dark page never flashes light. "system" (or
// nothing saved) leaves it to prefers-color-scheme.
(function () {
  try {
    var theme = window.localStorage.getItem("turnpike.theme");
    if (theme === "light" || theme === "dark") document.documentElement.setAttribute("data-theme", theme);
  } catch (error) {
    // Storage blocked: follow the system.
  }
})();
