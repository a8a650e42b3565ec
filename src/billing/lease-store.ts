/**
 * The database side of credit leases (see `credit-leases.ts`): a lease is a hold (`ledger.ts`)
 * that many requests draw from in memory. Its usage records name it (`hold_id`), so what a lease
 * charges is always the sum of its records: closing it, or the sweeper closing a dead node's,
 * charges exactly what was recorded, and every write here is idempotent (records and checkpoints
 * are keyed by ids chosen before the first attempt).
 */
import { CompiledQuery, type Insertable, type Kysely, type Selectable, type Transaction } from "kysely";
import type { Database, HoldTable, UsageCheckpointTable, UsageRecordTable } from "../store/schema.ts";
import { chargeRecordsOf, sweepHolds, type RecordsCharge } from "./ledger.ts";
import { ledgerStatementsOf } from "./ledger-statements/index.ts";
import { USAGE_OVERWRITTEN } from "./ledger-statements/writes.ts";
import { statementChunks as chunks } from "../store/statement-chunks.ts";
import { dialectOf, type Dialect } from "../store/dialect.ts";

export type UsageRow = Insertable<UsageRecordTable> & { id: string; hold_id: string | null };
export type CheckpointRow = UsageCheckpointTable;

export type UsageBatch = {
  /** Finished requests: their records, which replace their checkpoints. */
  records: readonly UsageRow[];
  /** Running requests' progress (inserted, or moved forward). */
  checkpoints: readonly CheckpointRow[];
  /** Checkpoints of requests recorded elsewhere (settled with their hold): dropped. */
  dropCheckpoints: readonly string[];
  /** Ids among `records` whose request never sent a checkpoint to the store: none to delete. */
  withoutCheckpoint?: ReadonlySet<string>;
  /**
   * Holds of their own (one quiet request each) whose record is among `records`: settled at it in
   * the same transaction, the record and the charge never apart (as `settleHold` does).
   */
  settleHolds?: readonly string[];
};

/** A record that landed against a hold closed already (swept while its node could not reach the database): charged then. */
export type LateCharge = { holdId: string; accountId: string; keyId: string | null; records: number } & RecordsCharge;

/** Every column of a usage record: its id, request, owner and time, and what a later write may overwrite. */
const USAGE_COLUMNS = ["id", "request_id", "account_id", "key_id", "created_at", ...USAGE_OVERWRITTEN] as const satisfies ReadonlyArray<keyof UsageRecordTable>;

/** What a later write may overwrite, when it costs more (the sweeper's record of a checkpoint gives way to the request's own). */
const USAGE_CONFLICT =
  `on conflict ("id") do update set ${USAGE_OVERWRITTEN.map((column) => `"${column}" = "excluded"."${column}"`).join(", ")} ` +
  'where "usage_records"."cost" < "excluded"."cost"';

/** SQLite: the batch's upsert of `rows` records as SQL text, made once per row count (`statementChunks` keeps the counts few). */
const upsertTexts = new Map<number, string>();
function usageUpsertText(rows: number): string {
  let text = upsertTexts.get(rows);
  if (text !== undefined) return text;
  const tuples = Array.from({ length: rows }, () => `(${USAGE_COLUMNS.map(() => "?").join(", ")})`);
  text = `insert into "usage_records" (${USAGE_COLUMNS.map((column) => `"${column}"`).join(", ")}) values ${tuples.join(", ")} ${USAGE_CONFLICT}`;
  upsertTexts.set(rows, text);
  return text;
}

/**
 * PostgreSQL: each column's type as `usage_records` has it (the migrations'; a test holds the two
 * together), for reading the records back out of one JSON parameter.
 */
export const USAGE_COLUMN_TYPES = {
  id: "text",
  request_id: "text",
  account_id: "text",
  key_id: "text",
  created_at: "bigint",
  model: "text",
  prompt_tokens: "bigint",
  cached_prompt_tokens: "bigint",
  completion_tokens: "bigint",
  reasoning_tokens: "integer",
  usage_source: "text",
  cost: "bigint",
  latency_ms: "integer",
  status: "integer",
  finish_reason: "text",
  stream: "integer",
  hold_id: "text",
  service_tier: "text",
} as const satisfies Record<(typeof USAGE_COLUMNS)[number], string>;

