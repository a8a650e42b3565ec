/**
 * The Responses API's stored responses (`POST /v1/responses` with `store: true`, read back by
 * `GET /v1/responses/{id}`, continued by `previous_response_id`), in Turnpike's database so that
 * any node can read and continue them. Each row belongs to the account of the key that made it:
 * every read names the account, and another account's id reads as unknown, nothing leaked.
 *
 * Writes are group-committed: saves made while a write is in flight wait for it to finish and go
 * in the next transaction together, so a busy node makes one commit per round trip, not one per
 * response. A finished response's save may be *deferred* (`save(record, { deferred: true })`,
 * what `POST /v1/responses` does): it waits up to the commit window (`commitWindowMs`, 10 ms by
 * default) for other saves to share its commit, and its client need not wait for it. Until it is
 * written, this node reads it from memory (`get`, `chain`, `inputItems`), so a client continuing
 * or reading its response on the same node never misses it; another node sees it once the window
 * closed and the commit went through (`visibleWithinMs`). Other saves (a background response's
 * states) are written at once. A save resolves once its row is durable. Each statement is one
 * prepared SQL text per row count (`upsertText`), not built anew per commit.
 *
 * Rows are size-capped (`MAX_STORED_RESPONSE_BYTES`), expire `retentionSeconds` after they were
 * created (reads ignore them from then on) and are deleted by the sweeper (`sweep`).
 */
import { CompiledQuery, sql, type Insertable, type Kysely, type Selectable } from "kysely";
import { dialectOf, type Dialect } from "../store/dialect.ts";
import type { Database, ResponseTable, StoredResponseStatus } from "../store/schema.ts";
import { statementChunks } from "../store/statement-chunks.ts";
import { BrokenResponseChainError, InputItemCursorError, ResponseChainTooLongError, ResponseIdTakenError, StoredResponseTooLargeError } from "./store-errors.ts";

export { BrokenResponseChainError, InputItemCursorError, ResponseChainTooLongError, ResponseIdTakenError, StoredResponseTooLargeError };
export type { StoredResponseStatus };

/**
 * The most a stored response may weigh: the UTF-8 bytes of its input items' JSON plus its
 * response resource's JSON, 8 MiB. Far above any conversation turn a context window holds (a
 * 128k-token turn is well under 1 MiB of text), so only inline images and files come near it;
 * low enough that a chain of them read back for `previous_response_id` stays in memory's reach
 * and a row stays far inside PostgreSQL's 1 GiB field limit.
 */
export const MAX_STORED_RESPONSE_BYTES = 8 * 1024 * 1024;

/** How long a stored response is kept by default: 30 days, as OpenAI keeps them. */
export const DEFAULT_RETENTION_SECONDS = 30 * 24 * 60 * 60;

/** An item a response's request added (a message, a function call output …): a JSON object with its `id`. */
export type StoredInputItem = { id: string } & Record<string, unknown>;

/** What a node saves: the response as it stands now. */
export type ResponseRecord<Resource extends object = Record<string, unknown>, Item extends { id: string } = StoredInputItem> = {
  /** `resp_…` */
  id: string;
  /** Owner account; null for the operator's keys. */
  accountId: string | null;
  keyId: string | null;
  model: string;
  status: StoredResponseStatus;
  /** Milliseconds since the epoch; the row expires `retentionSeconds` after it. */
  createdAt: number;
  previousResponseId: string | null;
  background: boolean;
  /** The items this response's request added, in input order (not its ancestors'). */
  inputItems: readonly Item[];
  /** The response resource as `GET /v1/responses/{id}` returns it. */
  response: Resource;
};

/** A stored response as read back. */
export type StoredResponse<Resource extends object = Record<string, unknown>, Item extends { id: string } = StoredInputItem> = ResponseRecord<Resource, Item> & {
  /** Milliseconds since the epoch: the last save. */
  updatedAt: number;
  /** Milliseconds since the epoch: from then on the row reads as gone, and the sweeper deletes it. */
  expiresAt: number;
  /** `requestCancel` asked the node running it to stop. */
  cancelRequested: boolean;
  /** What counts against `MAX_STORED_RESPONSE_BYTES`. */
  sizeBytes: number;
};

/** A page of input items, as OpenAI's list endpoints answer. */
export type InputItemsPage<Item> = {
  object: "list";
  data: Item[];
  /** The first and last item's ids on this page; null when it is empty. */
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
};

