/**
 * API keys: `tp-` followed by 43 base64url characters (256 random bits). Only the SHA-256 of a
 * key and a short display prefix are stored; the key itself is shown once, at creation.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { Kysely } from "kysely";
import type { Database } from "../store/schema.ts";

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
};

export type CreatedApiKey = ApiKeyRecord & {
  /** The key itself: shown once, never stored. */
  key: string;
};

/** SHA-256 of a key, hex: what the database stores and looks up. */
export function hashKey(key: string): string {
  return createHash("sha256").update(key, "utf8").digest("hex");
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
  now?: number;
};

/** Creates a key and returns it with its record. The caller shows `key` once. */
export async function createApiKey(database: Kysely<Database>, options: CreateKeyOptions = {}): Promise<CreatedApiKey> {
  const key = generateKey();
  const row: Database["api_keys"] = {
    id: newId(),
    name: options.name ?? "",
    display_prefix: key.slice(0, DISPLAY_LENGTH),
    key_hash: hashKey(key),
    account_id: options.accountId ?? null,
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
  };
  await database.insertInto("api_keys").values(row).execute();
  return { ...toRecord(row), key };
}

/** All keys, newest first; never the keys themselves. */
export async function listApiKeys(database: Kysely<Database>, accountId?: string | null): Promise<ApiKeyRecord[]> {
  let query = database.selectFrom("api_keys").selectAll().orderBy("created_at", "desc").orderBy("id");
  if (accountId !== undefined) {
    query = accountId === null ? query.where("account_id", "is", null) : query.where("account_id", "=", accountId);
  }
  return (await query.execute()).map(toRecord);
}

/** One key by id, or undefined. */
export async function findApiKey(database: Kysely<Database>, id: string): Promise<ApiKeyRecord | undefined> {
  const row = await database.selectFrom("api_keys").selectAll().where("id", "=", id).executeTakeFirst();
  return row && toRecord(row);
}

/** Revokes a key; returns false when there is no such key. Revoking twice keeps the first time. */
export async function revokeApiKey(database: Kysely<Database>, id: string, now = Date.now()): Promise<boolean> {
  const existing = await database.selectFrom("api_keys").select(["id", "revoked_at"]).where("id", "=", id).executeTakeFirst();
  if (existing === undefined) return false;
  if (existing.revoked_at === null) {
    await database.updateTable("api_keys").set({ revoked_at: now }).where("id", "=", id).where("revoked_at", "is", null).execute();
  }
  return true;
}

export type KeyCheck =
  | { ok: true; key: ApiKeyRecord }
  | { ok: false; reason: "malformed" | "unknown" | "revoked" | "expired" | "account_disabled" };

/**
 * Looks a presented key up by its hash. Constant-time comparison of the hashes guards against
 * timing differences in the index lookup's final compare.
 */
export async function verifyApiKey(database: Kysely<Database>, presented: string, now = Date.now()): Promise<KeyCheck> {
  if (!presented.startsWith(KEY_PREFIX) || presented.length > 256) return { ok: false, reason: "malformed" };
  const hash = hashKey(presented);
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
  const { account_disabled_at: _disabled, ...key } = row;
  return { ok: true, key: toRecord(key) };
}

/** Records that a key was used; callers throttle this (at most once a minute per key). */
export async function touchApiKey(database: Kysely<Database>, id: string, now = Date.now()): Promise<void> {
  await database.updateTable("api_keys").set({ last_used_at: now }).where("id", "=", id).execute();
}
