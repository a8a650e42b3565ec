/**
 * Small JSON calls to an upstream server (health probes, detection, model info, tokenizing):
 * bounded in time and size, classified like a request's outcome, and never throwing for the
 * upstream's failures. The API key goes in a header only: no URL, message or error carries it.
 */
import { request } from "undici";
import type { FailureKind } from "./member.ts";

export type JsonAnswer =
  | { ok: true; status: number; body: unknown }
  /** `status` and `retryAfterMs` when the server answered with an error status. */
  | { ok: false; failure: FailureKind; status?: number; retryAfterMs?: number };

export type JsonCallOptions = {
  method?: "GET" | "POST";
  /** Sent as JSON. */
  body?: unknown;
  /** Sent as `Authorization: Bearer`. */
  apiKey?: string;
  /** The whole call: connecting, headers and body. */
  timeoutMs: number;
  /** The caller's signal: when it aborts, the call throws its reason (that is no upstream failure). */
  signal?: AbortSignal;
  /** The most bytes of body read (default 4 MiB); a longer body is a `protocol` failure. */
  maxBytes?: number;
  /** Parse the body as JSON (default true); false: `body` is the text as read (a health check's `OK`). */
  json?: boolean;
};

/**
 * Calls `url` and parses its JSON answer. A refused or reset connection is `connect`, no answer
 * in time is `timeout`, a status outside 2xx is `status`, a body that is not JSON is `protocol`.
 */
export async function callJson(url: string, options: JsonCallOptions): Promise<JsonAnswer> {
  const target = new URL(url);
  const headers: Record<string, string> = { accept: "application/json" };
  if (options.apiKey !== undefined && options.apiKey !== "") headers.authorization = `Bearer ${options.apiKey}`;
  else if (target.username !== "") headers.authorization = `Basic ${Buffer.from(`${decodeURIComponent(target.username)}:${decodeURIComponent(target.password)}`).toString("base64")}`;
  target.username = "";
  target.password = "";
  if (options.body !== undefined) headers["content-type"] = "application/json";

  const timer = AbortSignal.timeout(options.timeoutMs);
  const signal = options.signal === undefined ? timer : AbortSignal.any([timer, options.signal]);
  try {
    const response = await request(target, {
      method: options.method ?? (options.body === undefined ? "GET" : "POST"),
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      signal,
    });
    const text = await readText(response.body, options.maxBytes ?? 4 * 1024 * 1024);
    if (response.statusCode < 200 || response.statusCode > 299) {
      return { ok: false, failure: "status", status: response.statusCode, retryAfterMs: retryAfterMs(response.headers["retry-after"]) };
    }
    if (text === undefined) return { ok: false, failure: "protocol" };
    if (options.json === false) return { ok: true, status: response.statusCode, body: text };
    try {
      return { ok: true, status: response.statusCode, body: text === "" ? null : JSON.parse(text) };
    } catch {
      return { ok: false, failure: "protocol" };
    }
  } catch (error) {
    if (options.signal?.aborted) throw options.signal.reason;
    if (timer.aborted) return { ok: false, failure: "timeout" };
    return { ok: false, failure: isTimeout(error) ? "timeout" : "connect" };
  }
}

/** The body as text, or undefined when it is longer than `maxBytes` (the rest is not read). */
async function readText(body: AsyncIterable<Buffer> & { destroy(): unknown }, maxBytes: number): Promise<string | undefined> {
  const chunks: Buffer[] = [];
  let length = 0;
  for await (const chunk of body) {
    length += chunk.length;
    if (length > maxBytes) {
      body.destroy();
      return undefined;
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString("utf8");
}

function isTimeout(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === "UND_ERR_CONNECT_TIMEOUT" || code === "UND_ERR_HEADERS_TIMEOUT" || code === "UND_ERR_BODY_TIMEOUT";
}

/**
 * A `retry-after` header in milliseconds: delay-seconds or an HTTP date (RFC 9110 §10.2.3);
 * undefined when absent or unreadable.
 */
export function retryAfterMs(header: string | string[] | undefined, now = Date.now()): number | undefined {
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined || value.trim() === "") return undefined;
  if (/^\s*\d+(\.\d+)?\s*$/.test(value)) return Math.round(Number(value) * 1000);
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}