export type InputItemsOptions = {
  /** An item id: the page starts after it (in `order`). */
  after?: string;
  /** 1 to 100; 20 by default. */
  limit?: number;
  /** `desc` (the default): the last input item first. */
  order?: "asc" | "desc";
};

export type ResponseStoreOptions = {
  /** How long a response is kept after it was created; `DEFAULT_RETENTION_SECONDS` by default. */
  retentionSeconds?: number;
  /** The clock (milliseconds); tests move it. */
  now?: () => number;
  /**
   * How long a deferred save waits for others to share its commit, in milliseconds
   * (`DEFAULT_COMMIT_WINDOW_MS`); 0 writes it at the next turn of the event loop, as other saves.
   */
  commitWindowMs?: number;
};

/**
 * A deferred save waits this long for other saves to share its commit. At one request at a time
 * (~1,500 responses a second on a laptop core) that is ~15 rows a commit, where a commit of its
 * own cost a response ~100 µs of CPU on SQLite (a 16-row commit ~16 µs a row; the store's
 * micro-benchmark in bench/README.md). Short enough that another node reading the response
 * right after its client heard the end waits for it at most this long plus a commit.
 */
export const DEFAULT_COMMIT_WINDOW_MS = 10;
/** A commit window closes early once this many deferred saves wait. */
const WINDOW_ROWS = 64;

/** Rows one statement carries at most this many bytes of (cut further into `statementChunks`). */
const STATEMENT_BYTES = 4 * 1024 * 1024;
/** A group commit takes at most this many bytes; the rest waits for the next. */
const BATCH_BYTES = 32 * 1024 * 1024;
/** Rows the sweeper deletes per statement, so that no delete holds its locks for long. */
const SWEEP_ROWS = 1000;

const ACTIVE_STATUSES: readonly StoredResponseStatus[] = ["queued", "in_progress"];

type Waiter = { resolve: () => void; reject: (error: unknown) => void };
type Row = Insertable<ResponseTable> & { id: string; size_bytes: number };
/**
 * The saves of one response waiting for the next commit: only the latest row is written.
 * `since`: when the first was made (`performance.now()`), where its commit window starts.
 */
type Pending = { row: Row; waiters: Waiter[]; since: number };

/** The columns a save writes, in the order of its statement's parameters. */
const COLUMNS = [
  "id",
  "account_id",
  "key_id",
  "model",
  "status",
  "created_at",
  "updated_at",
  "expires_at",
  "previous_response_id",
  "background",
  "size_bytes",
  "input_items",
  "response",
] as const satisfies ReadonlyArray<keyof Row>;

/** The upsert of `rows` rows in `dialect`: an id of another account's is never overwritten. */
function upsertText(dialect: Dialect, rows: number): string {
  let parameter = 0;
  const placeholder = dialect === "postgres" ? () => `$${++parameter}` : () => "?";
  const tuples = Array.from({ length: rows }, () => `(${COLUMNS.map(placeholder).join(", ")})`);
  return (
    `insert into "responses" (${COLUMNS.map((column) => `"${column}"`).join(", ")}) values ${tuples.join(", ")} ` +
    'on conflict ("id") do update set "status" = excluded."status", "updated_at" = excluded."updated_at", "size_bytes" = excluded."size_bytes", ' +
    '"input_items" = excluded."input_items", "response" = excluded."response" ' +
    'where "responses"."account_id" is not distinct from excluded."account_id"'
  );
}

/**
 * Stored responses over one database. One instance per node: its group commits are per instance.
 * `Resource` and `Item` are the shapes the caller saves; what was saved is read back as it was
 * written, unvalidated.
 */
export class ResponseStore<Resource extends object = Record<string, unknown>, Item extends { id: string } = StoredInputItem> {
  readonly #database: Kysely<Database>;
  readonly #retentionMs: number;
  readonly #now: () => number;
  readonly #commitWindowMs: number;
  /** By response id, in the order they were first saved. */
  #pending = new Map<string, Pending>();
  /** Deferred saves not yet durable (waiting or being written), by id: what this node reads from memory meanwhile. */
  #unwritten = new Map<string, Row>();
  /** The write loop, running or about to run; undefined when idle. */
  #loop: Promise<void> | undefined;
  /** Ends the commit window the write loop waits in, if it waits. */
  #closeWindow: (() => void) | undefined;
  /** Saves that must not wait for the window are pending (or `drain` asked for everything now). */
  #urgent = false;
  /** The upsert's SQL text by row count. */
  readonly #upserts = new Map<number, string>();
  #commits = 0;

