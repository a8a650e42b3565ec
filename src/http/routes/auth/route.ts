/**
 * Console sign-up, sign-in and sign-out:
 * - `POST /api/auth/signup` `{email, password}`: creates an account (the first one on an
 *   installation without an admin becomes admin) and signs it in.
 * - `POST /api/auth/signin` `{email, password}`: throttled per account and per address (429).
 * - `POST /api/auth/signout`: ends the session.
 * - `GET /api/auth/session`: who is signed in, with the CSRF token for `x-csrf-token`.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Kysely } from "kysely";
import { z } from "zod";
import type { Database } from "../../../store/schema.ts";
import { AccountExistsError, createAccount, isValidEmail, normalizeEmail } from "../../../accounts/accounts.ts";
import { hashPassword, verifyPassword } from "../../../auth/passwords.ts";
import type { SessionObject } from "../../../protocol/account-api.ts";
import { createSession, csrfTokenFor, deleteSession, findSession, renewSession } from "../../../auth/sessions.ts";
import { SIGN_UP_SUBJECT, type SignInThrottle } from "../../../auth/sign-in-throttle.ts";
import { ApiError, InvalidRequestError } from "../../../protocol/errors.ts";
import { parseWithSchema } from "../../../protocol/parse.ts";
import { AccountDisabledError, AuthenticationRequiredError } from "../../middleware/account-auth/account-auth.ts";
import { checkCsrf, checkSameOrigin, clearSessionCookie, sessionTokenOf, setSessionCookie } from "../../middleware/console-session/console-session.ts";

export type AuthRoutesOptions = {
  database: Kysely<Database>;
  throttle: SignInThrottle;
  /** Counts sign-ups per client address (`SIGN_UP_LIMITS`). */
  signUpThrottle: SignInThrottle;
  publicOrigin: string | null;
};

/** What the console knows about who is signed in. */
export type SessionReply = SessionObject;

const credentialsSchema = z.object({
  email: z.string().max(254),
  password: z.string().min(1).max(1024),
});

const signUpSchema = credentialsSchema.extend({ password: z.string().min(8, "must have at least 8 characters").max(1024) });

class InvalidCredentialsError extends ApiError {
  constructor() {
    super("Incorrect email or password.", { status: 401, type: "invalid_request_error", code: "invalid_credentials" });
  }
}

class TooManySignUpsError extends ApiError {
  constructor(retryAfterSeconds: number) {
    super(`Too many accounts were created from this address. Try again in ${retryAfterSeconds} seconds.`, {
      status: 429,
      type: "rate_limit_error",
      code: "too_many_sign_ups",
      headers: { "retry-after": String(retryAfterSeconds) },
    });
  }
}

class TooManySignInAttemptsError extends ApiError {
  constructor(retryAfterSeconds: number) {
    super(`Too many failed sign-in attempts. Try again in ${retryAfterSeconds} seconds.`, {
      status: 429,
      type: "rate_limit_error",
      code: "too_many_sign_in_attempts",
      headers: { "retry-after": String(retryAfterSeconds) },
    });
  }
}

class EmailTakenError extends ApiError {
  constructor() {
    super("An account with this email exists already. Sign in instead.", { status: 409, type: "invalid_request_error", code: "account_exists", param: "email" });
  }
}

/** Spent on unknown emails so a wrong email takes as long as a wrong password. */
let decoyHash: Promise<string> | undefined;

async function startSession(database: Kysely<Database>, request: FastifyRequest, reply: FastifyReply, account: { id: string; email: string; role: "admin" | "user" }): Promise<SessionReply> {
  // A new sign-in replaces the browser's previous session, never reuses it.
  const previous = sessionTokenOf(request);
  if (previous !== undefined) await deleteSession(database, previous);
  const { token, expires } = await createSession(database, account.id);
  setSessionCookie(request, reply, token, expires);
  return { id: account.id, email: account.email, role: account.role, csrf_token: csrfTokenFor(token) };
}

