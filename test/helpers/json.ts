/**
 * Checks that text is JSON, or the beginning of some JSON text: what a reply cut off by
 * `max_tokens` under a JSON grammar must be.
 */

/** True when `text` is valid JSON or a prefix of valid JSON. */
export function isJsonPrefix(text: string): boolean {
  let index = 0;
  const end = () => index >= text.length;
  const skipSpace = () => {
    while (!end() && /\s/.test(text[index]!)) index++;
  };
  /** Parses one value; returns false on a syntax error, true when it ended or the text ran out. */
  const value = (): boolean => {
    skipSpace();
    if (end()) return true;
    const character = text[index]!;
    if (character === "{" || character === "[") {
      const close = character === "{" ? "}" : "]";
      index++;
      skipSpace();
      if (end()) return true;
      if (text[index] === close) {
        index++;
        return true;
      }
      for (;;) {
        if (character === "{") {
          skipSpace();
          if (end()) return true;
          if (text[index] !== '"' || !string()) return false;
          skipSpace();
          if (end()) return true;
          if (text[index] !== ":") return false;
          index++;
        }
        if (!value()) return false;
        skipSpace();
        if (end()) return true;
        if (text[index] === close) {
          index++;
          return true;
        }
        if (text[index] !== ",") return false;
        index++;
      }
    }
    if (character === '"') return string();
    const literal = /^(-?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?|true|false|null)/.exec(text.slice(index));
    if (literal !== null) {
      index += literal[0].length;
      return true;
    }
    // A literal cut short: "tr", "-", "1." ...
    return /^(t(r(ue?)?)?|f(a(l(se?)?)?)?|n(u(ll?)?)?|-?\d*\.?\d*([eE][-+]?\d*)?)$/.test(text.slice(index));
  };
  const string = (): boolean => {
    index++;
    while (!end()) {
      const character = text[index]!;
      if (character === "\\") index += 2;
      else if (character === '"') {
        index++;
        return true;
      } else index++;
    }
    return true;
  };
  if (!value()) return false;
  skipSpace();
  return end();
}