  constructor(database: Kysely<Database>, options: ResponseStoreOptions = {}) {
    const retentionSeconds = options.retentionSeconds ?? DEFAULT_RETENTION_SECONDS;
    if (!(retentionSeconds > 0)) throw new RangeError(`retentionSeconds must be positive, not ${retentionSeconds}`);
    const commitWindowMs = options.commitWindowMs ?? DEFAULT_COMMIT_WINDOW_MS;
    if (!(commitWindowMs >= 0 && commitWindowMs <= 1000)) throw new RangeError(`commitWindowMs must be from 0 to 1000, not ${commitWindowMs}`);
    this.#database = database;
    this.#retentionMs = retentionSeconds * 1000;
    this.#now = options.now ?? Date.now;
    this.#commitWindowMs = commitWindowMs;
  }

  /**
   * How long after a deferred save another node may still not find the row: the commit window,
   * plus a margin for the commit itself. A read that misses a response that may be that fresh
   * (`previous_response_id` on another node) looks again after it.
   */
  get visibleWithinMs(): number {
    return this.#commitWindowMs + 40;
  }

  /** Transactions committed by the group commit so far (each carries one or more saves). */
  get commits(): number {
    return this.#commits;
  }

  /** Saves waiting for a commit (not yet durable). */
  get pending(): number {
    return this.#pending.size;
  }

  /**
   * Writes `record` (a new response, or the latest state of one: status, response, input items)
   * in the next group commit; resolves once it is durable, rejects if that commit failed. Throws
   * (as a rejection) `StoredResponseTooLargeError` at once when it weighs more than
   * `MAX_STORED_RESPONSE_BYTES`, and `ResponseIdTakenError` if another account owns the id.
   * The record is serialised now: changing the objects afterwards changes nothing written.
   */
  save(record: ResponseRecord<Resource, Item>, options: { deferred?: boolean } = {}): Promise<void> {
    const deferred = options.deferred === true;
    const inputItems = JSON.stringify(record.inputItems);
    const response = JSON.stringify(record.response);
    const sizeBytes = Buffer.byteLength(inputItems, "utf8") + Buffer.byteLength(response, "utf8");
    if (sizeBytes > MAX_STORED_RESPONSE_BYTES) return Promise.reject(new StoredResponseTooLargeError(record.id, sizeBytes, MAX_STORED_RESPONSE_BYTES));
    const row: Row = {
      id: record.id,
      account_id: record.accountId,
      key_id: record.keyId,
      model: record.model,
      status: record.status,
      created_at: record.createdAt,
      updated_at: this.#now(),
      expires_at: record.createdAt + this.#retentionMs,
      previous_response_id: record.previousResponseId,
      background: record.background ? 1 : 0,
      size_bytes: sizeBytes,
      input_items: inputItems,
      response,
    };
    return new Promise<void>((resolve, reject) => {
      const pending = this.#pending.get(row.id);
      if (pending === undefined) this.#pending.set(row.id, { row, waiters: [{ resolve, reject }], since: performance.now() });
      else {
        // Saved again before the last save was written: the newer state is the one to write.
        pending.row = row;
        pending.waiters.push({ resolve, reject });
      }
      if (deferred) this.#unwritten.set(row.id, row);
      else this.#unwritten.delete(row.id);
      if (!deferred || this.#pending.size >= WINDOW_ROWS) this.#flushSoon();
      this.#loop ??= this.#writeLoop();
    });
  }

  /** Resolves once every save made until now has been written or has failed; deferred ones are written now. */
  async drain(): Promise<void> {
    while (this.#loop !== undefined) {
      this.#flushSoon();
      await this.#loop;
    }
  }

  /** Ends the commit window: what is pending is written in the next commit. */
  #flushSoon(): void {
    this.#urgent = true;
    this.#closeWindow?.();
  }

  /** The deferred save of `id` not yet written, if it is `accountId`'s and not expired. */
  #unwrittenOf(accountId: string | null, id: string): Row | undefined {
    const row = this.#unwritten.get(id);
    if (row === undefined || row.account_id !== accountId || Number(row.expires_at) <= this.#now()) return undefined;
    return row;
  }

