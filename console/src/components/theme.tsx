/**
 * The theme menu: system, light or dark, saved in this browser's localStorage
 * (`turnpike.theme`) and applied to `<html data-theme>`; `public/theme.js` applies the saved
 * choice before the first paint.
 */
import { useState } from "react";

export type Theme = "system" | "light" | "dark";

/** Where the choice is kept; `public/theme.js` reads the same key. */
export const THEME_STORAGE_KEY = "turnpike.theme";

/** The saved theme ("system" when none is saved or storage is blocked). */
export function savedTheme(): Theme {
  try {
    const value = window.localStorage.getItem(THEME_STORAGE_KEY);
    return value === "light" || value === "dark" ? value : "system";
  } catch {
    return "system";
  }
}

/** Saves and applies a theme. */
export function applyTheme(theme: Theme): void {
  try {
    if (theme === "system") window.localStorage.removeItem(THEME_STORAGE_KEY);
    else window.localStorage.setItem(THEME_STORAGE_KEY, theme);
  } catch {
    // Storage blocked: the choice lasts until the page is reloaded.
  }
  if (theme === "system") document.documentElement.removeAttribute("data-theme");
  else document.documentElement.setAttribute("data-theme", theme);
}

export function ThemeMenu() {
  const [theme, setTheme] = useState<Theme>(savedTheme);
  return (
    <div className="theme-menu">
      <label htmlFor="theme" className="muted small">
        Theme
      </label>
      <select
        id="theme"
        value={theme}
        onChange={(event) => {
          const next = event.target.value as Theme;
          applyTheme(next);
          setTheme(next);
        }}
      >
        <option value="system">System</option>
        <option value="light">Light</option>
        <option value="dark">Dark</option>
      </select>
    </div>
  );
}
