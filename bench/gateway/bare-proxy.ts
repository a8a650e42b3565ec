/**
 * The gateway benchmark's floor: a bare pass-through proxy, the least a Node gateway can do.
 * Every request goes to the upstream over a keep-alive undici `Pool`, request and response
 * bodies piped through untouched (no parsing, no auth, no accounting). Its own process:
 *
 *   node bench/gateway/bare-proxy.ts --upstream http://127.0.0.1:PORT [--port 0] [--connections 1024]
 *
 * Prints one line, `{"port": N}`, once it listens.
 */
import http from "node:http";
import { pipeline } from "node:stream/promises";
import { parseArgs } from "node:util";
import { Pool } from "undici";

/** Headers that belong to one hop and are not forwarded (RFC 9110 §7.6.1). */
const HOP_BY_HOP = new Set(["connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "host"]);

const { values } = parseArgs({ options: { upstream: { type: "string" }, port: { type: "string", default: "0" }, connections: { type: "string", default: "1024" } } });
if (values.upstream === undefined) throw new Error("--upstream http://127.0.0.1:PORT is required");
const pool = new Pool(values.upstream, { connections: Number(values.connections), pipelining: 1, keepAliveTimeout: 60_000 });

const server = http.createServer({ keepAliveTimeout: 60_000 }, async function proxy(request, response) {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(request.headers)) if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = value;
  const hasBody = request.method !== "GET" && request.method !== "HEAD";
  try {
    const upstream = await pool.request({ path: request.url ?? "/", method: request.method as "POST", headers, body: hasBody ? request : undefined });
    const replyHeaders: Record<string, string | string[]> = {};
    for (const [name, value] of Object.entries(upstream.headers)) if (value !== undefined && !HOP_BY_HOP.has(name)) replyHeaders[name] = value;
    response.writeHead(upstream.statusCode, replyHeaders);
    await pipeline(upstream.body, response);
  } catch (error) {
    if (response.headersSent) return void response.destroy();
    response.writeHead(502, { "content-type": "application/json" });
    response.end(JSON.stringify({ error: { message: `upstream: ${(error as Error).message}`, type: "upstream_error", param: null, code: "upstream_error" } }));
  }
});
server.listen(Number(values.port), "127.0.0.1", () => {
  const address = server.address();
  process.stdout.write(`${JSON.stringify({ port: typeof address === "object" && address !== null ? address.port : 0 })}\n`);
});
process.on("SIGTERM", () => process.exit(0));
