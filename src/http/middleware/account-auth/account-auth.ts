/**
 * Who is calling `/api`: an account signed in to the console (a session, resolved by
 * `SessionResolver`) or a script holding an API key (`Authorization: Bearer <key>`).
 * Operator keys (no account) act as the operator: an admin without an account of its own.
 *
 * Keys act within their scope (`auth/key-scopes.ts`): an 'inference' key is refused here
 * (403 `key_scope_exceeded`); admin routes (`requireAdmin`) take a session of an admin, or a key
 * of an admin (or the operator) with scope 'admin' (else 403 `admin_scope_required`).
 */
import type { FastifyRequest, preHandlerHookHandler } from "fastify";
import type { Kysely } from "kysely";
import type { KeyCheck } from "../../../auth/api-keys.ts";
import type { VerifiedKeys } from "../../../auth/verified-keys.ts";
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
  /** Where keys are verified (from memory for a moment, `verified-keys.ts`). */
  keys: VerifiedKeys;
  /** Sessions come with the console; without a resolver only API keys are accepted. */
  sessions?: SessionResolver;
};

export class AuthenticationRequiredError extends ApiError {
  constructor() {
    super("Sign in, or pass an API key as 'Authorization: Bearer <key>'.", "authentication_required");
  }
}

export class AdminRequiredError extends ApiError {
  constructor() {
    super("Only administrators may do this.", "admin_required");
  }
}

/** 403: an inference-only key on `/api`. */
export class KeyScopeExceededError extends ApiError {
  constructor() {
    super("This key is inference-only: it may call /v1, not the account API. Use a key with scope 'account', or sign in to the console.", "key_scope_exceeded");
  }
}

/** 403: an admin's key without admin scope on an admin route. */
export class AdminScopeRequiredError extends ApiError {
  constructor(scope: string) {
    super(
      `Admin routes take a console session or a key with scope 'admin'; this key's scope is '${scope}'. Create one in the console or with 'turnpike keys create --account EMAIL --admin'.`,
      "admin_scope_required");
  }
}

export class AccountDisabledError extends ApiError {
  constructor() {
    super("This account is disabled.", "account_disabled");
  }
}

/** The error for a presented key that `verifyApiKey` refused. */
export function keyRefusal(reason: Exclude<KeyCheck, { ok: true }>["reason"]): ApiError {
  if (reason === "account_disabled") return new AccountDisabledError();
  if (reason === "revoked") return new InvalidApiKeyError("This API key has been revoked.");
  if (reason === "expired") return new InvalidApiKeyError("This API key has expired.");
  if (reason === "parent_inactive") return new InvalidApiKeyError("This API key was created by a key that has been revoked or has expired.");
  return new InvalidApiKeyError("Incorrect API key provided. Create keys with 'turnpike keys create'.");
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
      const check = await options.keys.verify(bearerToken(request) ?? "");
      if (!check.ok) throw keyRefusal(check.reason);
      if (check.key.scope === "inference") throw new KeyScopeExceededError();
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

/**
 * The principal, when it may use admin routes: an admin's session, or a key with scope 'admin'
 * of an admin account or of the operator.
 */
export function requireAdmin(request: FastifyRequest): Principal {
  const principal = principalOf(request);
  if (principal.role !== "admin") throw new AdminRequiredError();
  if (principal.via === "key") {
    const scope = request.apiKey?.scope ?? "inference";
    if (scope !== "admin") throw new AdminScopeRequiredError(scope);
  }
  return principal;
}
