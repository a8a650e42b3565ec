/**
 * Console passwords: scrypt (memory-hard, from node:crypto), stored as
 * `scrypt$N$r$p$salt$hash` so the cost can be raised without breaking old hashes: a hash made
 * with weaker parameters still verifies, and `needsRehash` tells the sign-in to replace it.
 *
 * scrypt runs on libuv's thread pool (the callback form), never on the event loop: a burst of
 * sign-ins costs threads and memory, not latency for everyone else. The sign-in throttle lets at
 * most a few attempts per account and address reach it.
 */
import { randomBytes, scrypt as scryptCallback, timingSafeEqual, type ScryptOptions } from "node:crypto";

/** N: 2^17, as OWASP's password storage guidance asks; 128 MiB of memory per hash with r = 8. */
export const COST = 2 ** 17;
const BLOCK_SIZE = 8;
const PARALLELISM = 1;
const KEY_LENGTH = 32;
/** Largest N a stored hash may ask for (a corrupted or hostile row must not take gigabytes). */
const MAX_COST = 2 ** 20;

function scrypt(password: string, salt: Buffer, options: ScryptOptions & { N: number; r: number; p: number }): Promise<Buffer> {
  // scrypt needs 128 * N * r * p bytes; Node refuses more than `maxmem` (32 MiB by default).
  const maxmem = 128 * options.N * options.r * options.p + 1024 * 1024;
  return new Promise((resolve, reject) => {
    scryptCallback(password.normalize("NFKC"), salt, KEY_LENGTH, { ...options, maxmem }, (error, key) => (error ? reject(error) : resolve(key)));
  });
}

/** A new hash of `password` with today's parameters. */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const hash = await scrypt(password, salt, { N: COST, r: BLOCK_SIZE, p: PARALLELISM });
  return ["scrypt", COST, BLOCK_SIZE, PARALLELISM, salt.toString("base64url"), hash.toString("base64url")].join("$");
}

type Parsed = { cost: number; blockSize: number; parallelism: number; salt: Buffer; hash: Buffer };

function parse(stored: string): Parsed | undefined {
  const [scheme, cost, blockSize, parallelism, salt, hash, ...rest] = stored.split("$");
  if (scheme !== "scrypt" || salt === undefined || hash === undefined || rest.length > 0) return undefined;
  const parsed = { cost: Number(cost), blockSize: Number(blockSize), parallelism: Number(parallelism), salt: Buffer.from(salt, "base64url"), hash: Buffer.from(hash, "base64url") };
  const powerOfTwo = Number.isInteger(parsed.cost) && parsed.cost > 1 && (parsed.cost & (parsed.cost - 1)) === 0;
  if (!powerOfTwo || parsed.cost > MAX_COST || !Number.isInteger(parsed.blockSize) || parsed.blockSize < 1 || parsed.blockSize > 32) return undefined;
  if (!Number.isInteger(parsed.parallelism) || parsed.parallelism < 1 || parsed.parallelism > 4 || parsed.hash.length === 0) return undefined;
  return parsed;
}

/** True when `password` matches `stored`; false for any malformed hash. */
export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const parsed = parse(stored);
  if (parsed === undefined) return false;
  const actual = await scrypt(password, parsed.salt, { N: parsed.cost, r: parsed.blockSize, p: parsed.parallelism });
  return actual.length === parsed.hash.length && timingSafeEqual(actual, parsed.hash);
}

/** True when `stored` was made with other parameters than `hashPassword` uses now: hash the password again at the next sign-in. */
export function needsRehash(stored: string): boolean {
  const parsed = parse(stored);
  return parsed === undefined || parsed.cost !== COST || parsed.blockSize !== BLOCK_SIZE || parsed.parallelism !== PARALLELISM || parsed.hash.length !== KEY_LENGTH;
}
