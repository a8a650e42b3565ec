/**
 * PostgreSQL through `pg`, for several Turnpike nodes sharing one database.
 * BIGINT columns come back as JavaScript numbers (all our integers are far below 2^53).
 *
 * A broken connection never ends the process: every client carries an 'error' listener from the
 * moment it is made, whether it sits idle in the pool or is checked out by a query or a
 * transaction (pg emits 'error' on a checked-out client whose socket dies, and an EventEmitter
 * without a listener throws it). The query on it rejects with a connection error, which the HTTP
 * layer answers as 503 `database_unavailable`, and the pool replaces the connection.
 */
import pg from "pg";
import { Kysely, PostgresDialect } from "kysely";
import type { Database } from "./schema.ts";
import { withDialect } from "./dialect.ts";
import { DatabaseTimeoutError, markStoreError } from "./errors.ts";

const INT8_OID = 20;
pg.types.setTypeParser(INT8_OID, (value) => Number(value));

/** How long opening a connection may take before the request waiting for it gets a 503. */
const CONNECT_TIMEOUT_MS = 5_000;
/** Idle time before the kernel starts probing a connection whose peer may be gone. */
const KEEP_ALIVE_DELAY_MS = 10_000;

export type PostgresOptions = {
  /**
   * A pooled connection broke, idle or in use (the server restarted, a proxy or
   * `pg_terminate_backend` cut it, a query went unanswered past `queryTimeoutMs`). The pool drops
   * it and connects afresh for the next query.
   */
  onConnectionError?: (error: Error) => void;
  /**
   * Milliseconds a query may go unanswered. Past it the query fails with `DatabaseTimeoutError`
   * and its connection is dropped (a server that stopped answering, packets dropped on the way,
   * never answers on it again); PostgreSQL also cancels a statement running this long
   * (`statement_timeout`) and ends a transaction left idle this long. Undefined: no limit
   * (migrations, the CLI).
   */
  queryTimeoutMs?: number;
};

export function openPostgres(url: string, options: PostgresOptions = {}): Kysely<Database> {
  const timeout = options.queryTimeoutMs;
  const onError = (error: Error) => options.onConnectionError?.(error);
  const pool = new pg.Pool({
    connectionString: url,
    max: 10,
    // A server that accepts the connection but never answers must not hold requests forever.
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    // A peer that vanished without a reset is found out on idle connections too.
    keepAlive: true,
    keepAliveInitialDelayMillis: KEEP_ALIVE_DELAY_MS,
    ...(timeout === undefined ? {} : { statement_timeout: timeout, idle_in_transaction_session_timeout: timeout }),
    Client: guardedClient(onError, timeout),
  });
  // The pool re-emits an idle client's error; the client's own listener has reported it already.
  pool.on("error", () => {});
  // What connecting throws is the store's too (`isStoreError`), as what queries throw is.
  const storePool = {
    Client: (pool as unknown as { Client: typeof pg.Client }).Client,
    options: pool.options,
    connect: () => pool.connect().catch((error: unknown) => Promise.reject(markStoreError(error))),
    end: () => pool.end(),
  };
  return withDialect(new Kysely<Database>({ dialect: new PostgresDialect({ pool: storePool }) }), "postgres");
}

type QueryFunction = (...args: unknown[]) => unknown;

/** How much longer than the server's own statement timeout the client waits before it gives up on a connection. */
const SERVER_FIRST_MS = 1_000;

/**
 * A `pg.Client` that always listens for 'error', and whose promise queries fail after
 * `timeoutMs` without an answer, dropping the connection they were sent on.
 */
function guardedClient(onError: (error: Error) => void, timeoutMs: number | undefined): typeof pg.Client {
  return class GuardedClient extends pg.Client {
    constructor(config?: string | pg.ClientConfig) {
      super(config);
      this.on("error", onError);
    }

    // Kysely queries through the promise form; the callback and submittable forms pass through.
    // (`never`: assignable to every overload's return type, which a spread call cannot name.)
    override query(...args: unknown[]): never {
      const result = (super.query as QueryFunction).apply(this, args);
      if (!(result instanceof Promise)) return result as never;
      // PostgreSQL's own statement_timeout ends a slow statement first and keeps the connection;
      // the client's timer, a little later, is for a server or route that answers nothing at all.
      const answered = timeoutMs === undefined ? result : answeredWithin(result, timeoutMs + SERVER_FIRST_MS, () => this.connection.stream.destroy());
      // What a query throws is the store's (`isStoreError`).
      return answered.catch((error: unknown) => Promise.reject(markStoreError(error))) as never;
    }
  };
}

/**
 * `result`, or `DatabaseTimeoutError` once `timeoutMs` passed without it. At the timeout
 * `dropConnection` destroys the socket: pg then fails the query and marks the client unusable, so
 * the pool discards it instead of handing it to the next request. The error is given only then,
 * once the client is known to be out of use.
 */
async function answeredWithin<T>(result: Promise<T>, timeoutMs: number, dropConnection: () => void): Promise<T> {
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    dropConnection();
  }, timeoutMs);
  try {
    return await result;
  } catch (error) {
    if (timedOut) throw new DatabaseTimeoutError(timeoutMs, { cause: error });
    throw error;
  } finally {
    clearTimeout(timer);
  }
}
