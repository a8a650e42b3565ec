/**
 * Console sessions: a random token in an HttpOnly cookie, its SHA-256 in the database. The
 * CSRF token is derived from the session token (a keyed hash), so it needs no storage and
 * changes with every session.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { Kysely } from "kysely";
import type { Database } from "../store/schema.ts";

/** How long a session lasts from sign-in, or from its last renewal (the console renews it on load). */
export const SESSION_TTL_MS = 30 * 24 * 60 * 60 * 1000;

export type SessionAccount = {
  accountId: string;
  email: string;
  role: "admin" | "user";
  disabled: boolean;
};

function sha256(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/** Starts a session for an account; returns the token for the cookie (never stored). */
export async function createSession(database: Kysely<Database>, accountId: string, now = Date.now()): Promise<{ token: string; expires: number }> {
  const token = randomBytes(32).toString("base64url");
  const expires = now + SESSION_TTL_MS;
  await database.insertInto("sessions").values({ token_hash: sha256(token), account_id: accountId, created_at: now, expires_at: expires }).execute();
  return { token, expires };
}

/** The account of a live session, or undefined for an unknown or expired token. */
export async function findSession(database: Kysely<Database>, token: string, now = Date.now()): Promise<SessionAccount | undefined> {
  if (token.length === 0 || token.length > 128) return undefined;
  const row = await database
    .selectFrom("sessions")
    .innerJoin("accounts", "accounts.id", "sessions.account_id")
    .select(["accounts.id", "accounts.email", "accounts.role", "accounts.disabled_at", "sessions.expires_at"])
    .where("sessions.token_hash", "=", sha256(token))
    .executeTakeFirst();
  if (row === undefined || Number(row.expires_at) <= now) return undefined;
  return { accountId: row.id, email: row.email, role: row.role, disabled: row.disabled_at !== null };
}

/**
 * Extends a live session to a full `SESSION_TTL_MS` from now, at most once a day (sessions stay
 * alive while people use the console). Returns the new expiry, or undefined when it was not due.
 */
export async function renewSession(database: Kysely<Database>, token: string, now = Date.now()): Promise<number | undefined> {
  const expires = now + SESSION_TTL_MS;
  const renewed = await database
    .updateTable("sessions")
    .set({ expires_at: expires })
    .where("token_hash", "=", sha256(token))
    .where("expires_at", ">", now)
    .where("expires_at", "<", expires - RENEW_AFTER_MS)
    .executeTakeFirst();
  return Number(renewed.numUpdatedRows) > 0 ? expires : undefined;
}

/** How old a session's last renewal must be before it is renewed again. */
const RENEW_AFTER_MS = 24 * 60 * 60 * 1000;

/** Ends one session (sign-out). */
export async function deleteSession(database: Kysely<Database>, token: string): Promise<void> {
  await database.deleteFrom("sessions").where("token_hash", "=", sha256(token)).execute();
}

/** Ends every session of an account (it was disabled). */
export async function deleteAccountSessions(database: Kysely<Database>, accountId: string): Promise<void> {
  await database.deleteFrom("sessions").where("account_id", "=", accountId).execute();
}

/** Drops expired sessions. */
export async function sweepSessions(database: Kysely<Database>, now = Date.now()): Promise<void> {
  await database.deleteFrom("sessions").where("expires_at", "<=", now).execute();
}

/** The CSRF token of a session: what the console sends back in `x-csrf-token`. */
export function csrfTokenFor(sessionToken: string): string {
  return createHash("sha256").update(`turnpike-csrf:${sessionToken}`, "utf8").digest("base64url");
}

/** True when `presented` is the CSRF token of this session (constant-time). */
export function isValidCsrfToken(sessionToken: string, presented: string | undefined): boolean {
  if (presented === undefined) return false;
  const expected = Buffer.from(csrfTokenFor(sessionToken));
  const actual = Buffer.from(presented);
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}
