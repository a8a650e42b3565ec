/**
 * Tells a database that cannot be reached (or is going away, or is too busy right now) from a
 * bug: the first is the operator's outage, answered 503 with a retry, never a 500.
 */

/** Socket-level failures on the way to PostgreSQL. */
const NETWORK_CODES = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH"]);

/**
 * PostgreSQL SQLSTATEs of an unavailable server: class 08 (connection exception), 57P01–57P03
 * (admin or crash shutdown, cannot connect now), 53300 (too many connections).
 */
function isUnavailableSqlState(code: string): boolean {
  return code.startsWith("08") || code === "57P01" || code === "57P02" || code === "57P03" || code === "53300";
}

/** node-pg's own messages for a connection that died or never came. */
const PG_CONNECTION_MESSAGES = [/^Connection terminated/, /connection error and is not queryable/, /^timeout exceeded when trying to connect/];

/** SQLite's busy and locked result codes: another process holds the database past the busy timeout. */
const SQLITE_BUSY = new Set([5, 6]);

export function isDatabaseUnavailable(error: unknown): boolean {
  if (typeof error !== "object" || error === null) return false;
  const { code, errcode, message } = error as { code?: unknown; errcode?: unknown; message?: unknown };
  if (typeof code === "string" && (NETWORK_CODES.has(code) || (/^[0-9A-Z]{5}$/.test(code) && isUnavailableSqlState(code)))) return true;
  if (code === "ERR_SQLITE_ERROR" && typeof errcode === "number" && SQLITE_BUSY.has(errcode & 0xff)) return true;
  if (typeof message === "string" && PG_CONNECTION_MESSAGES.some((pattern) => pattern.test(message))) return true;
  // AggregateError (several addresses refused) and wrapped causes.
  const nested = (error as { errors?: unknown; cause?: unknown });
  if (Array.isArray(nested.errors) && nested.errors.length > 0 && nested.errors.every(isDatabaseUnavailable)) return true;
  return nested.cause !== undefined && nested.cause !== error && isDatabaseUnavailable(nested.cause);
}
