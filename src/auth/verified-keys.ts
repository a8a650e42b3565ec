/**
 * Keys verified on this node, kept for a moment so that a busy key costs one hash and one map
 * lookup per request instead of a query (the gateway bench's profile: the lookup was the largest
 * single cost of a proxied request). What holds exactly:
 * - a key revoked, or its account disabled, on this node is refused by the next request (the
 *   write notes the change, `store/changes.ts`, and the cache starts over);
 * - on SQLite, a write by another process (the CLI) is seen within 10 ms (`PRAGMA data_version`,
 *   read at most that often: `FOREIGN_CHANGES_CHECK_MS`);
 * - a write by another node reaches this one within `maxAgeMs` (1 s): no entry is used longer,
 *   unless the store proves it heard every change committed before then (PostgreSQL's live
 *   `ChangeFeed`, `foreignChangesWatched`): a key without a spend cap is then kept for up to
 *   `watchedMaxAgeMs` (60 s), since any change to it or its account (a revocation, a disable, new
 *   limits) starts the cache over the moment its notification arrives, and a feed that goes
 *   quiet stops proving itself within the 1 s. Keys with a spend cap keep the 1 s bound: what
 *   they have spent changes with every charge and is not notified;
 * - an expiry (the key's, or that of a key above it) is checked on every request;
 * - refusals are never kept (a key created or enabled a moment ago works at once), so a flood of
 *   unknown keys costs what it did.
 * What a cached key carries but may lag by up to the age bound (its `spent`) feeds only the cheap
 * pre-checks; the hold, which reads the database, decides.
 */
import type { Kysely } from "kysely";
import type { Database } from "../store/schema.ts";
import { changeMark, foreignChangesWatched, sameMark, type ChangeMark } from "../store/changes.ts";
import { hashKey, verifyKeyHash, wellFormedKey, type ApiKeyRecord, type KeyCheck } from "./api-keys.ts";

/** No entry is used for longer: a key revoked on another node is refused here within this. */
export const VERIFIED_KEY_MAX_AGE_MS = 1_000;
/** How long a key without a spend cap is kept while the store's change feed proves itself live. */
export const WATCHED_KEY_MAX_AGE_MS = 60_000;
/** Entries kept at most; past it the cache starts over (a bound on memory, not a policy). */
const MAX_ENTRIES = 10_000;

export type VerifiedKeysOptions = {
  maxAgeMs?: number;
  watchedMaxAgeMs?: number;
  maxEntries?: number;
  now?: () => number;
};

export class VerifiedKeys {
  readonly #database: Kysely<Database>;
  readonly #maxAgeMs: number;
  readonly #watchedMaxAgeMs: number;
  readonly #maxEntries: number;
  readonly #now: () => number;
  /** By the key's hash: the key and when it was read. */
  readonly #entries = new Map<string, { key: ApiKeyRecord; at: number; expires: number }>();
  #mark: ChangeMark;

  constructor(database: Kysely<Database>, options: VerifiedKeysOptions = {}) {
    this.#database = database;
    this.#maxAgeMs = options.maxAgeMs ?? VERIFIED_KEY_MAX_AGE_MS;
    this.#watchedMaxAgeMs = options.watchedMaxAgeMs ?? WATCHED_KEY_MAX_AGE_MS;
    this.#maxEntries = options.maxEntries ?? MAX_ENTRIES;
    this.#now = options.now ?? Date.now;
    this.#mark = changeMark(database);
  }

  /**
   * The answer `verify` gives from memory, synchronously (a malformed key, or a key verified less
   * than the age bound ago with nothing changed since); undefined when it must read the database.
   */
  known(presented: string): KeyCheck | undefined {
    if (!wellFormedKey(presented)) return { ok: false, reason: "malformed" };
    return this.#remembered(hashKey(presented), this.#now());
  }

  /**
   * The key of `hash` from memory, if it was verified less than the age bound before `now` and
   * nothing changed since; a change starts the cache over, and an entry past its time goes.
   */
  #remembered(hash: string, now: number): KeyCheck | undefined {
    const mark = changeMark(this.#database);
    if (!sameMark(mark, this.#mark)) {
      this.#entries.clear();
      this.#mark = mark;
      return undefined;
    }
    const entry = this.#entries.get(hash);
    if (entry === undefined) return undefined;
    if (entry.expires > now && this.#fresh(entry.key, now - entry.at)) return { ok: true, key: entry.key };
    this.#entries.delete(hash);
    return undefined;
  }

  /** Whether an entry read `age` ago may still be used (see the file's comment). */
  #fresh(key: ApiKeyRecord, age: number): boolean {
    if (age < this.#maxAgeMs) return true;
    return age < this.#watchedMaxAgeMs && key.spendCap === null && foreignChangesWatched(this.#database, this.#maxAgeMs);
  }

  /** `verifyApiKey`, from memory while the key was verified less than the age bound ago and nothing changed since. */
  async verify(presented: string): Promise<KeyCheck> {
    if (!wellFormedKey(presented)) return { ok: false, reason: "malformed" };
    const hash = hashKey(presented);
    const now = this.#now();
    const remembered = this.#remembered(hash, now);
    if (remembered !== undefined) return remembered;
    // Where the database stood before the read (`#remembered` brought the mark up to date).
    const before = this.#mark;
    const check = await verifyKeyHash(this.#database, hash, now);
    // Kept only when nothing changed while it was read: a revocation meanwhile is never cached over.
    if (check.ok && sameMark(changeMark(this.#database), before)) {
      if (this.#entries.size >= this.#maxEntries) this.#entries.clear();
      // It stops working when it expires or a key above it does: checked on every request.
      const expires = Math.min(check.key.expires ?? Infinity, check.parentsExpire ?? Infinity);
      this.#entries.set(hash, { key: check.key, at: now, expires });
    }
    return check;
  }
}
