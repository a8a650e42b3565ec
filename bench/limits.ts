/**
 * What the rate limits cost a request in the process, without HTTP: `RequestLimits` over the
 * in-memory limiter, a key with its own requests and tokens limits under a plan with both (four
 * buckets, as the gateway bench's metered key), each request admitted, its headers read, its
 * charge raised and finished, as the chat route does. With `--baseline <checkout>` that
 * checkout's modules run in the same process, rounds alternating which goes first, and the bench
 * prints this checkout's time per request over the baseline's.
 *
 *   node bench/limits.ts [--requests 200000] [--rounds 7] [--baseline /path/to/other/checkout]
 */
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const { values: flags } = parseArgs({
  options: {
    requests: { type: "string", default: "200000" },
    rounds: { type: "string", default: "7" },
    baseline: { type: "string" },
  },
});
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const requests = Number(flags.requests);
const rounds = Number(flags.rounds);

type Admission = { readonly headers: Record<string, string>; raise(tokens: number): Promise<void>; finish(used: number): Promise<void> };
type Limits = { admit(input: { key: unknown; plan: unknown; tokens: number }): Promise<Admission> };

/** One checkout's limits, over a fresh in-memory limiter. */
async function limitsOf(checkout: string): Promise<Limits> {
  const { RequestLimits } = (await import(pathToFileURL(path.join(checkout, "src/limits/request-limits.ts")).href)) as { RequestLimits: new (limiter: unknown) => Limits };
  const { MemoryRateLimiter } = (await import(pathToFileURL(path.join(checkout, "src/limits/memory.ts")).href)) as { MemoryRateLimiter: new () => unknown };
  return new RequestLimits(new MemoryRateLimiter());
}

// Limits far above what the bench sends: every request is admitted, as a busy key's are.
const key = { id: "key_bench", accountId: "acct_bench", rpm: 100_000_000, tpm: 1_000_000_000, ancestorLimits: [] };
const plan = { id: "bench", rpm: 100_000_000, tpm: 1_000_000_000 };

/** Microseconds per request over `requests` requests. */
async function measure(limits: Limits): Promise<number> {
  const started = performance.now();
  for (let index = 0; index < requests; index++) {
    const admitted = await limits.admit({ key, plan, tokens: 40 });
    if (admitted.headers["x-ratelimit-remaining-requests"] === undefined) throw new Error("no rate-limit headers");
    await admitted.raise(40);
    await admitted.finish(20);
  }
  return ((performance.now() - started) * 1000) / requests;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const sides: Array<{ name: string; limits: Limits; times: number[] }> = [{ name: "this checkout", limits: await limitsOf(root), times: [] }];
if (flags.baseline !== undefined) sides.push({ name: `baseline (${path.resolve(flags.baseline)})`, limits: await limitsOf(path.resolve(flags.baseline)), times: [] });
// A warm-up round each, not counted.
for (const side of sides) await measure(side.limits);
for (let round = 0; round < rounds; round++) {
  for (const side of round % 2 === 0 ? sides : [...sides].reverse()) side.times.push(await measure(side.limits));
}
for (const side of sides) console.log(`${side.name}: ${median(side.times).toFixed(2)} µs a request (median of ${rounds} rounds of ${requests}; ${side.times.map((time) => time.toFixed(2)).join(", ")})`);
if (sides.length === 2) {
  const ratios = sides[0]!.times.map((time, round) => time / sides[1]!.times[round]!);
  console.log(`this ÷ baseline: ${(median(sides[0]!.times) / median(sides[1]!.times)).toFixed(3)}× (median of the rounds' ratios ${median(ratios).toFixed(3)}×)`);
}
