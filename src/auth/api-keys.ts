/**
 * API keys: `tp-` followed by 43 base64url characters (256 random bits). Only the SHA-256 of a
 * key and a short display prefix are stored; the key itself is shown once, at creation.
 * A key has a scope (`key-scopes.ts`); a key created by another key over `/api` records it as
 * its parent and works only while every key above it does.
 */
import { hash, randomBytes, timingSafeEqual } from "node:crypto";
import { sql, type Kysely } from "kysely";
import type { Database } from "../store/schema.ts";
import { dialectOf } from "../store/dialect.ts";
import { noteChange } from "../store/changes.ts";
import { pastCursor } from "../store/keyset.ts";
import { ApiError } from "../protocol/errors.ts";
import { checkChildWithinParent, KeyLooserThanParentError, toKeyScope, type KeyScope } from "./key-scopes.ts";

export const KEY_PREFIX = "tp-";
/** Characters of the key kept for display: the prefix and 6 more, never enough to guess the rest. */
const DISPLAY_LENGTH = KEY_PREFIX.length + 6;

export type ApiKeyRecord = {
  id: string;
  name: string;
  displayPrefix: string;
  accountId: string | null;
  created: number;
  revoked: number | null;
  expires: number | null;
  lastUsed: number | null;
  /** Most credit the key may spend; null: no cap of its own. */
  spendCap: number | null;
  /** Credit spent by settled requests. */
  spent: number;
  rpm: number | null;
  tpm: number | null;
  /** Model ids the key may use; null: all its account may use. */
  models: string[] | null;
  /** What the key may reach: `/v1` only, also the account's `/api`, also the admin routes. */
  scope: KeyScope;
  /** The key that created this one over `/api`; null when a session or the CLI did. */
  parentKeyId: string | null;
  /**
   * The rate limits of the keys above this one (its creator, and so on up) that have any: a key
   * and everything it created share its requests and tokens per minute. Absent or empty: none.
   */
  ancestorLimits?: readonly AncestorLimits[];
};

/** A key above another, with its own requests/tokens per minute (null: no such limit). */
export type AncestorLimits = { id: string; rpm: number | null; tpm: number | null };

export type CreatedApiKey = ApiKeyRecord & {
  /** The key itself: shown once, never stored. */
  key: string;
};

/** SHA-256 of a key, hex: what the database stores and looks up. */
export function hashKey(key: string): string {
  return hash("sha256", key, "hex");
}

/** Whether `presented` could be a key at all (else it is refused as malformed, unhashed). */
export function wellFormedKey(presented: string): boolean {
  return presented.startsWith(KEY_PREFIX) && presented.length <= 256;
}

/** A fresh key: 32 random bytes, base64url, with the recognisable prefix. */
export function generateKey(): string {
  return KEY_PREFIX + randomBytes(32).toString("base64url");
}

function newId(): string {
  return `key_${randomBytes(12).toString("base64url")}`;
}

function toRecord(row: Database["api_keys"]): ApiKeyRecord {
  return {
    id: row.id,
    name: row.name,
    displayPrefix: row.display_prefix,
    accountId: row.account_id,
    created: Number(row.created_at),
    revoked: row.revoked_at === null ? null : Number(row.revoked_at),
    expires: row.expires_at === null ? null : Number(row.expires_at),
    lastUsed: row.last_used_at === null ? null : Number(row.last_used_at),
    spendCap: row.spend_cap === null ? null : Number(row.spend_cap),
    spent: Number(row.spent),
    rpm: row.rpm,
    tpm: row.tpm,
    models: row.models === null ? null : (JSON.parse(row.models) as string[]),
    scope: toKeyScope(row.scope),
    parentKeyId: row.parent_key_id,
  };
}

export type CreateKeyOptions = {
  name?: string;
  accountId?: string | null;
  /** Milliseconds since the epoch; undefined for a key that does not expire. */
  expires?: number;
  spendCap?: number;
  rpm?: number;
  tpm?: number;
  models?: string[];
  /** Default: 'admin' for an operator key (no account), 'account' for an account's key. */
  scope?: KeyScope;
  /**
   * The key creating this one (over `/api`): the new key must be no looser than it (else
   * `KeyLooserThanParentError`), belongs to its account, and works only while it does. A spend
   * cap is moved out of the parent's: the parent's cap drops by as much, so a key and all it
   * created never spend more than the parent's cap allowed.
   */
  parent?: ApiKeyRecord;
  /**
   * The most working keys (neither revoked nor expired) the account may hold, this one included:
   * at the cap, `TooManyKeysError`. Counted under the account's lock, in the insert's transaction,
   * so two keys created at once cannot both take the last place. Undefined (the CLI): no cap.
   * Operator keys (no account) are never capped.
   */
  maxKeysPerAccount?: number;
  now?: number;
};