export function registerAuthRoutes(app: FastifyInstance, options: AuthRoutesOptions): void {
  const { database, throttle } = options;

  app.post("/api/auth/signup", async function signUp(request, reply): Promise<SessionReply> {
    checkSameOrigin(request, options.publicOrigin);
    const body = parseWithSchema(signUpSchema, request.body);
    const email = normalizeEmail(body.email);
    if (!isValidEmail(email)) throw new InvalidRequestError("Invalid 'email': enter an email address like name@example.com.", "email");
    const wait = await options.signUpThrottle.retryAfterSeconds(SIGN_UP_SUBJECT, request.ip);
    if (wait > 0) throw new TooManySignUpsError(wait);
    await options.signUpThrottle.recordFailure(SIGN_UP_SUBJECT, request.ip);
    let account;
    try {
      account = await createAccount(database, { email, password: body.password, role: "user" });
    } catch (error) {
      if (error instanceof AccountExistsError) throw new EmailTakenError();
      throw error;
    }
    // The first account of an installation without an admin runs it; the claim's primary key
    // makes sure only one of several simultaneous first sign-ups does.
    if (await claimFirstAdmin(database, account.id)) account = { ...account, role: "admin" as const };
    request.log.info({ account_id: account.id, role: account.role }, "account signed up");
    reply.code(201);
    return startSession(database, request, reply, account);
  });

  app.post("/api/auth/signin", async function signIn(request, reply): Promise<SessionReply> {
    checkSameOrigin(request, options.publicOrigin);
    const body = parseWithSchema(credentialsSchema, request.body);
    const email = normalizeEmail(body.email);
    const wait = await throttle.retryAfterSeconds(email, request.ip);
    if (wait > 0) throw new TooManySignInAttemptsError(wait);
    const row = await database.selectFrom("accounts").select(["id", "email", "role", "password_hash", "disabled_at"]).where("email", "=", email).executeTakeFirst();
    const valid =
      row?.password_hash != null
        ? await verifyPassword(body.password, row.password_hash)
        : await verifyPassword(body.password, await (decoyHash ??= hashPassword("decoy password"))).then(() => false);
    if (!valid || row === undefined) {
      await throttle.recordFailure(email, request.ip);
      request.log.info({ reason: row === undefined ? "unknown email" : "wrong password" }, "sign-in refused");
      throw new InvalidCredentialsError();
    }
    await throttle.recordSuccess(email);
    if (row.disabled_at !== null) throw new AccountDisabledError();
    request.log.info({ account_id: row.id }, "signed in");
    return startSession(database, request, reply, row);
  });

  app.post("/api/auth/signout", async function signOut(request, reply): Promise<{ signed_out: true }> {
    const token = sessionTokenOf(request);
    if (token !== undefined && (await findSession(database, token)) !== undefined) {
      checkCsrf(request, token, options.publicOrigin);
      await deleteSession(database, token);
    }
    clearSessionCookie(request, reply);
    return { signed_out: true };
  });

  app.get("/api/auth/session", async function currentSession(request, reply): Promise<SessionReply> {
    reply.header("cache-control", "no-store");
    const token = sessionTokenOf(request);
    const session = token === undefined ? undefined : await findSession(database, token);
    if (token === undefined || session === undefined) throw new AuthenticationRequiredError();
    if (session.disabled) throw new AccountDisabledError();
    // Sliding expiry: a console in use keeps its session.
    const renewed = await renewSession(database, token);
    if (renewed !== undefined) setSessionCookie(request, reply, token, renewed);
    return { id: session.accountId, email: session.email, role: session.role, csrf_token: csrfTokenFor(token) };
  });
}

/** Makes the account admin if the installation has none and nobody claimed that before. */
async function claimFirstAdmin(database: Kysely<Database>, accountId: string): Promise<boolean> {
  const admin = await database.selectFrom("accounts").select("id").where("role", "=", "admin").executeTakeFirst();
  if (admin !== undefined) return false;
  const claimed = await database
    .insertInto("installation_claims")
    .values({ name: "first_admin", account_id: accountId, created_at: Date.now() })
    .onConflict((conflict) => conflict.column("name").doNothing())
    .executeTakeFirst();
  if (Number(claimed.numInsertedOrUpdatedRows ?? 0n) === 0) return false;
  await database.updateTable("accounts").set({ role: "admin" }).where("id", "=", accountId).execute();
  return true;
}
