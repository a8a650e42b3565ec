/**
 * What Fastify itself costs a proxied request: `framework-proxy.ts` served by node:http and by
 * Fastify (with 0 and with N trivial onRequest hooks), the same logic in both, each also with the
 * least a protocol-aware gateway does (`--parse`: request and answer parsed and written again),
 * and Turnpike with an operator key, against the bench's upstream, rounds alternating; CPU µs
 * per request of each process (/proc).
 *   node bench/gateway/framework-cost.ts [--rounds 3] [--duration 2] [--connections 1,16] [--modes json,stream] [--hooks 3]
 */
import path from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { runLoad } from "./load.ts";
import { readPortLine, startChild, startUpstream, type Child } from "./processes.ts";
import { SQLITE, startTurnpike } from "./turnpike.ts";

const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "3" },
    duration: { type: "string", default: "2" },
    connections: { type: "string", default: "1,16" },
    modes: { type: "string", default: "json,stream" },
    hooks: { type: "string", default: "3" },
  },
});
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const { child: upstream, origin: upstreamOrigin } = await startUpstream(path.join(root, "bench"));
const variants: Array<{ id: string; args: string[] }> = [
  { id: "node:http", args: ["--framework", "http"] },
  { id: "fastify", args: ["--framework", "fastify"] },
  { id: `fastify+${values.hooks} hooks`, args: ["--framework", "fastify", "--hooks", values.hooks] },
  { id: "node:http parsing", args: ["--framework", "http", "--parse"] },
  { id: "fastify parsing", args: ["--framework", "fastify", "--parse"] },
];
const children = new Map<string, { child: Child; origin: string }>();
for (const variant of variants) {
  const child = startChild(variant.id, [path.join(root, "bench/gateway/framework-proxy.ts"), "--upstream", upstreamOrigin, ...variant.args]);
  children.set(variant.id, { child, origin: `http://127.0.0.1:${await readPortLine(child, 15_000)}` });
}
// Turnpike itself, with the operator key, in the same rounds.
const turnpike = await startTurnpike(root, upstreamOrigin, 60_000, SQLITE);
variants.push({ id: "turnpike-operator", args: [] });
children.set("turnpike-operator", { child: turnpike.child, origin: turnpike.origin });
const authorization = { "turnpike-operator": `Bearer ${turnpike.operatorKey}` } as Record<string, string>;
const totals = new Map<string, { cpuMs: number; requests: number; rounds: number[] }>();
for (let round = 0; round < Number(values.rounds); round++) {
  for (const mode of values.modes.split(",")) {
    for (const connections of values.connections.split(",").map(Number)) {
      const order = round % 2 === 0 ? variants : [...variants].reverse();
      for (const variant of order) {
        const { child, origin } = children.get(variant.id)!;
        const stream = mode === "stream";
        let cpuBefore = 0;
        const result = await runLoad(
          {
            origin,
            path: "/v1/chat/completions",
            headers: { "content-type": "application/json", ...(authorization[variant.id] ? { authorization: authorization[variant.id] } : {}) },
            body: JSON.stringify({ model: "bench", messages: [{ role: "user", content: "Say something." }], max_tokens: 16, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) }),
            stream,
          },
          { connections, warmupMs: 500, durationMs: Number(values.duration) * 1000, maxRequests: 2_000_000, onMeasureStart: () => (cpuBefore = child.cpuMs()!), onMeasureEnd: () => (cpuBefore = child.cpuMs()! - cpuBefore) },
        );
        if (result.errors > 0) throw new Error(`${variant.id}: ${result.errorSamples.join("; ")}`);
        const key = `${mode} c=${connections} ${variant.id}`;
        const total = totals.get(key) ?? { cpuMs: 0, requests: 0, rounds: [] };
        total.cpuMs += cpuBefore;
        total.requests += result.requests;
        total.rounds.push((cpuBefore * 1000) / result.requests);
        totals.set(key, total);
      }
    }
  }
}
for (const [key, total] of totals) console.log(`${key.padEnd(34)} ${((total.cpuMs * 1000) / total.requests).toFixed(0).padStart(5)} µs/req  rounds ${total.rounds.map((r) => r.toFixed(0)).join(", ")}`);
for (const { child } of children.values()) await child.stop();
await turnpike.cleanup();
await upstream.stop();
