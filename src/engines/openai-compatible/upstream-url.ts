/**
 * The addresses of an upstream server: its base URL (ending in `/v1`, where the OpenAI routes
 * live), its id (the same without credentials, safe for logs and metrics), and its root (the base
 * URL without `/v1`, where vLLM, SGLang and llama-server keep `/health`, `/tokenize`, `/props`
 * and Ollama keeps `/api/...`).
 */

/**
 * The base URL a member is reached at: query and fragment dropped, trailing slashes removed, and
 * `/v1` added when the path does not already end in it. Credentials in the URL are kept (see
 * `withoutCredentials`). Throws `TypeError` for a URL that is not http(s).
 */
export function normalizeBaseUrl(url: string): string {
  const parsed = new URL(url);
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new TypeError(`Not an http(s) URL: ${withoutCredentials(url)}`);
  let path = parsed.pathname.replace(/\/+$/, "");
  if (!path.endsWith("/v1")) path += "/v1";
  const credentials = parsed.username === "" ? "" : `${parsed.username}${parsed.password === "" ? "" : `:${parsed.password}`}@`;
  return `${parsed.protocol}//${credentials}${parsed.host}${path}`;
}

/** The URL with any `user:password@` removed: what may appear in logs, metrics and errors. */
export function withoutCredentials(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.username = "";
    parsed.password = "";
    return parsed.toString().replace(/\/$/, "");
  } catch {
    // Not a URL: say nothing of what it held.
    return "(invalid URL)";
  }
}

/** A member's id: its normalized base URL without credentials (`http://10.0.0.5:8000/v1`). */
export function memberIdOf(url: string): string {
  return withoutCredentials(normalizeBaseUrl(url));
}

/** The server's root: the normalized base URL without its final `/v1`. */
export function serverRoot(baseUrl: string): string {
  return normalizeBaseUrl(baseUrl).replace(/\/v1$/, "");
}

/** A member as a model entry lists it: its base URL, or the URL with a name. */
export type MemberEntry = string | { url: string; name: string };

/** A listed member's base URL (as written: see `normalizeBaseUrl`). */
export function memberUrl(member: MemberEntry): string {
  return typeof member === "string" ? member : member.url;
}

/**
 * A listed member's name: what labels it in `/metrics` and names it in the logs, never its URL
 * (the URL may name private hosts): the entry's `name`, else `<model id>#<index>`.
 */
export function memberName(modelId: string, member: MemberEntry, index: number): string {
  return typeof member === "string" ? `${modelId}#${index}` : member.name;
}