/**
 * PostgreSQL: one upsert for any number of records, passed as one JSON array (`json_to_recordset`).
 * Why not a row of placeholders a record: pg serialises every parameter in JavaScript (18 a
 * record; measured, 6–12 µs of the node's CPU a record more than `JSON.stringify` of the same rows),
 * and a group commit's records came in up to nine statements of power-of-two sizes, each a round
 * trip inside a transaction: now one statement, with no transaction around it for records of no hold.
 */
const USAGE_INSERT_FROM_JSON =
  `insert into "usage_records" (${USAGE_COLUMNS.map((column) => `"${column}"`).join(", ")}) ` +
  `select ${USAGE_COLUMNS.map((column) => `"${column}"`).join(", ")} from json_to_recordset($1::json) as "record"(${USAGE_COLUMNS.map((column) => `"${column}" ${USAGE_COLUMN_TYPES[column]}`).join(", ")})`;
const USAGE_UPSERT_JSON = `${USAGE_INSERT_FROM_JSON} ${USAGE_CONFLICT}`;

/**
 * PostgreSQL: a group commit of records against holds, with no checkpoint to write or delete and
 * no hold to settle (a busy key's finished requests), in one statement and one round trip instead
 * of a transaction of four (begin, lock, insert, commit). It locks the holds in the order of their
 * ids, as `lockHolds` does, and inserts the records only when every one of them is still active;
 * it returns the holds' statuses. One that is not active (closed by the sweeper while this node
 * could not reach the database) leaves nothing written: the batch then goes through the
 * transaction, which charges such records as late. One statement is atomic, and a hold locked in
 * it is locked until it commits, so the records and the statuses it saw land together.
 */
const USAGE_UPSERT_ON_ACTIVE_HOLDS =
  'with "locked" as materialized (select "id", "status" from "holds" where "id" = any($2::text[]) order by "id" for update), ' +
  `"inserted" as (${USAGE_INSERT_FROM_JSON} where not exists (select 1 from "locked" where "status" <> 'active') ${USAGE_CONFLICT} returning 1) ` +
  'select "status" from "locked"';

/** PostgreSQL: the most records in one JSON upsert (~0.5 KB each: a few MB at most in one parameter). */
const JSON_ROWS_PER_STATEMENT = 8192;

/** What a record may leave out, as the columns default it (`reasoning_tokens` 0, the rest null). */
const USAGE_DEFAULTS: Partial<Record<(typeof USAGE_COLUMNS)[number], unknown>> = { reasoning_tokens: 0 };

/** A record's value of `column` as written: what it leaves out takes the column's default. */
const usageValue = (row: UsageRow, column: (typeof USAGE_COLUMNS)[number]): unknown => row[column] ?? USAGE_DEFAULTS[column] ?? null;

/** Rows for the statements that write them: PostgreSQL's take one parameter whatever their number (up to `JSON_ROWS_PER_STATEMENT`), SQLite's come by `statementChunks`. */
function chunksFor<Row>(dialect: Dialect, rows: readonly Row[]): Row[][] {
  if (dialect === "sqlite") return chunks(rows);
  const cut: Row[][] = [];
  for (let start = 0; start < rows.length; start += JSON_ROWS_PER_STATEMENT) cut.push(rows.slice(start, start + JSON_ROWS_PER_STATEMENT));
  return cut;
}

/** PostgreSQL: records as the JSON array the upserts take. */
function recordsJson(rows: readonly UsageRow[]): string {
  const records = rows.map((row) => {
    const record: Record<string, unknown> = {};
    for (const column of USAGE_COLUMNS) {
      const value = usageValue(row, column);
      // A lone surrogate would be escaped as such, and PostgreSQL refuses the whole JSON for it (the
      // batch could then never be written): it becomes U+FFFD, as a parameter's UTF-8 made it before.
      record[column] = typeof value === "string" ? value.toWellFormed() : value;
    }
    return record;
  });
  return JSON.stringify(records);
}