  /** The stored response `id` of `accountId` (null: the operator's), or undefined (unknown, expired, or another account's). */
  async get(accountId: string | null, id: string): Promise<StoredResponse<Resource, Item> | undefined> {
    const unwritten = this.#unwrittenOf(accountId, id);
    if (unwritten !== undefined) return this.#recordOf({ ...unwritten, cancel_requested: 0 });
    const row = await this.#database
      .selectFrom("responses")
      .selectAll()
      .where("id", "=", id)
      .where((expression) => (accountId === null ? expression("account_id", "is", null) : expression("account_id", "=", accountId)))
      .where("expires_at", ">", this.#now())
      .executeTakeFirst();
    return row === undefined ? undefined : this.#recordOf(row);
  }

  /** Deletes the stored response `id` of `accountId`; false when there was none to delete. */
  async delete(accountId: string | null, id: string): Promise<boolean> {
    // Written first, so that the delete finds it (and no later commit writes it back).
    if (this.#unwritten.has(id)) await this.drain();
    const result = await this.#database
      .deleteFrom("responses")
      .where("id", "=", id)
      .where((expression) => (accountId === null ? expression("account_id", "is", null) : expression("account_id", "=", accountId)))
      .where("expires_at", ">", this.#now())
      .executeTakeFirst();
    return Number(result.numDeletedRows) > 0;
  }

  /**
   * A page of the items response `id`'s request added (`GET /v1/responses/{id}/input_items`),
   * paged in memory from its one row (rows are size-capped); undefined for an unknown id.
   * Throws `InputItemCursorError` when `after` names no item of it, `RangeError` for a limit
   * outside 1..100.
   */
  async inputItems(accountId: string | null, id: string, options: InputItemsOptions = {}): Promise<InputItemsPage<Item> | undefined> {
    const limit = options.limit ?? 20;
    if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw new RangeError(`limit must be an integer from 1 to 100, not ${limit}`);
    const row = this.#unwrittenOf(accountId, id) ?? await this.#database
      .selectFrom("responses")
      .select("input_items")
      .where("id", "=", id)
      .where((expression) => (accountId === null ? expression("account_id", "is", null) : expression("account_id", "=", accountId)))
      .where("expires_at", ">", this.#now())
      .executeTakeFirst();
    if (row === undefined) return undefined;
    const items = JSON.parse(row.input_items) as Item[];
    const ordered = (options.order ?? "desc") === "asc" ? items : items.toReversed();
    let start = 0;
    if (options.after !== undefined) {
      const index = ordered.findIndex((item) => item.id === options.after);
      if (index === -1) throw new InputItemCursorError(options.after);
      start = index + 1;
    }
    const data = ordered.slice(start, start + limit);
    return { object: "list", data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: start + limit < ordered.length };
  }

  /**
   * The conversation that ends with response `id`: its stored responses from the oldest ancestor
   * to `id`, following `previous_response_id`. Undefined when `id` itself is unknown, expired or
   * another account's. Throws `BrokenResponseChainError` naming the first ancestor that is gone
   * (deleted, expired, or not this account's), and `ResponseChainTooLongError` past
   * `maxResponses` responses. Two queries whatever the length: the links are walked in the
   * database over the small columns (a recursive query, bounded), then the rows fetched by id.
   */
  async chain(accountId: string | null, id: string, options: { maxResponses: number }): Promise<Array<StoredResponse<Resource, Item>> | undefined> {
    const { maxResponses } = options;
    if (!Number.isInteger(maxResponses) || maxResponses < 1) throw new RangeError(`maxResponses must be a positive integer, not ${maxResponses}`);
    // The newest links may be deferred saves not yet written: read from memory, newest first.
    const recent: Array<StoredResponse<Resource, Item>> = [];
    let next: string | null = id;
    for (let row = this.#unwritten.get(next); row !== undefined; row = next === null ? undefined : this.#unwritten.get(next)) {
      if (this.#unwrittenOf(accountId, row.id) === undefined) {
        if (row.id === id) return undefined;
        throw new BrokenResponseChainError(id, row.id);
      }
      if (recent.length === maxResponses) throw new ResponseChainTooLongError(id, maxResponses);
      recent.push(this.#recordOf({ ...row, cancel_requested: 0 }));
      next = row.previous_response_id ?? null;
    }
    if (recent.length === 0) return this.#storedChain(accountId, id, maxResponses);
    if (next === null) return recent.reverse();
    if (recent.length === maxResponses) throw new ResponseChainTooLongError(id, maxResponses);
    let older: Array<StoredResponse<Resource, Item>> | undefined;
    try {
      older = await this.#storedChain(accountId, next, maxResponses - recent.length);
    } catch (error) {
      // Named for the response the chain was asked for.
      if (error instanceof ResponseChainTooLongError) throw new ResponseChainTooLongError(id, maxResponses);
      if (error instanceof BrokenResponseChainError) throw new BrokenResponseChainError(id, error.missingId);
      throw error;
    }
    if (older === undefined) throw new BrokenResponseChainError(id, next);
    return [...older, ...recent.reverse()];
  }

  /** `chain` over the written rows alone. */
  async #storedChain(accountId: string | null, id: string, maxResponses: number): Promise<Array<StoredResponse<Resource, Item>> | undefined> {
    const now = this.#now();
    // depth 1 is `id`; the walk goes one past maxResponses, to tell "too long" from "just fits".
    const { rows: links } = await sql<{ id: string; previous_response_id: string | null; account_id: string | null; expires_at: number; depth: number }>`
      with recursive chain (id, previous_response_id, account_id, expires_at, depth) as (
        select id, previous_response_id, account_id, expires_at, 1 from responses where id = ${id}
        union all
        select responses.id, responses.previous_response_id, responses.account_id, responses.expires_at, chain.depth + 1
        from responses join chain on responses.id = chain.previous_response_id
        where chain.depth <= ${maxResponses}
      )
      select id, previous_response_id, account_id, expires_at, depth from chain order by depth`.execute(this.#database);
    const visible = (link: (typeof links)[number]) => link.account_id === accountId && Number(link.expires_at) > now;
    if (links.length === 0 || !visible(links[0]!)) return undefined;
    if (links.length > maxResponses) throw new ResponseChainTooLongError(id, maxResponses);
    const ids: string[] = [];
    let expected: string | null = id;
    for (const link of links) {
      if (link.id !== expected) break;
      if (!visible(link)) throw new BrokenResponseChainError(id, link.id);
      ids.push(link.id);
      expected = link.previous_response_id;
    }
    if (expected !== null) throw new BrokenResponseChainError(id, expected);
    const byId = new Map<string, StoredResponse<Resource, Item>>();
    for (const chunk of statementChunks(ids)) {
      const rows = await this.#database.selectFrom("responses").selectAll().where("id", "in", chunk).execute();
      for (const row of rows) byId.set(row.id, this.#recordOf(row));
    }
    const records: Array<StoredResponse<Resource, Item>> = [];
    for (const linkId of ids.toReversed()) {
      const record = byId.get(linkId);
      // Deleted between the walk and the fetch.
      if (record === undefined || record.accountId !== accountId) {
        if (linkId === id) return undefined;
        throw new BrokenResponseChainError(id, linkId);
      }
      records.push(record);
    }
    return records;
  }

  /**
   * `POST /v1/responses/{id}/cancel`: asks the node running background response `id` to stop
   * (it polls `isCancelRequested`). Only a background response still queued or in progress is
   * flagged. Returns the response as it stands (`cancelRequested` says whether it was flagged),
   * or undefined when it is unknown, expired or another account's.
   */
  async requestCancel(accountId: string | null, id: string): Promise<StoredResponse<Resource, Item> | undefined> {
    await this.#database
      .updateTable("responses")
      .set({ cancel_requested: 1 })
      .where("id", "=", id)
      .where((expression) => (accountId === null ? expression("account_id", "is", null) : expression("account_id", "=", accountId)))
      .where("background", "=", 1)
      .where("status", "in", ACTIVE_STATUSES)
      .where("expires_at", ">", this.#now())
      .execute();
    return this.get(accountId, id);
  }

  /**
   * Whether the node running response `id` should stop: a cancel was requested, or the response
   * is gone (deleted or expired), so there is nothing left to finish it for. The runner should
   * then stop saving it, or a later save would write it again.
   */
  async isCancelRequested(id: string): Promise<boolean> {
    return (await this.runState(id)) !== "running";
  }

  /**
   * What the node running background response `id` should do: go on (`running`), stop and save
   * its cancelled state (`cancel`: `requestCancel` asked it to), or stop and save nothing more
   * (`gone`: deleted or expired; a save would write it back).
   */
  async runState(id: string): Promise<"running" | "cancel" | "gone"> {
    const row = await this.#database.selectFrom("responses").select(["cancel_requested", "expires_at"]).where("id", "=", id).executeTakeFirst();
    if (row === undefined || Number(row.expires_at) <= this.#now()) return "gone";
    return Number(row.cancel_requested) === 1 ? "cancel" : "running";
  }

  /**
   * Fails the background responses still `queued` or `in_progress` whose row was last saved more
   * than `staleMs` ago: the node running one saves it on a heartbeat, so a row that old belongs
   * to a node that died (its delivered tokens are billed by the usage checkpoints, its hold
   * closed by the ledger sweep). Each is written with status `failed` and the error
   * `{code: "server_error", message}` in its resource (a JSON object with `status` and `error`
   * fields, as the Responses API's is). Only rows still stale when updated are touched, so a
   * heartbeat that lands meanwhile wins. Returns how many were failed.
   */
  async failStale(staleMs: number, message: string): Promise<number> {
    if (!(staleMs > 0)) throw new RangeError(`staleMs must be positive, not ${staleMs}`);
    const now = this.#now();
    let failed = 0;
    for (;;) {
      const rows = await this.#database
        .selectFrom("responses")
        .select(["id", "updated_at", "response"])
        .where("background", "=", 1)
        .where("status", "in", ACTIVE_STATUSES)
        .where("updated_at", "<", now - staleMs)
        .where("expires_at", ">", now)
        .orderBy("updated_at")
        .limit(SWEEP_ROWS)
        .execute();
      for (const row of rows) {
        const resource = JSON.parse(row.response) as Record<string, unknown>;
        resource.status = "failed";
        resource.error = { code: "server_error", message };
        const response = JSON.stringify(resource);
        const grown = Buffer.byteLength(response, "utf8") - Buffer.byteLength(row.response, "utf8");
        const result = await this.#database
          .updateTable("responses")
          .set({ status: "failed", response, updated_at: now, size_bytes: sql<number>`size_bytes + ${grown}` })
          .where("id", "=", row.id)
          .where("status", "in", ACTIVE_STATUSES)
          .where("updated_at", "=", row.updated_at)
          .executeTakeFirst();
        failed += Number(result.numUpdatedRows);
      }
      if (rows.length < SWEEP_ROWS) return failed;
    }
  }

  /** Deletes the responses expired at `now` (milliseconds); returns how many. */
  async sweep(now = this.#now()): Promise<number> {
    let deleted = 0;
    for (;;) {
      const result = await this.#database
        .deleteFrom("responses")
        .where("id", "in", (query) => query.selectFrom("responses").select("id").where("expires_at", "<=", now).limit(SWEEP_ROWS))
        .executeTakeFirst();
      const count = Number(result.numDeletedRows);
      deleted += count;
      if (count < SWEEP_ROWS) return deleted;
    }
  }

  /**
   * Writes what is pending, batch after batch, until nothing is; each batch takes what was saved
   * while the last one was written. Deferred saves alone wait for the commit window first,
   * counted from the oldest one's save.
   */
  async #writeLoop(): Promise<void> {
    try {
      // Saves made in the same turn of the event loop join the first batch.
      await new Promise<void>((resolve) => setImmediate(resolve));
      while (this.#pending.size > 0) {
        await this.#commitWindow();
        this.#urgent = false;
        const batch = this.#takeBatch();
        let refused: Map<string, Error>;
        try {
          refused = await this.#write(batch.map((pending) => pending.row));
        } catch (error) {
          this.#written(batch);
          for (const pending of batch) for (const waiter of pending.waiters) waiter.reject(error);
          continue;
        }
        this.#written(batch);
        for (const pending of batch) {
          const error = refused.get(pending.row.id);
          for (const waiter of pending.waiters) {
            if (error === undefined) waiter.resolve();
            else waiter.reject(error);
          }
        }
      }
    } finally {
      this.#loop = undefined;
    }
  }

  /** Waits, while only deferred saves are pending, until the oldest one's window closes (or `#flushSoon`). */
  async #commitWindow(): Promise<void> {
    if (this.#urgent || this.#commitWindowMs === 0) return;
    const oldest = this.#pending.values().next().value!;
    const wait = oldest.since + this.#commitWindowMs - performance.now();
    if (wait <= 0) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => this.#closeWindow!(), wait);
      this.#closeWindow = () => {
        clearTimeout(timer);
        this.#closeWindow = undefined;
        resolve();
      };
    });
  }

  /** The batch's rows are in the database (or their commit failed): reads no longer need them from memory. */
  #written(batch: readonly Pending[]): void {
    for (const pending of batch) {
      // Unless it was saved again meanwhile: that newer row is pending still.
      if (this.#unwritten.get(pending.row.id) === pending.row) this.#unwritten.delete(pending.row.id);
    }
  }

  /** The oldest pending saves, up to `BATCH_BYTES` (at least one). */
  #takeBatch(): Pending[] {
    const batch: Pending[] = [];
    let bytes = 0;
    for (const [id, pending] of this.#pending) {
      if (batch.length > 0 && bytes + pending.row.size_bytes > BATCH_BYTES) break;
      batch.push(pending);
      bytes += pending.row.size_bytes;
      this.#pending.delete(id);
    }
    return batch;
  }

  /**
   * One transaction: inserts the rows, or updates the rows of the same ids and accounts. Rows
   * whose id another account holds are left alone and returned, with their error.
   */
  async #write(rows: readonly Row[]): Promise<Map<string, Error>> {
    // One order for every node's batches, so two batches never wait on each other's row locks in a cycle.
    const sorted = rows.toSorted((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    const refused = new Map<string, Error>();
    const chunks = byBytes(sorted, STATEMENT_BYTES).flatMap((group) => statementChunks(group));
    const writeChunks = async (executor: Kysely<Database>) => {
      for (const chunk of chunks) {
        const parameters: unknown[] = [];
        for (const row of chunk) for (const column of COLUMNS) parameters.push(row[column] ?? null);
        const result = await executor.executeQuery(CompiledQuery.raw(this.#upsertOf(chunk.length), parameters));
        if (Number(result.numAffectedRows ?? 0) === chunk.length) continue;
        const owners = await executor.selectFrom("responses").select(["id", "account_id"]).where("id", "in", chunk.map((row) => row.id)).execute();
        const ownerOf = new Map(owners.map((owner) => [owner.id, owner.account_id]));
        for (const row of chunk) if (ownerOf.get(row.id) !== row.account_id) refused.set(row.id, new ResponseIdTakenError(row.id));
      }
    };
    // One statement is atomic on its own: a transaction (two more statements) only for a batch that takes several.
    if (chunks.length === 1) await writeChunks(this.#database);
    else await this.#database.transaction().execute(writeChunks);
    this.#commits++;
    return refused;
  }

  /** The upsert's SQL text for `rows` rows, made once per count (`statementChunks` keeps the counts few). */
  #upsertOf(rows: number): string {
    let text = this.#upserts.get(rows);
    if (text === undefined) {
      text = upsertText(dialectOf(this.#database), rows);
      this.#upserts.set(rows, text);
    }
    return text;
  }

  #recordOf(row: Selectable<ResponseTable> | (Row & { cancel_requested: number })): StoredResponse<Resource, Item> {
    return {
      id: row.id,
      accountId: row.account_id ?? null,
      keyId: row.key_id ?? null,
      model: row.model,
      status: row.status,
      createdAt: Number(row.created_at),
      previousResponseId: row.previous_response_id ?? null,
      background: Number(row.background) === 1,
      inputItems: JSON.parse(row.input_items) as Item[],
      response: JSON.parse(row.response) as Resource,
      updatedAt: Number(row.updated_at),
      expiresAt: Number(row.expires_at),
      cancelRequested: Number(row.cancel_requested) === 1,
      sizeBytes: Number(row.size_bytes),
    };
  }
}

/** `rows` in order, cut into groups of at most `limit` bytes each (a heavier row alone). */
function byBytes<Row extends { size_bytes: number }>(rows: readonly Row[], limit: number): Row[][] {
  const groups: Row[][] = [];
  let group: Row[] = [];
  let bytes = 0;
  for (const row of rows) {
    if (group.length > 0 && bytes + row.size_bytes > limit) {
      groups.push(group);
      group = [];
      bytes = 0;
    }
    group.push(row);
    bytes += row.size_bytes;
  }
  if (group.length > 0) groups.push(group);
  return groups;
}
