/**
 * Profiles Turnpike as the gateway bench runs it: the zero-latency upstream, Turnpike in its own
 * process with a V8 CPU profile, one key's load for a few seconds; prints where Turnpike's CPU
 * went (self time by function, the top entries) and leaves the `.cpuprofile` for Chrome DevTools.
 *   node bench/gateway/profile.ts [--key operator|metered|unlimited] [--stream] [--responses [--unstored] | --messages] [--connections 16] [--seconds 8] [--database sqlite|postgres://…]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { runLoad } from "./load.ts";
import { startUpstream } from "./processes.ts";
import { postgresSchema, SQLITE, startTurnpike } from "./turnpike.ts";

const { values } = parseArgs({
  options: {
    key: { type: "string", default: "operator" },
    stream: { type: "boolean", default: false },
    /** `POST /v1/responses` (stored unless `--unstored`) instead of chat completions. */
    responses: { type: "boolean", default: false },
    unstored: { type: "boolean", default: false },
    /** `POST /v1/messages` (Anthropic's Messages API, the key as `x-api-key`) instead of chat completions. */
    messages: { type: "boolean", default: false },
    connections: { type: "string", default: "16" },
    seconds: { type: "string", default: "8" },
    top: { type: "string", default: "40" },
    /** `sqlite`, or a postgres:// URL (a fresh schema there). */
    database: { type: "string", default: "sqlite" },
  },
});
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const profileDir = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-profile-"));
process.env.TURNPIKE_BENCH_PROFILE_DIR = profileDir;
const { child: upstream, origin: upstreamOrigin } = await startUpstream(path.join(root, "bench"));
const turnpike = await startTurnpike(root, upstreamOrigin, 60_000, values.database === "sqlite" ? SQLITE : await postgresSchema(values.database));
try {
  const stream = values.stream;
  const key = values.key === "metered" ? turnpike.meteredKey : values.key === "unlimited" ? turnpike.unlimitedKey : turnpike.operatorKey;
  const result = await runLoad(
    {
      origin: turnpike.origin,
      path: values.messages ? "/v1/messages" : values.responses ? "/v1/responses" : "/v1/chat/completions",
      headers: values.messages
        ? { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" }
        : { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: values.messages
        ? JSON.stringify({ model: "bench", max_tokens: 16, messages: [{ role: "user", content: "Say something." }], ...(stream ? { stream } : {}) })
        : values.responses
          ? JSON.stringify({ model: "bench", input: "Say something.", max_output_tokens: 16, stream, ...(values.unstored ? { store: false } : {}) })
          : JSON.stringify({ model: "bench", messages: [{ role: "user", content: "Say something." }], max_tokens: 16, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) }),
      stream,
      ...(values.messages ? { dialect: "messages" as const } : values.responses ? { dialect: "responses" as const } : {}),
    },
    { connections: Number(values.connections), warmupMs: 1000, durationMs: Number(values.seconds) * 1000, maxRequests: 1_000_000 },
  );
  console.log(JSON.stringify({ requestsPerSecond: Math.round(result.requests / result.seconds), requests: result.requests, errors: result.errors }));
} finally {
  await turnpike.child.stop();
  await upstream.stop();
}
const file = fs.readdirSync(profileDir).find((name) => name.endsWith(".cpuprofile"));
if (file === undefined) throw new Error("no profile was written");
type Node = { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; hitCount: number };
const profile = JSON.parse(fs.readFileSync(path.join(profileDir, file), "utf8")) as { nodes: Node[]; samples: number[] };
const self = new Map<string, number>();
let total = 0;
for (const node of profile.nodes) {
  const where = `${node.callFrame.functionName || "(anonymous)"} ${node.callFrame.url.replace(/^file:\/\//, "").replace(root + "/", "")}:${node.callFrame.lineNumber + 1}`;
  self.set(where, (self.get(where) ?? 0) + node.hitCount);
  total += node.hitCount;
}
for (const [where, hits] of [...self].sort((a, b) => b[1] - a[1]).slice(0, Number(values.top))) console.log(`${((hits / total) * 100).toFixed(1).padStart(5)}%  ${where}`);
// Self time by area: a package, a folder of src/, Node's internals, V8's own entries (GC, program, idle).
const byArea = new Map<string, number>();
for (const node of profile.nodes) {
  const url = node.callFrame.url.replace(/^file:\/\//, "").replace(root + "/", "");
  const area =
    url === ""
      ? `(${node.callFrame.functionName.replace(/[()]/g, "") || "native"})`
      : url.startsWith("node:")
        ? url.replace(/^node:(internal\/)?/, "node:").split("/").slice(0, 2).join("/")
        : url.includes("node_modules/")
          ? url.slice(url.lastIndexOf("node_modules/") + 13).split("/").slice(0, url.includes("node_modules/@") ? 2 : 1).join("/")
          : url.split("/").slice(0, url.startsWith("src/") ? 3 : 2).join("/");
  byArea.set(area, (byArea.get(area) ?? 0) + node.hitCount);
}
const idle = byArea.get("(idle)") ?? 0;
console.log(`\nself time by area (of ${total - idle} busy samples; idle ${((idle / total) * 100).toFixed(1)}% of all):`);
for (const [area, hits] of [...byArea].filter(([area]) => area !== "(idle)").sort((a, b) => b[1] - a[1]).slice(0, 30)) console.log(`${((hits / (total - idle)) * 100).toFixed(1).padStart(5)}%  ${area}`);
console.log(`profile: ${path.join(profileDir, file)}`);
await turnpike.cleanup();