/** Inserts a chunk of records in one statement (a record already written counts as written, see `writeUsageBatch`). */
async function insertRecords(executor: Kysely<Database> | Transaction<Database>, rows: readonly UsageRow[]): Promise<void> {
  if (dialectOf(executor) === "postgres") {
    await executor.executeQuery(CompiledQuery.raw(USAGE_UPSERT_JSON, [recordsJson(rows)]));
    return;
  }
  const parameters: unknown[] = [];
  for (const row of rows) for (const column of USAGE_COLUMNS) parameters.push(usageValue(row, column));
  await executor.executeQuery(CompiledQuery.raw(usageUpsertText(rows.length), parameters));
}

/** Deletes the checkpoints of these ids: on PostgreSQL in one statement (an array parameter), on SQLite by `statementChunks`. */
async function deleteCheckpoints(transaction: Transaction<Database>, ids: readonly string[]): Promise<void> {
  const dialect = dialectOf(transaction);
  for (const chunk of chunksFor(dialect, ids)) {
    if (dialect === "postgres") await transaction.executeQuery(CompiledQuery.raw('delete from "usage_checkpoints" where "id" = any($1::text[])', [chunk]));
    else await transaction.deleteFrom("usage_checkpoints").where("id", "in", chunk).execute();
  }
}

/**
 * Writes a batch in one transaction (a group commit). The holds its records name are locked
 * first, so that none of them closes while the batch is in flight (`chargeRecordsOf` locks the
 * hold before it sums its records). A record already written (an attempt whose commit went
 * through unanswered) counts as written, never as a duplicate key; a checkpoint only ever moves
 * forward. The holds of `settleHolds` still active are settled at their records' sum. Records
 * that name a hold closed already (the sweeper closed it while this node could not reach the
 * database, or an attempt whose commit went through unanswered settled it) are charged to the
 * account now, what they add, as far as the balance covers: returned, to be logged.
 */