/** 409: the account holds as many working keys as `--max-keys-per-account` allows. */
export class TooManyKeysError extends ApiError {
  constructor(max: number) {
    super(`This account has ${max} working API keys, the most it may hold. Revoke keys it no longer needs, then create this one.`, "too_many_keys");
  }
}

/** Creates a key and returns it with its record. The caller shows `key` once. */
export async function createApiKey(database: Kysely<Database>, options: CreateKeyOptions = {}): Promise<CreatedApiKey> {
  const parent = options.parent;
  const accountId = parent === undefined ? (options.accountId ?? null) : parent.accountId;
  if (parent !== undefined && options.accountId !== undefined && options.accountId !== parent.accountId) {
    throw new Error("a key's child belongs to the parent's account");
  }
  const scope = options.scope ?? (accountId === null ? "admin" : "account");
  const key = generateKey();
  const row: Database["api_keys"] = {
    id: newId(),
    name: options.name ?? "",
    display_prefix: key.slice(0, DISPLAY_LENGTH),
    key_hash: hashKey(key),
    account_id: accountId,
    created_at: options.now ?? Date.now(),
    revoked_at: null,
    expires_at: options.expires ?? null,
    last_used_at: null,
    spend_cap: options.spendCap ?? null,
    spent: 0,
    reserved: 0,
    rpm: options.rpm ?? null,
    tpm: options.tpm ?? null,
    models: options.models === undefined ? null : JSON.stringify(options.models),
    scope,
    parent_key_id: parent?.id ?? null,
  };
  const spendCap = options.spendCap;
  if (parent !== undefined) {
    checkChildWithinParent(parent, { scope, models: options.models, expires: options.expires, spendCap, rpm: options.rpm, tpm: options.tpm });
  }
  const capped = accountId !== null && options.maxKeysPerAccount !== undefined;
  if (!capped && (parent === undefined || parent.spendCap === null || spendCap === undefined)) {
    await database.insertInto("api_keys").values(row).execute();
    return { ...toRecord(row), key };
  }
  await database.transaction().execute(async (transaction) => {
    if (capped) {
      // SQLite's write transactions are exclusive already; PostgreSQL locks the account's row, so
      // a second create for the account waits here and then counts the first one's key.
      if (dialectOf(transaction) === "postgres") {
        await transaction.selectFrom("accounts").select("id").where("id", "=", accountId).forUpdate().executeTakeFirst();
      }
      const working = await countWorkingKeys(transaction, accountId, row.created_at);
      if (working >= options.maxKeysPerAccount!) throw new TooManyKeysError(options.maxKeysPerAccount!);
    }
    if (parent !== undefined && parent.spendCap !== null && spendCap !== undefined) {
      // Conditional: running requests' holds count, and two keys created at once cannot both take the rest.
      const moved = await transaction
        .updateTable("api_keys")
        .set((expression) => ({ spend_cap: expression("spend_cap", "-", spendCap) }))
        .where("id", "=", parent.id)
        .where("revoked_at", "is", null)
        .where((expression) => expression(expression("spent", "+", expression("reserved", "+", spendCap)), "<=", expression.ref("spend_cap")))
        .executeTakeFirst();
      if (Number(moved.numUpdatedRows) === 0) {
        throw new KeyLooserThanParentError("'spend_cap' is more than this key has left of its own cap (running requests included).", "spend_cap");
      }
    }
    await transaction.insertInto("api_keys").values(row).execute();
  });
  // The parent's cap moved: cached copies of it forget it.
  if (parent !== undefined) noteChange(database);
  return { ...toRecord(row), key };
}

/** The account's keys that still work at `now`: neither revoked nor expired (what the key cap counts). */
export async function countWorkingKeys(database: Kysely<Database>, accountId: string, now = Date.now()): Promise<number> {
  const row = await database
    .selectFrom("api_keys")
    .select((expression) => expression.fn.countAll<number | string>().as("keys"))
    .where("account_id", "=", accountId)
    .where("revoked_at", "is", null)
    .where((expression) => expression.or([expression("expires_at", "is", null), expression("expires_at", ">", now)]))
    .executeTakeFirst();
  return Number(row?.keys ?? 0);
}

/** All keys, newest first; never the keys themselves. */
export async function listApiKeys(database: Kysely<Database>, accountId?: string | null): Promise<ApiKeyRecord[]> {
  let query = database.selectFrom("api_keys").selectAll().orderBy("created_at", "desc").orderBy("id");
  if (accountId !== undefined) {
    query = accountId === null ? query.where("account_id", "is", null) : query.where("account_id", "=", accountId);
  }
  return (await query.execute()).map(toRecord);
}

