/**
 * Row ids: `prefix_` + the time in base 36 + a sequence within the millisecond + random bytes,
 * so that ids sort in the order they were made (ledger entries by id within the same
 * millisecond too) and never collide across nodes.
 */
import { pooledRandomBytes } from "./random.ts";

let lastTime = 0;
let sequence = 0;

/** A time-ordered, unique id such as `le_…` for a ledger entry made at `now` (milliseconds). */
export function newId(prefix: string, now = Date.now()): string {
  if (now === lastTime) sequence++;
  else {
    lastTime = now;
    sequence = 0;
  }
  return `${prefix}_${now.toString(36).padStart(9, "0")}${sequence.toString(36).padStart(4, "0")}${pooledRandomBytes(6).toString("hex")}`;
}