export async function writeUsageBatch(database: Kysely<Database>, batch: UsageBatch, now = Date.now()): Promise<LateCharge[]> {
  if (batch.records.length === 0 && batch.checkpoints.length === 0 && batch.dropCheckpoints.length === 0) return [];
  const settle = new Set(batch.settleHolds);
  const statements = ledgerStatementsOf(database);
  const holdIds = [...new Set(batch.records.flatMap((record) => (record.hold_id === null ? [] : [record.hold_id])))].sort();
  // A record of no hold (an operator key's, a free model's) never had a checkpoint, nor one whose
  // request never sent any (`withoutCheckpoint`): only the others, and the checkpoints dropped,
  // have one to delete.
  const without = batch.withoutCheckpoint;
  const finished = [...batch.records.flatMap((record) => (record.hold_id === null || without?.has(record.id) === true ? [] : [record.id])), ...batch.dropCheckpoints];
  const recordChunks = chunksFor(dialectOf(database), batch.records);
  if (holdIds.length === 0 && finished.length === 0 && batch.checkpoints.length === 0 && recordChunks.length === 1) {
    // Records of no hold that fit one statement (a node serving operator keys or free models):
    // the statement is atomic on its own, and costs no transaction around it.
    await insertRecords(database, recordChunks[0]!);
    return [];
  }
  if (dialectOf(database) === "postgres" && finished.length === 0 && batch.checkpoints.length === 0 && settle.size === 0 && recordChunks.length === 1) {
    // Records of holds with nothing else to do (`USAGE_UPSERT_ON_ACTIVE_HOLDS`): written in one statement while every hold is active.
    const locked = await database.executeQuery<{ status: string }>(CompiledQuery.raw(USAGE_UPSERT_ON_ACTIVE_HOLDS, [recordsJson(recordChunks[0]!), holdIds]));
    if (locked.rows.every((hold) => hold.status === "active")) return [];
  }
  return database.transaction().execute(async (transaction) => {
    const holds: Array<Selectable<HoldTable>> = [];
    for (const ids of chunks(holdIds)) holds.push(...(await statements.lockHolds(transaction, ids)));
    for (const rows of recordChunks) await insertRecords(transaction, rows);
    await deleteCheckpoints(transaction, finished);
    // A checkpoint of a request whose record is here has just been deleted (`finished`): not written again.
    const done = new Set(finished);
    const checkpoints = batch.checkpoints.filter((checkpoint) => !done.has(checkpoint.id));
    for (const rows of chunks(checkpoints)) {
      await transaction
        .insertInto("usage_checkpoints")
        .values(rows)
        .onConflict((conflict) =>
          conflict.column("id").doUpdateSet((update) => ({
            prompt_tokens: update.ref("excluded.prompt_tokens"),
            cached_prompt_tokens: update.ref("excluded.cached_prompt_tokens"),
            completion_tokens: update.ref("excluded.completion_tokens"),
            reasoning_tokens: update.ref("excluded.reasoning_tokens"),
            usage_source: update.ref("excluded.usage_source"),
            cost: update.ref("excluded.cost"),
            updated_at: update.ref("excluded.updated_at"),
          })),
        )
        .execute();
    }
    const late: LateCharge[] = [];
    // Charging locks account rows (then key rows): taken in the order of the accounts' ids, so
    // that two nodes' group commits settling holds of the same accounts never wait in a cycle.
    const order = (one: string, other: string) => (one < other ? -1 : one > other ? 1 : 0);
    const byAccount = [...holds].sort((one, other) => order(one.account_id, other.account_id) || order(one.id, other.id));
    for (const hold of byAccount) {
      if (hold.status === "active") {
        // A quiet request's own hold: charged its record's cost, the rest given back (a lease's stays open).
        if (settle.has(hold.id)) await chargeRecordsOf(transaction, hold.id, now);
        continue;
      }
      const charge = await chargeRecordsOf(transaction, hold.id, now);
      if (charge === undefined) continue;
      // An own hold that an attempt whose answer was lost settled already: nothing late about it.
      if (settle.has(hold.id) && charge.charged === 0 && charge.short === 0) continue;
      const records = batch.records.filter((record) => record.hold_id === hold.id).length;
      late.push({ holdId: hold.id, accountId: hold.account_id, keyId: hold.key_id, records, ...charge });
    }
    return late;
  });
}

/**
 * Closes a lease: charges the sum of its records (past the amount held as far as the balance
 * covers) and gives the rest back, in one transaction that locks the hold first, so that a group
 * commit still in flight for it either lands before the sum or sees the lease closed and is
 * charged then (`chargeRecordsOf`). Idempotent: a closed lease is charged only what records
 * that landed since add. Returns what it charged now.
 */
export async function closeLease(database: Kysely<Database>, holdId: string, now = Date.now()): Promise<number> {
  const charge = await database.transaction().execute((transaction) => chargeRecordsOf(transaction, holdId, now));
  return charge?.charged ?? 0;
}

/** The status and finish reason of a request whose node died while it generated. */
export const INTERRUPTED = { status: 500, finishReason: "interrupted" } as const;

/**
 * Turns a hold's checkpoints into usage records (the requests its node was generating when it
 * died, billed for what they had generated by their last checkpoint), in the caller's
 * transaction, which locked the hold. A request whose own record was written meanwhile keeps it.
 */