/** Thrown when `after` names no key of the listing it pages. */
export class UnknownKeyCursorError extends Error {}

/** A key of a listing page, with its account's email (null: an operator key). */
export type ListedApiKey = ApiKeyRecord & { accountEmail: string | null };

/**
 * A page of keys, newest first (creation time, then id, both descending): `limit` of them, after
 * the key `after` (the last of the previous page) when given. `accountId`: that account's keys
 * (null: the operator's); undefined: every key. Throws `UnknownKeyCursorError` when `after` is not
 * a key of the listing (another account's key included).
 */
export async function listApiKeyPage(
  database: Kysely<Database>,
  options: { accountId?: string | null; limit: number; after?: string },
): Promise<{ data: ListedApiKey[]; hasMore: boolean }> {
  const { accountId } = options;
  let cursor: { created_at: number; id: string } | undefined;
  if (options.after !== undefined) {
    const found = await database
      .selectFrom("api_keys")
      .select(["id", "created_at", "account_id"])
      .where("id", "=", options.after)
      .executeTakeFirst();
    if (found === undefined || (accountId !== undefined && found.account_id !== accountId)) throw new UnknownKeyCursorError(options.after);
    cursor = { created_at: Number(found.created_at), id: found.id };
  }
  const rows = await database
    .selectFrom("api_keys")
    .leftJoin("accounts", "accounts.id", "api_keys.account_id")
    .selectAll("api_keys")
    .select("accounts.email as account_email")
    .$if(accountId === null, (query) => query.where("api_keys.account_id", "is", null))
    .$if(typeof accountId === "string", (query) => query.where("api_keys.account_id", "=", accountId!))
    .$if(cursor !== undefined, (query) => query.where(pastCursor("api_keys.created_at", "api_keys.id", "<", cursor!)))
    .orderBy("api_keys.created_at", "desc")
    .orderBy("api_keys.id", "desc")
    .limit(options.limit + 1)
    .execute();
  const data = rows.slice(0, options.limit).map(({ account_email: email, ...row }) => ({ ...toRecord(row), accountEmail: email ?? null }));
  return { data, hasMore: rows.length > options.limit };
}

/** One key by id, or undefined. */
export async function findApiKey(database: Kysely<Database>, id: string): Promise<ApiKeyRecord | undefined> {
  const row = await database.selectFrom("api_keys").selectAll().where("id", "=", id).executeTakeFirst();
  return row && toRecord(row);
}

/** How deep a chain of keys creating keys is followed; deeper chains are refused. */
const MAX_KEY_CHAIN = 32;

/**
 * True when `keyId` is `ancestorId` itself or a key created from it (its child, their child...,
 * up to `MAX_KEY_CHAIN` levels): the keys a key of scope below 'admin' may revoke.
 */
export async function isSelfOrDescendant(database: Kysely<Database>, keyId: string, ancestorId: string): Promise<boolean> {
  if (keyId === ancestorId) return true;
  const result = await sql<{ id: string }>`
    with recursive ancestors (id, parent_key_id, depth) as (
      select id, parent_key_id, 1 from api_keys where id = ${keyId}
      union all
      select parent.id, parent.parent_key_id, ancestors.depth + 1
      from api_keys parent join ancestors on parent.id = ancestors.parent_key_id
      where ancestors.depth < ${MAX_KEY_CHAIN}
    )
    select id from ancestors where id = ${ancestorId}
  `.execute(database);
  return result.rows.length > 0;
}

/**
 * Revokes a key and every key created from it (children, their children...); returns false when
 * there is no such key. Revoking twice keeps the first time. Verification also checks a key's
 * ancestors, so a child created while its parent was being revoked stops working too.
 */
export async function revokeApiKey(database: Kysely<Database>, id: string, now = Date.now()): Promise<boolean> {
  const existing = await database.selectFrom("api_keys").select(["id", "revoked_at"]).where("id", "=", id).executeTakeFirst();
  if (existing === undefined) return false;
  if (existing.revoked_at === null) {
    await database.updateTable("api_keys").set({ revoked_at: now }).where("id", "=", id).where("revoked_at", "is", null).execute();
  }
  await sql`
    with recursive descendants (id, depth) as (
      select id, 1 from api_keys where parent_key_id = ${id}
      union all
      select child.id, descendants.depth + 1 from api_keys child join descendants on child.parent_key_id = descendants.id
      where descendants.depth < ${MAX_KEY_CHAIN}
    )
    update api_keys set revoked_at = ${now} where revoked_at is null and id in (select id from descendants)
  `.execute(database);
  // Caches of verified keys on this node forget them at once (other nodes' within their age bound).
  noteChange(database);
  return true;
}

