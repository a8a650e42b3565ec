/**
 * Preloaded into Portkey's gateway by the benchmark (`node --import ./bench/gateway/portkey-preload.ts
 * node_modules/@portkey-ai/gateway/build/start-server.js --port=N --headless`). Two fixes, neither
 * of which changes what Portkey does per request:
 *
 * 1. Loopback only. Its start-up takes only `--port` and listens on every interface; a server
 *    that names no host listens on 127.0.0.1 instead.
 * 2. Streaming. With the @hono/node-server installed here (1.19, newer than the 1.14.2 Portkey
 *    1.15.2 works with), every streamed chat completion fails with `TypeError: immutable`
 *    ("Something went wrong", Portkey-AI/gateway#1389): Portkey appends its `x-portkey-*`
 *    headers to a response that shares the upstream `fetch` response's immutable headers.
 *    Portkey's own patch-package patch (for @hono/node-server 1.13.5, not shipped in the npm
 *    package anyway) does not help. Each `fetch` response is re-wrapped with a mutable copy of
 *    its headers, the same body stream (not read, not copied), as Portkey-AI/gateway#1551 does.
 */
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function listenOnLoopback(this: net.Server, ...args: unknown[]) {
  // `listen(port, undefined | callback, …)` as @hono/node-server calls it.
  if (typeof args[0] === "number" && typeof args[1] !== "string") args[1] = "127.0.0.1";
  return (listen as (...rest: unknown[]) => net.Server).apply(this, args);
} as typeof net.Server.prototype.listen;

// Taken before @hono/node-server replaces the global `Response` with its own.
const OriginalResponse = globalThis.Response;
const originalFetch = globalThis.fetch;
globalThis.fetch = async function fetchWithMutableHeaders(input, init) {
  const response = await originalFetch(input, init);
  return new OriginalResponse(response.body, { status: response.status, statusText: response.statusText, headers: new Headers(response.headers) });
} as typeof fetch;
