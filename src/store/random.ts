/**
 * Random bytes for the ids made on every request (request ids, completion ids, row ids), drawn
 * from a pool refilled 4 KiB at a time: `crypto.randomBytes` per id cost ~5% of a proxied
 * request's CPU (the gateway bench's profile). The bytes are the OS's cryptographic randomness
 * all the same (Node's `randomUUID` pools the same way); keys, session tokens and salts still
 * take theirs from `crypto.randomBytes` directly.
 */
import { randomFillSync } from "node:crypto";

const POOL_BYTES = 4096;
const pool = Buffer.alloc(POOL_BYTES);
let offset = POOL_BYTES;

/** `size` fresh random bytes (a copy: later draws never change it). */
export function pooledRandomBytes(size: number): Buffer {
  if (size > POOL_BYTES) return randomFillSync(Buffer.alloc(size));
  if (offset + size > POOL_BYTES) {
    randomFillSync(pool);
    offset = 0;
  }
  const bytes = Buffer.from(pool.subarray(offset, offset + size));
  // Drawn bytes are never handed out twice.
  offset += size;
  return bytes;
}
