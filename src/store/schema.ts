/**
 * The tables, as Kysely sees them. Times are integer milliseconds since the epoch;
 * `null` in an optional time means "never" (not revoked, no expiry, not used yet).
 */
import type { Generated } from "kysely";

export type ApiKeyTable = {
  id: string;
  name: string;
  /** The first characters of the key, shown so people can tell keys apart. Never enough to use it. */
  display_prefix: string;
  /** SHA-256 of the whole key, hex. The key itself is never stored. */
  key_hash: string;
  /** Owner account; null for the built-in operator account. */
  account_id: string | null;
  created_at: number;
  revoked_at: number | null;
  expires_at: number | null;
  last_used_at: number | null;
};

export type Database = {
  api_keys: ApiKeyTable;
};

export type { Generated };
