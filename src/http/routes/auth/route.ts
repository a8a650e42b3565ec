/**
 * Console sign-up, sign-in and sign-out:
 * - `POST /api/auth/signup` `{email, password, setup_code?}`: creates an account and signs it
 *   in. With the setup code `turnpike serve` printed (while no admin exists) it becomes the
 *   admin; a wrong or spent code is refused (403 `invalid_setup_code`). With `--signup closed`
 *   only that first admin may sign up (others: 403 `signup_closed`). Counted per address (429).
 * - `POST /api/auth/signin` `{email, password}`: throttled per account and per address (429);
 *   the attempt is reserved before the password is checked. A hash with old scrypt parameters is
 *   replaced on success.
 * - `POST /api/auth/signout`: ends the session.
 * - `GET /api/auth/session`: who is signed in, with the CSRF token for `x-csrf-token`.
 * - `GET /api/auth/setup`: whether sign-up is open and whether the first admin is still to come.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Kysely } from "kysely";
import type { Database } from "../../../store/schema.ts";
import { AccountExistsError, createAccount, isValidEmail, normalizeEmail } from "../../../accounts/accounts.ts";
import { forgetSetupCodes, isValidSetupCode, adminExists } from "../../../accounts/setup-code.ts";
import { hashPassword, needsRehash, verifyPassword } from "../../../auth/passwords.ts";
import { authSetupObjectSchema, sessionObjectSchema, signedOutSchema, type AuthSetupObject, type SessionObject, type SignedOut } from "../../../protocol/account-api.ts";
import { createSession, csrfTokenFor, deleteSession, findSession, renewSession } from "../../../auth/sessions.ts";
import { SIGN_UP_SUBJECT, type SignInThrottle } from "../../../auth/sign-in-throttle.ts";
import { ApiError, InvalidRequestError } from "../../../protocol/errors.ts";
import { signInRequestSchema, signUpRequestSchema } from "../../../protocol/account-api-requests.ts";
import { AccountDisabledError, AuthenticationRequiredError } from "../../middleware/account-auth/account-auth.ts";
import { checkCsrf, checkSameOrigin, clearSessionCookie, sessionTokenOf, setSessionCookie } from "../../middleware/console-session/console-session.ts";
import type { HostPolicy } from "../../middleware/allowed-hosts/allowed-hosts.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

export type AuthRoutesOptions = {
  database: Kysely<Database>;
  throttle: SignInThrottle;
  /** Counts sign-ups per client address (`SIGN_UP_LIMITS`). */
  signUpThrottle: SignInThrottle;
  /** The origins a sign-up or sign-in may come from. */
  hosts: HostPolicy;
  /** `--signup`: closed lets only the first admin (with the setup code) sign up. */
  signup: "open" | "closed";
};

/** What the console knows about who is signed in. */
export type SessionReply = SessionObject;


class InvalidCredentialsError extends ApiError {
  constructor() {
    super("Incorrect email or password.", "invalid_credentials");
  }
}

class TooManySignUpsError extends ApiError {
  constructor(retryAfterSeconds: number) {
    super(`Too many accounts were created from this address. Try again in ${retryAfterSeconds} seconds.`, "too_many_sign_ups", { headers: { "retry-after": String(retryAfterSeconds) } });
  }
}

class TooManySignInAttemptsError extends ApiError {
  constructor(retryAfterSeconds: number) {
    super(`Too many failed sign-in attempts. Try again in ${retryAfterSeconds} seconds.`, "too_many_sign_in_attempts", { headers: { "retry-after": String(retryAfterSeconds) } });
  }
}

class SignUpClosedError extends ApiError {
  constructor() {
    super("Sign-up is closed on this server. Ask an administrator for an account.", "signup_closed");
  }
}

class InvalidSetupCodeError extends ApiError {
  constructor() {
    super("This setup code is not valid: it is mistyped, or this server has an administrator already. Leave it empty to create a regular account.", "invalid_setup_code", { param: "setup_code" });
  }
}

