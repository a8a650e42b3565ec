/**
 * Who is calling `/api`: an account signed in to the console (a session, resolved by
 * `SessionResolver`) or a script holding an API key (`Authorization: Bearer <key>`).
 * Operator keys (no account) act as the operator: an admin without an account of its own.
 */
import type { FastifyRequest, preHandlerHookHandler } from "fastify";
import type { Kysely } from "kysely";
import { verifyApiKey } from "../../../auth/api-keys.ts";
import type { Database } from "../../../store/schema.ts";
import { ApiError, InvalidApiKeyError, InvalidRequestError } from "../../../protocol/errors.ts";

export type Principal = {
  /** The account acting; null for the operator (an operator key). */
  accountId: string | null;
  email: string | null;
  role: "admin" | "user";
  via: "key" | "session";
};

declare module "fastify" {
  interface FastifyRequest {
    /** Who is calling an `/api` route (set by `accountAuth`). */
    principal: Principal | null;
  }
}

/** Resolves a console session (cookie) to its principal, or null when there is none. */
export type SessionResolver = (request: FastifyRequest) => Promise<Principal | null>;

export type AccountAuthOptions = {
  database: Kysely<Database>;
  /** Sessions come with the console; without a resolver only API keys are accepted. */
  sessions?: SessionResolver;
};

export class AuthenticationRequiredError extends ApiError {
  constructor() {
    super("Sign in, or pass an API key as 'Authorization: Bearer <key>'.", { status: 401, type: "invalid_request_error", code: "authentication_required" });
  }
}

export class AdminRequiredError extends ApiError {
  constructor() {
    super("Only administrators may do this.", { status: 403, type: "permission_error", code: "admin_required" });
  }
}

export class AccountDisabledError extends ApiError {
  constructor() {
    super("This account is disabled.", { status: 403, type: "permission_error", code: "account_disabled" });
  }
}

/** The key in `Authorization: Bearer <key>`, or undefined. */
export function bearerToken(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (header === undefined) return undefined;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match?.[1];
}

export function accountAuth(options: AccountAuthOptions): preHandlerHookHandler {
  return async function authenticateAccount(request: FastifyRequest) {
    if (request.headers.authorization !== undefined) {
      const check = await verifyApiKey(options.database, bearerToken(request) ?? "");
      if (!check.ok) throw check.reason === "account_disabled" ? new AccountDisabledError() : new InvalidApiKeyError();
      request.apiKey = check.key;
      if (check.key.accountId === null) {
        request.principal = { accountId: null, email: null, role: "admin", via: "key" };
        return;
      }
      const account = await options.database
        .selectFrom("accounts")
        .select(["id", "email", "role"])
        .where("id", "=", check.key.accountId)
        .executeTakeFirst();
      // verifyApiKey refused keys of disabled accounts already.
      if (account === undefined) throw new InvalidApiKeyError();
      request.principal = { accountId: account.id, email: account.email, role: account.role, via: "key" };
      return;
    }
    const principal = options.sessions ? await options.sessions(request) : null;
    if (principal === null) throw new AuthenticationRequiredError();
    request.principal = principal;
  };
}

/** The principal of an authenticated request (after `accountAuth`). */
export function principalOf(request: FastifyRequest): Principal {
  if (request.principal === null) throw new AuthenticationRequiredError();
  return request.principal;
}

/** The account acting; the operator has none and must name one where a route allows it. */
export function accountIdOf(request: FastifyRequest, what = "This"): string {
  const principal = principalOf(request);
  if (principal.accountId === null) {
    throw new InvalidRequestError(`${what} needs an account; operator keys have none. Use an account's key or sign in.`, null, "account_required");
  }
  return principal.accountId;
}

export function requireAdmin(request: FastifyRequest): Principal {
  const principal = principalOf(request);
  if (principal.role !== "admin") throw new AdminRequiredError();
  return principal;
}
