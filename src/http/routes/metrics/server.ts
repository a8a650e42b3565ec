/**
 * `--metrics-listen host:port`: `/metrics` served on a listener of its own (a private interface,
 * a port the firewall keeps in), and no longer on the API's. Only `GET /metrics` is answered
 * there (with the token when one is set); anything else is 404.
 */
import http from "node:http";
import type net from "node:net";
import type { Metrics } from "../../../metrics/metrics.ts";
import { ApiError, RouteNotFoundError } from "../../../protocol/errors.ts";
import { carriesMetricsToken, invalidMetricsTokenError } from "./access.ts";

export type MetricsServerOptions = {
  metrics: Metrics;
  /** `host:port` (`[::1]:9464` for IPv6; port 0 picks a free one). */
  listen: string;
  token?: string;
  onError: (error: unknown) => void;
};

export type MetricsServer = {
  /** `http://host:port/metrics` */
  url: string;
  close(): Promise<void>;
};

/** Splits `host:port` (`[v6]:port` too). */
export function parseListenAddress(listen: string): { host: string; port: number } {
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:[\]]+)):(\d{1,5})$/.exec(listen.trim());
  const port = Number(match?.[3]);
  if (match === null || port > 65535) throw new TypeError(`'${listen}' is not host:port`);
  return { host: match[1] ?? match[2]!, port };
}

function send(response: http.ServerResponse, error: ApiError): void {
  const body = JSON.stringify(error.toBody());
  response.writeHead(error.status, { ...error.headers, "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(body) });
  response.end(body);
}

/** Starts the metrics listener; resolves once it listens. */
export async function startMetricsServer(options: MetricsServerOptions): Promise<MetricsServer> {
  const { host, port } = parseListenAddress(options.listen);
  const server = http.createServer((request, response) => {
    const path = (request.url ?? "/").split("?")[0];
    if ((request.method !== "GET" && request.method !== "HEAD") || path !== "/metrics") return send(response, new RouteNotFoundError(request.method ?? "GET", path ?? "/"));
    if (options.token !== undefined && !carriesMetricsToken(request.headers.authorization, options.token)) return send(response, invalidMetricsTokenError());
    options.metrics.registry.metrics().then(
      (text) => {
        response.writeHead(200, { "content-type": options.metrics.registry.contentType });
        response.end(request.method === "HEAD" ? undefined : text);
      },
      (error: unknown) => {
        options.onError(error);
        response.writeHead(500).end();
      },
    );
  });
  server.requestTimeout = 10_000;
  server.headersTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address() as net.AddressInfo;
  const shown = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return {
    url: `http://${shown}:${address.port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
