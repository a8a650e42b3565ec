/**
 * Every error response leaves through here: typed `ApiError`s keep their status and code,
 * Fastify's own client errors (bad JSON, body too large) become `invalid_request_error`,
 * anything else is a logged 500 whose body says nothing of internals.
 */
import { INVALID_JSON_MESSAGE } from "./json-body/json-body-protocol.ts";
import type { Duplex } from "node:stream";
import type { FastifyError, FastifyReply, FastifyRequest } from "fastify";
import { ApiError, DatabaseUnavailableError, InternalServerError, InvalidRequestError, type ErrorBody } from "../protocol/errors.ts";
import { ERROR_CATALOG, type ErrorCode } from "../protocol/error-catalog.ts";
import { isDatabaseFailure, isStoreError } from "../store/errors.ts";
import { SECURITY_HEADERS } from "./middleware/security-headers/security-headers.ts";

/**
 * How a route writes its errors, when not as OpenAI does (`toBody`): its status, headers and body
 * for an error (Anthropic's shape on `/v1/messages`). A route picks it in its options
 * (`config: { errorFormat }`), so that the errors of its hooks (the key, the body parser) come out
 * in its shape too: every error still leaves through `handleError`.
 */
export type ErrorFormat = (error: ApiError, requestId: string) => { status: number; headers: Record<string, string>; body: unknown };

declare module "fastify" {
  interface FastifyContextConfig {
    /** The route's error shape (see `ErrorFormat`); OpenAI's when absent. */
    errorFormat?: ErrorFormat;
  }
}

/** Fastify error codes whose messages are safe and useful to the client. */
const clientErrorMessages: Record<string, string> = {
  FST_ERR_CTP_EMPTY_JSON_BODY: "The request body is empty; send a JSON object.",
  FST_ERR_CTP_INVALID_MEDIA_TYPE: "Unsupported content type; send 'Content-Type: application/json'.",
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: "The Content-Length header does not match the body.",
  FST_ERR_CTP_BODY_TOO_LARGE: "The request body is too large.",
};

/** The catalog code for one of Fastify's client errors, by its status. */
function clientErrorCode(status: number): ErrorCode {
  if (status === 413) return "request_too_large";
  if (status === 415) return "unsupported_media_type";
  return "invalid_request_error";
}

/** Turns anything thrown into an `ApiError`. */
export function toApiError(error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  // Only what the store threw: a socket error elsewhere (a client gone mid-upload) reads alike.
  if (isDatabaseFailure(error)) return new DatabaseUnavailableError();
  // Only decodeURI/decodeURIComponent throw URIError: on a route, that is text from the URL.
  if (error instanceof URIError) return new InvalidRequestError("The request URL is not valid: it holds a malformed percent-encoding.", null, "invalid_url");
  const fastifyError = error as Partial<FastifyError> | undefined;
  const status = fastifyError?.statusCode;
  if (typeof status === "number" && status >= 400 && status < 500) {
    const code = fastifyError?.code ?? "";
    if (error instanceof SyntaxError || code === "FST_ERR_CTP_INVALID_JSON_BODY") {
      return new InvalidRequestError(INVALID_JSON_MESSAGE, null, "invalid_json");
    }
    const message = clientErrorMessages[code] ?? "The request could not be processed.";
    return new ApiError(message, clientErrorCode(status));
  }
  return new InternalServerError(undefined, error);
}

/**
 * Answers a connection whose request Node's HTTP parser refused (malformed request line or
 * headers, headers too large, a request that took too long to arrive) in the same error shape
 * as every other response, then closes it.
 */
export function handleClientError(error: Error & { code?: string }, socket: Duplex): void {
  // A response already under way on this connection (its request's body was still arriving
  // when the request timeout struck) cannot be followed by another: the connection just ends.
  const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (error.code === "ECONNRESET" || !socket.writable || inFlight?.headersSent === true) {
    socket.destroy();
    return;
  }
  const [reason, code, message]: [string, ErrorCode, string] =
    error.code === "HPE_HEADER_OVERFLOW"
      ? ["Request Header Fields Too Large", "headers_too_large", "The request's URL and headers are too large."]
      : error.code === "ERR_HTTP_REQUEST_TIMEOUT"
        ? ["Request Timeout", "request_timeout", "The request did not arrive in time."]
        : ["Bad Request", "malformed_request", "The request is not valid HTTP."];
  const { status, type } = ERROR_CATALOG[code];
  const body = JSON.stringify({ error: { message, type, param: null, code } });
  const security = Object.entries(SECURITY_HEADERS)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join("");
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${security}Connection: close\r\n\r\n${body}`,
  );
  // Node's server allows half-open connections: without this, a client that never closes its
  // side would keep the socket (and its file descriptor) after the answer.
  (socket as Duplex & { destroySoon?: () => void }).destroySoon?.();
}

/** The body for an error; used inside streams too (`data: {"error":…}`). */
export function errorBody(error: unknown): ErrorBody {
  return toApiError(error).toBody();
}

/**
 * True when the request's client went away before its body had arrived: a socket error that is
 * not the store's (Node's "aborted", ECONNRESET, from reading the body), on a request stream that
 * ended without its end.
 */
function isClientAbort(error: unknown, request: FastifyRequest): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (code !== "ECONNRESET" && code !== "ECONNABORTED" && code !== "ERR_STREAM_PREMATURE_CLOSE") return false;
  return !isStoreError(error) && request.raw.readableAborted;
}

/** Fastify's error handler: one place maps errors to responses. */
export function handleError(error: unknown, request: FastifyRequest, reply: FastifyReply): void {
  if (isClientAbort(error, request)) {
    // Nobody is left to answer; nothing failed on this side.
    request.log.info({ code: (error as { code?: unknown }).code }, "request aborted by the client");
    void reply.code(400).send(new ApiError("The client closed the connection before the request body arrived.", "invalid_request_error").toBody());
    return;
  }
  const apiError = toApiError(error);
  if (apiError instanceof DatabaseUnavailableError) request.log.warn({ err: error }, "database unavailable");
  else if (apiError.status >= 500 && !(error instanceof ApiError)) request.log.error({ err: error }, "unhandled error");
  const format = (request.routeOptions.config as { errorFormat?: ErrorFormat } | undefined)?.errorFormat;
  if (format !== undefined) {
    const answer = format(apiError, request.id);
    void reply.code(answer.status).headers(answer.headers).send(answer.body);
    return;
  }
  void reply.code(apiError.status).headers(apiError.headers).send(apiError.toBody());
}
