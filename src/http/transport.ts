/**
 * Transport limits: how long a request may take to arrive, how long an idle keep-alive connection
 * stays open, how many connections are open at once, and how large `/api` bodies may be. These
 * bound what a client that never finishes its request can hold (a file descriptor, a parser,
 * a buffer) before any authentication runs.
 */
import type { FastifyReply, FastifyRequest, RouteOptions } from "fastify";
import { RouteNotFoundError } from "../protocol/errors.ts";
import type { Logger } from "pino";

export type TransportLimits = {
  /** A request's headers and body must arrive whole within this (ms); a streamed response is not limited by it. */
  requestTimeoutMs: number;
  /** An idle keep-alive connection is closed after this (ms). */
  idleTimeoutMs: number;
  /** Open connections at most; more are closed as soon as they are accepted. 0: no cap. */
  maxConnections: number;
};

/** Largest body of `/api/auth/*` (an email address and a password). */
export const AUTH_BODY_LIMIT = 16 * 1024;
/** Largest body of other `/api` routes (keys, plans, codes, Stripe's webhook events). */
export const API_BODY_LIMIT = 256 * 1024;

/**
 * How often Node looks for requests past their deadline: Node checks `requestTimeout` and
 * `headersTimeout` only on this interval (30 s by default), so a request is cut between the
 * timeout and the timeout plus this. A quarter of the timeout, within 1–30 s.
 */
export function connectionsCheckingInterval(requestTimeoutMs: number): number {
  return Math.min(30_000, Math.max(1000, Math.round(requestTimeoutMs / 4)));
}

/** Fastify's server options for `limits`; none (Node's and Fastify's defaults) when absent. */
export function serverTimeouts(limits: TransportLimits | undefined): {
  requestTimeout?: number;
  keepAliveTimeout?: number;
  http?: { requestTimeout: number; headersTimeout: number; keepAliveTimeout: number; connectionsCheckingInterval: number };
} {
  if (limits === undefined) return {};
  const requestTimeout = Math.max(1, Math.round(limits.requestTimeoutMs));
  const keepAliveTimeout = Math.max(1, Math.round(limits.idleTimeoutMs));
  return {
    requestTimeout,
    keepAliveTimeout,
    http: {
      requestTimeout,
      // The headers are part of the request: they get no longer than the whole of it (Node
      // refuses a headers timeout above the request timeout).
      headersTimeout: requestTimeout,
      keepAliveTimeout,
      connectionsCheckingInterval: connectionsCheckingInterval(requestTimeout),
    },
  };
}

/**
 * An `onRoute` hook: `/api/auth/*` takes bodies up to `AUTH_BODY_LIMIT`, the rest of `/api` up to
 * `API_BODY_LIMIT` (never more than the server's `bodyLimit`); routes that set their own keep it.
 */
export function limitApiBodies(bodyLimit: number): (route: RouteOptions) => void {
  return function limitApiBody(route) {
    if (route.bodyLimit !== undefined) return;
    if (route.url.startsWith("/api/auth/")) route.bodyLimit = Math.min(AUTH_BODY_LIMIT, bodyLimit);
    else if (route.url.startsWith("/api/")) route.bodyLimit = Math.min(API_BODY_LIMIT, bodyLimit);
  };
}

/** A body a URL without a route may send and keep its connection: larger ones (or chunked) close it. */
export const UNROUTED_BODY_BYTES = 1024;

/**
 * For the app's `onRequest` hook: a request for a URL without a route is answered 404 on its headers, before
 * any of its body is read or parsed (the not-found route passes no `onRoute` hook, so it would
 * otherwise read bodies up to `--body-limit`). A body announced larger than `UNROUTED_BODY_BYTES`,
 * or of unknown length, is not read at all: the connection closes after the 404.
 */
export function unroutedRefusal(request: FastifyRequest, reply: FastifyReply): RouteNotFoundError | undefined {
  if (!request.is404) return undefined;
  const length = Number(request.headers["content-length"] ?? 0);
  if (request.headers["transfer-encoding"] !== undefined || !Number.isFinite(length) || length > UNROUTED_BODY_BYTES) void reply.header("connection", "close");
  return new RouteNotFoundError(request.method, request.url.split("?")[0] ?? request.url);
}

/**
 * A listener for the server's `drop` event (a connection refused at `maxConnections`): one warning
 * a minute at most, with how many were refused since the last one, so a flood cannot flood the log.
 */
export function warnOfDroppedConnections(logger: Logger, maxConnections: number, everyMs = 60_000): () => void {
  let dropped = 0;
  let lastWarnedAt = Number.NEGATIVE_INFINITY;
  return function countDroppedConnection() {
    dropped++;
    const now = performance.now();
    if (now - lastWarnedAt < everyMs) return;
    lastWarnedAt = now;
    logger.warn({ refused_connections: dropped, max_connections: maxConnections }, "refused connections: --max-connections open already");
    dropped = 0;
  };
}