async function recordCheckpoints(transaction: Transaction<Database>, holdId: string): Promise<void> {
  const checkpoints = await transaction.selectFrom("usage_checkpoints").selectAll().where("hold_id", "=", holdId).execute();
  if (checkpoints.length === 0) return;
  const records: UsageRow[] = checkpoints.map((checkpoint) => ({
    id: checkpoint.id,
    request_id: checkpoint.request_id,
    account_id: checkpoint.account_id,
    key_id: checkpoint.key_id,
    model: checkpoint.model,
    prompt_tokens: Number(checkpoint.prompt_tokens),
    cached_prompt_tokens: Number(checkpoint.cached_prompt_tokens),
    completion_tokens: Number(checkpoint.completion_tokens),
    reasoning_tokens: Number(checkpoint.reasoning_tokens),
    usage_source: checkpoint.usage_source,
    cost: Number(checkpoint.cost),
    latency_ms: Math.max(0, Number(checkpoint.updated_at) - Number(checkpoint.created_at)),
    status: INTERRUPTED.status,
    finish_reason: INTERRUPTED.finishReason,
    stream: Number(checkpoint.stream),
    created_at: Number(checkpoint.created_at),
    hold_id: holdId,
    service_tier: checkpoint.service_tier,
  }));
  for (const rows of chunks(records)) {
    await transaction.insertInto("usage_records").values(rows).onConflict((conflict) => conflict.column("id").doNothing()).execute();
  }
  await transaction.deleteFrom("usage_checkpoints").where("hold_id", "=", holdId).execute();
}

/**
 * Closes the holds of dead nodes that have usage to charge: records written against them, or
 * checkpoints of requests that were still generating. Each is charged what was recorded, past
 * its amount as far as the balance covers; a hold the sweeper released before records landed
 * against it is charged them too. Returns how many were charged. A hold merely past its expiry is not charged here: its
 * node is alive and may still settle it, in full and with the request's own record, once
 * `sweepHolds` has released it (cost left open). Holds with nothing recorded are left to
 * `sweepHolds` too.
 */
export async function chargeStaleHolds(database: Kysely<Database>, options: { now?: number; deadNodes: readonly string[] }): Promise<number> {
  const now = options.now ?? Date.now();
  if (options.deadNodes.length === 0) {
    await dropClosedCheckpoints(database);
    return 0;
  }
  const stale = await database
    .selectFrom("holds")
    .select("id")
    // Active, or released by the sweeper with records written against it since (charged none yet).
    .where((expression) => expression.or([expression("status", "=", "active"), expression.and([expression("status", "=", "released"), expression("cost", "is", null)])]))
    .where("node_id", "in", [...options.deadNodes])
    .where((expression) =>
      expression.or([
        expression.exists(expression.selectFrom("usage_records").select("usage_records.id").whereRef("usage_records.hold_id", "=", "holds.id")),
        expression.exists(expression.selectFrom("usage_checkpoints").select("usage_checkpoints.id").whereRef("usage_checkpoints.hold_id", "=", "holds.id")),
      ]),
    )
    .execute();
  let closed = 0;
  for (const { id } of stale) {
    // One transaction, the hold locked first: its checkpoints become records and it is charged
    // their sum with nothing in between (a settlement of its own request, or a group commit,
    // waits for it, then finds its record written and the hold closed).
    const charged = await database.transaction().execute(async (transaction) => {
      const hold = await ledgerStatementsOf(transaction).lockHold(transaction, id);
      if (hold === undefined) return false;
      if (hold.status === "active") await recordCheckpoints(transaction, id);
      else if (hold.status !== "released" || hold.cost !== null) return false;
      await chargeRecordsOf(transaction, id, now);
      return true;
    });
    if (charged) closed++;
  }
  await dropClosedCheckpoints(database);
  return closed;
}

/** Checkpoints whose hold is closed belong to requests recorded (or released) with it: nothing to keep. */
async function dropClosedCheckpoints(database: Kysely<Database>): Promise<void> {
  await database
    .deleteFrom("usage_checkpoints")
    .where((expression) =>
      expression.not(expression.exists(expression.selectFrom("holds").select("holds.id").whereRef("holds.id", "=", "usage_checkpoints.hold_id").where("holds.status", "=", "active"))),
    )
    .execute();
}

/**
 * Closes every stale hold: a dead node's with usage recorded against it is charged that
 * (`chargeStaleHolds`); the rest, and every hold past its expiry, are released with their cost
 * left open for a node that settles late (`sweepHolds`).
 */
export async function closeStaleHolds(database: Kysely<Database>, options: { now?: number; deadNodes: readonly string[] }): Promise<{ charged: number; released: number }> {
  const charged = await chargeStaleHolds(database, options);
  const released = await sweepHolds(database, options);
  return { charged, released };
}
