/**
 * Tells a database that cannot be reached (or is going away, or is too busy right now) from a
 * bug: the first is the operator's outage, answered 503 with a retry, never a 500.
 */

/** Errors thrown by the database drivers, marked where the store calls them (`markStoreError`). */
const storeErrors = new WeakSet<object>();

/** Marks `error` as thrown by the store (a database driver); returns it, for `throw markStoreError(error)`. */
export function markStoreError<T>(error: T): T {
  if (typeof error === "object" && error !== null) storeErrors.add(error);
  return error;
}

/**
 * True for an error the store threw: the database's drivers (`sqlite.ts`, `postgres.ts`) mark
 * what they throw. Socket errors look alike wherever they come from (a client that closed its
 * connection mid-upload fails the body's read with ECONNRESET, as a dropped database connection
 * does), so only the store's may be called database failures.
 */
export function isStoreError(error: unknown): boolean {
  if (typeof error !== "object" || error === null) return false;
  if (storeErrors.has(error)) return true;
  // Wrapped by code that called the store.
  const cause = (error as { cause?: unknown }).cause;
  return cause !== undefined && cause !== error && isStoreError(cause);
}

/** A database failure: an error the store threw that says the database is unavailable (answered 503). */
export function isDatabaseFailure(error: unknown): boolean {
  return isStoreError(error) && isDatabaseUnavailable(error);
}

/** A PostgreSQL query that went unanswered past `--database-timeout`; its connection was dropped. */
export class DatabaseTimeoutError extends Error {
  override readonly name = "DatabaseTimeoutError";
  /** Milliseconds the query waited. */
  readonly timeoutMs: number;

  constructor(timeoutMs: number, options?: ErrorOptions) {
    super(`the database did not answer within ${timeoutMs / 1000} s`, options);
    this.timeoutMs = timeoutMs;
  }
}

/** Socket-level failures on the way to PostgreSQL. */
const NETWORK_CODES = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH"]);

/**
 * PostgreSQL SQLSTATEs of an unavailable server: class 08 (connection exception), 57P01–57P03
 * (admin or crash shutdown, cannot connect now), 53300 (too many connections), 57014 (a statement
 * cancelled, as `statement_timeout` does to one that ran too long), 25P03 (a transaction left
 * idle too long, ended by `idle_in_transaction_session_timeout`).
 */
function isUnavailableSqlState(code: string): boolean {
  return code.startsWith("08") || ["57P01", "57P02", "57P03", "53300", "57014", "25P03"].includes(code);
}

/** node-pg's own messages for a connection that died or never came. */
const PG_CONNECTION_MESSAGES = [/^Connection terminated/, /connection error and is not queryable/, /^timeout exceeded when trying to connect/];

/** SQLite's busy and locked result codes: another process holds the database past the busy timeout. */
const SQLITE_BUSY = new Set([5, 6]);

/** True for a database that is away, unreachable, too slow or too busy (answered 503), false for anything else. */
export function isDatabaseUnavailable(error: unknown): boolean {
  if (typeof error !== "object" || error === null) return false;
  if (error instanceof DatabaseTimeoutError) return true;
  const { code, errcode, message } = error as { code?: unknown; errcode?: unknown; message?: unknown };
  if (typeof code === "string" && (NETWORK_CODES.has(code) || (/^[0-9A-Z]{5}$/.test(code) && isUnavailableSqlState(code)))) return true;
  if (code === "ERR_SQLITE_ERROR" && typeof errcode === "number" && SQLITE_BUSY.has(errcode & 0xff)) return true;
  if (typeof message === "string" && PG_CONNECTION_MESSAGES.some((pattern) => pattern.test(message))) return true;
  // AggregateError (several addresses refused) and wrapped causes.
  const nested = (error as { errors?: unknown; cause?: unknown });
  if (Array.isArray(nested.errors) && nested.errors.length > 0 && nested.errors.every(isDatabaseUnavailable)) return true;
  return nested.cause !== undefined && nested.cause !== error && isDatabaseUnavailable(nested.cause);
}
