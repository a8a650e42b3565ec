/**
 * Counts Turnpike's system calls per request (strace -c on its process) for one key and mode at a
 * given connection count: where a request's kernel time goes, against the bare proxy's two reads
 * and two writes.
 *   node bench/gateway/syscalls.ts [--key operator|metered|unlimited] [--stream] [--connections 1] [--requests 3000] [--target turnpike|bare]
 */
import { spawn } from "node:child_process";
import path from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { runLoad } from "./load.ts";
import { readPortLine, startChild, startUpstream } from "./processes.ts";
import { SQLITE, startTurnpike } from "./turnpike.ts";

const { values } = parseArgs({
  options: {
    key: { type: "string", default: "operator" },
    stream: { type: "boolean", default: false },
    connections: { type: "string", default: "1" },
    requests: { type: "string", default: "3000" },
    target: { type: "string", default: "turnpike" },
  },
});
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const { child: upstream, origin: upstreamOrigin } = await startUpstream(path.join(root, "bench"));
let origin: string;
let pid: number;
let key = "none";
let stop: () => Promise<void>;
if (values.target === "bare") {
  const bare = startChild("bare", [path.join(root, "bench/gateway/bare-proxy.ts"), "--upstream", upstreamOrigin]);
  origin = `http://127.0.0.1:${await readPortLine(bare, 15_000)}`;
  pid = bare.process.pid!;
  stop = () => bare.stop();
} else {
  const turnpike = await startTurnpike(root, upstreamOrigin, 60_000, SQLITE);
  origin = turnpike.origin;
  pid = turnpike.child.process.pid!;
  key = values.key === "metered" ? turnpike.meteredKey : values.key === "unlimited" ? turnpike.unlimitedKey : turnpike.operatorKey;
  stop = async () => {
    await turnpike.child.stop();
    await turnpike.cleanup();
  };
}
const target = {
  origin,
  path: "/v1/chat/completions",
  headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
  body: JSON.stringify({ model: "bench", messages: [{ role: "user", content: "Say something." }], max_tokens: 16, stream: values.stream, ...(values.stream ? { stream_options: { include_usage: true } } : {}) }),
  stream: values.stream,
};
await runLoad(target, { connections: Number(values.connections), warmupMs: 1000, durationMs: 1000, maxRequests: 1_000_000 });
const strace = spawn("strace", ["-f", "-c", "-p", String(pid)], { stdio: ["ignore", "ignore", "pipe"] });
let report = "";
strace.stderr.on("data", (chunk: Buffer) => (report += chunk.toString()));
await new Promise((resolve) => setTimeout(resolve, 500));
const result = await runLoad(target, { connections: Number(values.connections), warmupMs: 0, durationMs: 60_000, maxRequests: Number(values.requests) });
strace.kill("SIGINT");
await new Promise((resolve) => strace.once("close", resolve));
console.log(`${result.requests} requests, ${result.errors} errors`);
for (const line of report.split("\n")) {
  const match = /^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$/.exec(line);
  if (match !== null) console.log(`${(Number(match[1]) / result.requests).toFixed(2).padStart(8)} ${match[2]}`);
}
await stop();
await upstream.stop();
