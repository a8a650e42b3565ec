/**
 * The same pass-through proxy as `bare-proxy.ts`, but with the request body read whole as a
 * string and the upstream's answer read whole (JSON) or relayed (SSE), served either by node:http
 * alone or by Fastify 5 (one route, a string body parser, `reply.send`): what the framework itself
 * costs a request, for `framework-cost.ts`.
 *
 *   node bench/gateway/framework-proxy.ts --upstream http://127.0.0.1:PORT --framework http|fastify
 */
import http from "node:http";
import { parseArgs } from "node:util";
import Fastify from "fastify";
import { Pool } from "undici";

const { values } = parseArgs({
  options: { upstream: { type: "string" }, framework: { type: "string", default: "http" }, hooks: { type: "string", default: "0" }, parse: { type: "boolean", default: false } },
});
if (values.upstream === undefined) throw new Error("--upstream is required");
const pool = new Pool(values.upstream, { connections: 1024, pipelining: 1, keepAliveTimeout: 60_000 });
const upstreamHeaders = { "content-type": "application/json" };

/**
 * With `--parse`, what any gateway that speaks the protocol must do at the least: the request
 * parsed and written again, the answer parsed and written again with the gateway's id and model
 * (each SSE event, for streams).
 */
const parse = values.parse;
let sequence = 0;
function rewrite(json: string): string {
  const value = JSON.parse(json) as Record<string, unknown>;
  value.id = `chatcmpl-${++sequence}`;
  value.model = "bench";
  return JSON.stringify(value);
}
/** The events of one read, rewritten: the bench's upstream writes a whole stream in one write, so no event is split across reads here (a general relay would carry a partial event over). */
function rewriteEvents(text: string): string {
  let out = "";
  for (const event of text.split("\n\n")) {
    if (event.startsWith("data: {")) out += `data: ${rewrite(event.slice(6))}\n\n`;
    else if (event !== "") out += `${event}\n\n`;
  }
  return out;
}
function requestBody(body: string): string {
  return parse ? JSON.stringify(JSON.parse(body)) : body;
}

async function forward(body: string): Promise<{ status: number; contentType: string; body: import("undici").Dispatcher.ResponseData["body"] }> {
  const upstream = await pool.request({ path: "/v1/chat/completions", method: "POST", headers: upstreamHeaders, body: requestBody(body) });
  return { status: upstream.statusCode, contentType: String(upstream.headers["content-type"] ?? "application/json"), body: upstream.body };
}

function announce(server: http.Server): void {
  const address = server.address();
  process.stdout.write(`${JSON.stringify({ port: typeof address === "object" && address !== null ? address.port : 0 })}\n`);
}

if (values.framework === "fastify") {
  const app = Fastify({ logger: false, keepAliveTimeout: 60_000 });
  app.addContentTypeParser("application/json", { parseAs: "string" }, (_request, body, done) => done(null, body));
  for (let i = 0; i < Number(values.hooks); i++) {
    app.addHook("onRequest", (_request, reply, done) => {
      reply.header(`x-hook-${i}`, "1");
      done();
    });
  }
  app.post("/v1/chat/completions", async (request, reply) => {
    const upstream = await forward(request.body as string);
    reply.code(upstream.status).header("content-type", upstream.contentType);
    if (upstream.contentType.startsWith("text/event-stream")) {
      if (!parse) return reply.send(upstream.body);
      reply.hijack();
      reply.raw.writeHead(upstream.status, { "content-type": upstream.contentType });
      upstream.body.setEncoding("utf8");
      for await (const chunk of upstream.body) reply.raw.write(rewriteEvents(chunk as string));
      reply.raw.end();
      return reply;
    }
    const text = await upstream.body.text();
    return reply.send(parse ? rewrite(text) : text);
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  announce(app.server);
} else {
  const server = http.createServer({ keepAliveTimeout: 60_000 }, (request, response) => {
    let body = "";
    request.setEncoding("utf8");
    request.on("data", (chunk: string) => (body += chunk));
    request.on("end", async () => {
      try {
        const upstream = await forward(body);
        if (upstream.contentType.startsWith("text/event-stream")) {
          response.writeHead(upstream.status, { "content-type": upstream.contentType });
          if (parse) upstream.body.setEncoding("utf8");
          for await (const chunk of upstream.body) response.write(parse ? rewriteEvents(chunk as string) : chunk);
          response.end();
        } else {
          const text = parse ? rewrite(await upstream.body.text()) : await upstream.body.text();
          response.writeHead(upstream.status, { "content-type": upstream.contentType, "content-length": Buffer.byteLength(text) });
          response.end(text);
        }
      } catch (error) {
        response.writeHead(502).end(String(error));
      }
    });
  });
  server.listen(0, "127.0.0.1", () => announce(server));
}
process.on("SIGTERM", () => process.exit(0));
