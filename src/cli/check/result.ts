/**
 * What `turnpike check` found, one result per thing it checked, and how they are printed: one line
 * each (✓/✗ on a terminal, `ok`/`FAIL` otherwise) or one JSON document (`--json`).
 */

/** One thing checked. Nothing in it holds a password or a key. */
export type CheckResult = {
  /** What kind of thing: the configuration, the database, Redis, the llama.cpp binding, an embedded model, an upstream member. */
  check: "configuration" | "database" | "redis" | "runtime" | "model" | "upstream";
  /** Which one: the database as safe to print, a model's id, a member's name (`<model>#<index>`). */
  name: string;
  /** Whether it serves as configured. */
  ok: boolean;
  /** One line for the operator: what was found, or what is wrong and the setting that fixes it. */
  detail: string;
  /** What was found, for `--json` (context length in tokens, kind, models...). */
  facts?: Record<string, unknown>;
};

/** A URL with its password (and any query, which may hold one) replaced by `***`. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== "") parsed.password = "***";
    if (parsed.search !== "") parsed.search = "?***";
    return parsed.toString();
  } catch {
    return "(invalid URL)";
  }
}

/** An error's words with `url` (printed without its password) and its password, wherever it appears, replaced. */
export function withoutUrlSecrets(words: string, url: string): string {
  let password = "";
  try {
    password = decodeURIComponent(new URL(url).password);
  } catch {}
  const redacted = words.split(url).join(redactUrl(url));
  return password === "" ? redacted : redacted.split(password).join("***");
}

/** The results as lines: `✓ database: …` on a terminal, `ok   database: …` / `FAIL database: …` otherwise. */
export function formatResults(results: readonly CheckResult[], terminal: boolean): string {
  return results
    .map((result) => {
      const mark = terminal ? (result.ok ? "✓" : "✗") : result.ok ? "ok  " : "FAIL";
      const label = result.check === "configuration" || result.check === "database" || result.check === "redis" ? result.check : `${result.check} ${result.name}`;
      return `${mark} ${label}: ${result.detail}\n`;
    })
    .join("");
}

/** The results as `--json` prints them: `{ ok, checks: [...] }`, each check's facts beside its verdict. */
export function resultsJson(results: readonly CheckResult[]): string {
  return `${JSON.stringify({ ok: results.every((result) => result.ok), checks: results.map(({ facts, ...result }) => ({ ...result, ...facts })) }, null, 2)}\n`;
}

/** `promise`, or a rejection saying what did not answer within `timeoutMs`. */
export async function within<T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${timeoutMs / 1000} s`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** An error's message, for a result's detail. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