/**
 * The keys above a key (the key that created it, and so on up) when all are still usable: none
 * revoked, none expired, the chain no deeper than `MAX_KEY_CHAIN` and ending at a key without a
 * parent; otherwise null. One query on the primary key. Gives the limits of those that have any.
 */
async function activeAncestors(database: Kysely<Database>, parentId: string, now: number): Promise<{ limits: AncestorLimits[]; expires: number | null } | null> {
  const result = await sql<{ id: string; parent_key_id: string | null; revoked_at: number | string | null; expires_at: number | string | null; rpm: number | null; tpm: number | null }>`
    with recursive ancestors (id, parent_key_id, revoked_at, expires_at, rpm, tpm, depth) as (
      select id, parent_key_id, revoked_at, expires_at, rpm, tpm, 1 from api_keys where id = ${parentId}
      union all
      select parent.id, parent.parent_key_id, parent.revoked_at, parent.expires_at, parent.rpm, parent.tpm, ancestors.depth + 1
      from api_keys parent join ancestors on parent.id = ancestors.parent_key_id
      where ancestors.depth < ${MAX_KEY_CHAIN}
    )
    select id, parent_key_id, revoked_at, expires_at, rpm, tpm from ancestors
  `.execute(database);
  const rows = result.rows;
  const broken = rows.some((row) => row.revoked_at !== null || (row.expires_at !== null && Number(row.expires_at) <= now));
  const roots = rows.filter((row) => row.parent_key_id === null).length;
  // A chain that does not reach a key without a parent (too deep, or a key missing) is refused.
  if (rows.length === 0 || broken || roots !== 1) return null;
  const expiries = rows.filter((row) => row.expires_at !== null).map((row) => Number(row.expires_at));
  return {
    limits: rows.filter((row) => row.rpm !== null || row.tpm !== null).map((row) => ({ id: row.id, rpm: row.rpm, tpm: row.tpm })),
    expires: expiries.length === 0 ? null : Math.min(...expiries),
  };
}

export type KeyCheck =
  /** `parentsExpire`: the earliest expiry among the keys above it (null: none expires); it stops working then too. */
  | { ok: true; key: ApiKeyRecord; parentsExpire?: number | null }
  | { ok: false; reason: "malformed" | "unknown" | "revoked" | "expired" | "parent_inactive" | "account_disabled" };

/**
 * Looks a presented key up by its hash. Constant-time comparison of the hashes guards against
 * timing differences in the index lookup's final compare.
 */
export async function verifyApiKey(database: Kysely<Database>, presented: string, now = Date.now()): Promise<KeyCheck> {
  if (!wellFormedKey(presented)) return { ok: false, reason: "malformed" };
  return verifyKeyHash(database, hashKey(presented), now);
}

/** `verifyApiKey` of a well-formed key by its hash (`hashKey`). */
export async function verifyKeyHash(database: Kysely<Database>, hash: string, now = Date.now()): Promise<KeyCheck> {
  const row = await database
    .selectFrom("api_keys")
    .leftJoin("accounts", "accounts.id", "api_keys.account_id")
    .selectAll("api_keys")
    .select("accounts.disabled_at as account_disabled_at")
    .where("api_keys.key_hash", "=", hash)
    .executeTakeFirst();
  if (row === undefined || !timingSafeEqual(Buffer.from(row.key_hash, "hex"), Buffer.from(hash, "hex"))) {
    return { ok: false, reason: "unknown" };
  }
  if (row.revoked_at !== null) return { ok: false, reason: "revoked" };
  if (row.expires_at !== null && Number(row.expires_at) <= now) return { ok: false, reason: "expired" };
  if (row.account_disabled_at != null) return { ok: false, reason: "account_disabled" };
  // Only keys created by keys pay for a second query.
  const ancestors = row.parent_key_id === null ? { limits: [], expires: null } : await activeAncestors(database, row.parent_key_id, now);
  if (ancestors === null) return { ok: false, reason: "parent_inactive" };
  const { account_disabled_at: _disabled, ...key } = row;
  return { ok: true, key: { ...toRecord(key), ancestorLimits: ancestors.limits }, parentsExpire: ancestors.expires };
}

/** Records that a key was used; callers throttle this (at most once a minute per key). */
export async function touchApiKey(database: Kysely<Database>, id: string, now = Date.now()): Promise<void> {
  await database.updateTable("api_keys").set({ last_used_at: now }).where("id", "=", id).execute();
}
