/**
 * Security headers on every response (JSON, streams and the console alike): no MIME sniffing,
 * no framing, no referrer, and a Content-Security-Policy that allows nothing: an API response
 * is never a document. The console's own routes replace the policy with `CONSOLE_POLICY`.
 */
import type { FastifyReply } from "fastify";

/** Headers every response carries; `handleClientError` writes them on its raw answers too. */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "content-security-policy": "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
};

/**
 * The console's policy: its scripts, styles and fonts come from this server only; inline styles
 * are allowed (React and the charts set `style` attributes), inline scripts are not; the favicon
 * is a `data:` image; it calls only this server's `/api` and `/v1`; nobody may frame it.
 */
export const CONSOLE_POLICY = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join("; ");

/**
 * Sets `SECURITY_HEADERS` on the reply; a route may replace them (the console's policy). A
 * hijacked response (SSE) writes the reply's headers itself (`reply.getHeaders()`). They are not
 * set on the raw response: a header set there makes Node validate every header twice when the
 * response is written (its `writeHead` merges them one `setHeader` at a time), a cost of every request.
 */
export function setSecurityHeaders(reply: FastifyReply): void {
  for (const name in SECURITY_HEADERS) void reply.header(name, SECURITY_HEADERS[name]!);
}