class EmailTakenError extends ApiError {
  constructor() {
    super("An account with this email exists already. Sign in instead.", "account_exists", { param: "email" });
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

export const signUpOperation = defineOperation({
  method: "post",
  path: "/api/auth/signup",
  tag: "Auth",
  summary: "Create an account and sign in (sets the session cookie). With the setup code, the first admin.",
  auth: "none",
  body: signUpRequestSchema,
  example: { email: "ada@example.com", password: "correct horse battery" },
  success: { status: 201, description: "The session: `id`, `email`, `role`, `csrf_token`." },
  response: sessionObjectSchema,
  errors: ["account_exists", "signup_closed", "invalid_setup_code", "too_many_sign_ups"],
  schemas: { SignUpRequest: signUpRequestSchema, Session: sessionObjectSchema },
  async handler({ request, reply, body: parsedBody }, options: AuthRoutesOptions): Promise<SessionReply> {
    const { database } = options;
    checkSameOrigin(request, options.hosts);
    const body = parsedBody();
    const email = normalizeEmail(body.email);
    if (!isValidEmail(email)) throw new InvalidRequestError("Invalid 'email': enter an email address like name@example.com.", "email");
    const setupCode = body.setup_code?.trim() || undefined;
    if (setupCode === undefined && options.signup === "closed") throw new SignUpClosedError();
    // Reserved before anything else is looked at, so guessing setup codes is throttled too.
    const attempt = await options.signUpThrottle.reserve(SIGN_UP_SUBJECT, request.ip);
    if (!attempt.allowed) throw new TooManySignUpsError(attempt.retryAfterSeconds);
    if (setupCode !== undefined && !(await isValidSetupCode(database, setupCode))) {
      request.log.info("sign-up with an invalid setup code refused");
      throw new InvalidSetupCodeError();
    }
    let account;
    try {
      account = await createAccount(database, { email, password: body.password, role: "user" });
    } catch (error) {
      if (error instanceof AccountExistsError) throw new EmailTakenError();
      throw error;
    }
    // The setup code makes the first admin; the claim's primary key makes sure only one of
    // several simultaneous sign-ups with it does (the others stay users).
    if (setupCode !== undefined && (await claimFirstAdmin(database, account.id))) {
      account = { ...account, role: "admin" as const };
      await forgetSetupCodes(database);
    }
    request.log.info({ account_id: account.id, role: account.role }, "account signed up");
    return startSession(database, request, reply, account);
  },
});

export const signInOperation = defineOperation({
  method: "post",
  path: "/api/auth/signin",
  tag: "Auth",
  summary: "Sign in with email and password (sets the session cookie).",
  auth: "none",
  body: signInRequestSchema,
  example: { email: "ada@example.com", password: "correct horse battery" },
  success: { status: 200, description: "The session: `id`, `email`, `role`, `csrf_token`." },
  response: sessionObjectSchema,
  errors: ["invalid_credentials", "account_disabled", "too_many_sign_in_attempts"],
  schemas: { SignInRequest: signInRequestSchema, Session: sessionObjectSchema },
  async handler({ request, reply, body: parsedBody }, options: AuthRoutesOptions): Promise<SessionReply> {
    const { database, throttle } = options;
    checkSameOrigin(request, options.hosts);
    const body = parsedBody();
    const email = normalizeEmail(body.email);
    // One atomic step: however many attempts arrive at once, at most the limit's worth get past it.
    const attempt = await throttle.reserve(email, request.ip);
    if (!attempt.allowed) throw new TooManySignInAttemptsError(attempt.retryAfterSeconds);
    let row;
    let valid: boolean;
    try {
      row = await database.selectFrom("accounts").select(["id", "email", "role", "password_hash", "disabled_at"]).where("email", "=", email).executeTakeFirst();
      valid =
        row?.password_hash != null
          ? await verifyPassword(body.password, row.password_hash)
          : await verifyPassword(body.password, await (decoyHash ??= hashPassword("decoy password"))).then(() => false);
    } catch (error) {
      // Not the client's fault (the database is away): the attempt does not count.
      await throttle.release(email, request.ip);
      throw error;
    }
    if (!valid || row === undefined) {
      request.log.info({ reason: row === undefined ? "unknown email" : "wrong password" }, "sign-in refused");
      throw new InvalidCredentialsError();
    }
    await throttle.succeeded(email, request.ip);
    if (row.disabled_at !== null) throw new AccountDisabledError();
    if (row.password_hash != null && needsRehash(row.password_hash)) await rehash(database, request, row.id, row.password_hash, body.password);
    request.log.info({ account_id: row.id }, "signed in");
    return startSession(database, request, reply, row);
  },
});

export const signOutOperation = defineOperation({
  method: "post",
  path: "/api/auth/signout",
  tag: "Auth",
  summary: "End the session.",
  auth: "none",
  success: { status: 200, description: "`{signed_out: true}`." },
  response: signedOutSchema,
  errors: ["csrf_failed"],
  schemas: { SignedOut: signedOutSchema },
  async handler({ request, reply }, { database, hosts }: AuthRoutesOptions): Promise<SignedOut> {
    const token = sessionTokenOf(request);
    if (token !== undefined && (await findSession(database, token)) !== undefined) {
      checkCsrf(request, token, hosts);
      await deleteSession(database, token);
    }
    clearSessionCookie(request, reply);
    return { signed_out: true };
  },
});

export const currentSessionOperation = defineOperation({
  method: "get",
  path: "/api/auth/session",
  tag: "Auth",
  summary: "Who is signed in, with the session's CSRF token.",
  auth: "none",
  success: { status: 200, description: "The session: `id`, `email`, `role`, `csrf_token`." },
  response: sessionObjectSchema,
  errors: ["authentication_required", "account_disabled"],
  schemas: { Session: sessionObjectSchema },
  async handler({ request, reply }, { database }: AuthRoutesOptions): Promise<SessionReply> {
    reply.header("cache-control", "no-store");
    const token = sessionTokenOf(request);
    const session = token === undefined ? undefined : await findSession(database, token);
    if (token === undefined || session === undefined) throw new AuthenticationRequiredError();
    if (session.disabled) throw new AccountDisabledError();
    // Sliding expiry: a console in use keeps its session.
    const renewed = await renewSession(database, token);
    if (renewed !== undefined) setSessionCookie(request, reply, token, renewed);
    return { id: session.accountId, email: session.email, role: session.role, csrf_token: csrfTokenFor(token) };
  },
});

export const authSetupOperation = defineOperation({
  method: "get",
  path: "/api/auth/setup",
  tag: "Auth",
  summary: "Whether sign-up is open and whether the first admin is still to come.",
  auth: "none",
  success: { status: 200, description: "`{object: \"auth_setup\", signup, setup_required}`." },
  response: authSetupObjectSchema,
  errors: [],
  schemas: { AuthSetup: authSetupObjectSchema },
  async handler({ reply }, options: AuthRoutesOptions): Promise<AuthSetupObject> {
    reply.header("cache-control", "no-store");
    return { object: "auth_setup", signup: options.signup, setup_required: !(await adminExists(options.database)) };
  },
});

export const AUTH_OPERATIONS = [signUpOperation, signInOperation, signOutOperation, currentSessionOperation, authSetupOperation];

export function registerAuthRoutes(app: FastifyInstance, options: AuthRoutesOptions): void {
  registerOperations(app, AUTH_OPERATIONS, { context: options });
}

/** Replaces a hash made with old scrypt parameters by one with today's (unless it changed meanwhile). */
async function rehash(database: Kysely<Database>, request: FastifyRequest, accountId: string, previous: string, password: string): Promise<void> {
  try {
    const replaced = await database
      .updateTable("accounts")
      .set({ password_hash: await hashPassword(password) })
      .where("id", "=", accountId)
      .where("password_hash", "=", previous)
      .executeTakeFirst();
    if (Number(replaced.numUpdatedRows) > 0) request.log.info({ account_id: accountId }, "password hash upgraded to today's scrypt parameters");
  } catch (error) {
    // The sign-in stands; the next one tries again.
    request.log.warn({ err: error, account_id: accountId }, "could not upgrade a password hash");
  }
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
