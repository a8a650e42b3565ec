/**
 * Every error response leaves through here: typed `ApiError`s keep their status and code,
 * Fastify's own client errors (bad JSON, body too large) become `invalid_request_error`,
 * anything else is a logged 500 whose body says nothing of internals.
 */
import type { FastifyError, FastifyReply, FastifyRequest } from "fastify";
import { ApiError, InternalServerError, InvalidRequestError, type ErrorBody } from "../protocol/errors.ts";

/** Fastify error codes whose messages are safe and useful to the client. */
const clientErrorMessages: Record<string, string> = {
  FST_ERR_CTP_EMPTY_JSON_BODY: "The request body is empty; send a JSON object.",
  FST_ERR_CTP_INVALID_MEDIA_TYPE: "Unsupported content type; send 'Content-Type: application/json'.",
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: "The Content-Length header does not match the body.",
  FST_ERR_CTP_BODY_TOO_LARGE: "The request body is too large.",
};

/** Turns anything thrown into an `ApiError`. */
export function toApiError(error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  const fastifyError = error as Partial<FastifyError> | undefined;
  const status = fastifyError?.statusCode;
  if (typeof status === "number" && status >= 400 && status < 500) {
    const code = fastifyError?.code ?? "";
    if (error instanceof SyntaxError || code === "FST_ERR_CTP_INVALID_JSON_BODY") {
      return new InvalidRequestError(
        "We could not parse the JSON body of your request. Send valid JSON with 'Content-Type: application/json'.",
        null,
        "invalid_json",
      );
    }
    const message = clientErrorMessages[code] ?? "The request could not be processed.";
    return new ApiError(message, {
      status,
      type: "invalid_request_error",
      code: code === "FST_ERR_CTP_BODY_TOO_LARGE" ? "request_too_large" : "invalid_request_error",
    });
  }
  return new InternalServerError(undefined, error);
}

/** The body for an error; used inside streams too (`data: {"error":…}`). */
export function errorBody(error: unknown): ErrorBody {
  return toApiError(error).toBody();
}

/** Fastify's error handler: one place maps errors to responses. */
export function handleError(error: unknown, request: FastifyRequest, reply: FastifyReply): void {
  const apiError = toApiError(error);
  if (apiError.status >= 500 && !(error instanceof ApiError)) {
    request.log.error({ err: error }, "unhandled error");
  }
  void reply.code(apiError.status).headers(apiError.headers).send(apiError.toBody());
}
