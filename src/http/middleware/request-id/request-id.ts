/**
 * Request ids: the client's `x-request-id` when it is sane, else a fresh one.
 * Every response carries it back in `x-request-id`.
 */
import { pooledRandomBytes } from "../../../store/random.ts";
import type { FastifyReply, FastifyRequest } from "fastify";
import type { IncomingMessage } from "node:http";

const SANE_ID = /^[A-Za-z0-9._:@\-]{1,128}$/;

/** For Fastify's `genReqId`: reuses a sane client id. */
export function requestIdFrom(request: IncomingMessage): string {
  const header = request.headers["x-request-id"];
  const presented = Array.isArray(header) ? header[0] : header;
  if (presented !== undefined && SANE_ID.test(presented)) return presented;
  return `req_${pooledRandomBytes(12).toString("base64url")}`;
}

/** Echoes the request id on every response, including errors and streams (called first thing by the app's one `onRequest` hook). */
export function setRequestIdHeader(request: FastifyRequest, reply: FastifyReply): void {
  void reply.header("x-request-id", request.id);
}
