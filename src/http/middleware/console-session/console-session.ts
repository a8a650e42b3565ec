/**
 * Console sessions on the wire: the `turnpike_session` cookie (HttpOnly, SameSite=Lax, Secure
 * over HTTPS), and CSRF protection for every state-changing `/api` call made with it: the
 * request's Origin must be one of this server's (the public URL's, or the request's own on a Host
 * the server answers to: see allowed-hosts.ts), and `x-csrf-token` must carry the session's CSRF token.
 * Requests with an API key need neither: browsers never attach those on their own.
 */
import type { FastifyReply, FastifyRequest } from "fastify";
import type { Kysely } from "kysely";
import type { Database } from "../../../store/schema.ts";
import { findSession, isValidCsrfToken } from "../../../auth/sessions.ts";
import { ApiError } from "../../../protocol/errors.ts";
import { AccountDisabledError, type SessionResolver } from "../account-auth/account-auth.ts";
import type { HostPolicy } from "../allowed-hosts/allowed-hosts.ts";

export const SESSION_COOKIE = "turnpike_session";
export const CSRF_HEADER = "x-csrf-token";

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

export class CsrfError extends ApiError {
  constructor(why: string) {
    super(`Cross-site request refused: ${why}. Reload the console and try again.`, "csrf_failed");
  }
}

/** The session token of the request's cookie, if any. */
export function sessionTokenOf(request: FastifyRequest): string | undefined {
  const token = request.cookies?.[SESSION_COOKIE];
  return token === undefined || token === "" ? undefined : token;
}

export function setSessionCookie(request: FastifyRequest, reply: FastifyReply, token: string, expires: number): void {
  reply.setCookie(SESSION_COOKIE, token, {
    path: "/",
    httpOnly: true,
    sameSite: "lax",
    secure: request.protocol === "https",
    expires: new Date(expires),
  });
}

export function clearSessionCookie(request: FastifyRequest, reply: FastifyReply): void {
  reply.clearCookie(SESSION_COOKIE, { path: "/", httpOnly: true, sameSite: "lax", secure: request.protocol === "https" });
}

/**
 * Refuses a browser request sent from another site: its Origin must be one `hosts` accepts (the
 * public URL's, or the request's own on a Host this server answers to, never just any Host the
 * request names), and without an Origin, `Sec-Fetch-Site` must not say `cross-site`.
 */
export function checkSameOrigin(request: FastifyRequest, hosts: HostPolicy): void {
  const origin = request.headers.origin;
  if (origin === undefined) {
    if (request.headers["sec-fetch-site"] === "cross-site") throw new CsrfError("the request came from another site");
    return;
  }
  const own = `${request.protocol}://${request.host}`;
  if (!hosts.allowsOrigin(origin, own)) throw new CsrfError(`the origin ${JSON.stringify(origin).slice(0, 100)} is not this server`);
}

/** Refuses a state-changing call made with this session unless it is same-origin and carries the session's CSRF token. */
export function checkCsrf(request: FastifyRequest, sessionToken: string, hosts: HostPolicy): void {
  checkSameOrigin(request, hosts);
  const presented = request.headers[CSRF_HEADER];
  if (!isValidCsrfToken(sessionToken, typeof presented === "string" ? presented : undefined)) {
    throw new CsrfError(`the ${CSRF_HEADER} header is missing or wrong`);
  }
}

export type ConsoleSessionOptions = {
  database: Kysely<Database>;
  /** The origins accepted on state-changing calls. */
  hosts: HostPolicy;
};

/** The `SessionResolver` for `accountAuth`: the cookie's session, CSRF-checked for unsafe methods. */
export function consoleSessions(options: ConsoleSessionOptions): SessionResolver {
  return async function resolveConsoleSession(request) {
    const token = sessionTokenOf(request);
    if (token === undefined) return null;
    const session = await findSession(options.database, token);
    if (session === undefined) return null;
    if (session.disabled) throw new AccountDisabledError();
    if (!SAFE_METHODS.has(request.method)) checkCsrf(request, token, options.hosts);
    return { accountId: session.accountId, email: session.email, role: session.role, via: "session" };
  };
}

/** The origin of a URL, or null when it is not one. */
export function originOf(url: string | undefined): string | null {
  if (url === undefined || url === "") return null;
  try {
    return new URL(url).origin;
  } catch {
    return null;
  }
}
