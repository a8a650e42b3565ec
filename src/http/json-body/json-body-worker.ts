/**
 * The worker side of `json-body-parser.ts`: parses a large JSON body off the event loop and, for
 * a generation route, validates it against the route's request schema there too (`body-schemas.ts`), so a refused body (most
 * large hostile ones: too many messages, tools or `logit_bias` entries) never comes back to the
 * main thread at all. Answers `{id, value}` or `{id, error}` with the fields of an `ApiError`.
 */
import { parentPort } from "node:worker_threads";
import { ApiError } from "../../protocol/errors.ts";
import { BODY_SCHEMAS } from "./body-schemas.ts";
import { parseWithSchema } from "../../protocol/parse.ts";
import { INVALID_JSON_MESSAGE, type BodyJob, type BodyAnswer, type BodyError } from "./json-body-protocol.ts";
import { JsonTooDeepError, nestedDeeperThan } from "./json-depth.ts";

/** Keys that would poison a prototype once the body is merged into an object (Fastify refuses them too). */
function refusePoisoning(key: string, value: unknown): unknown {
  if (key === "__proto__") throw new SyntaxError("forbidden prototype property");
  if (key === "constructor" && value !== null && typeof value === "object" && Object.hasOwn(value, "prototype")) throw new SyntaxError("forbidden prototype property");
  return value;
}

/** Fastify's default parser's check: only bodies that mention the keys pay for the reviver. */
const MAY_POISON = /"(?:__proto__|constructor)"\s*:/;

/** An error's fields, to cross the thread boundary. */
function fieldsOf(error: ApiError): BodyError {
  return { status: error.status, type: error.type, code: error.code, param: error.param, message: error.message };
}

function answer(job: BodyJob): BodyAnswer {
  // Before anything recursive runs: the parse, the schema's walk, the clone back to the main thread.
  if (nestedDeeperThan(job.bytes)) return { id: job.id, error: fieldsOf(new JsonTooDeepError()) };
  const text = Buffer.from(job.bytes.buffer, job.bytes.byteOffset, job.bytes.byteLength).toString("utf8");
  let parsed: unknown;
  try {
    parsed = MAY_POISON.test(text) ? JSON.parse(text, refusePoisoning) : JSON.parse(text);
  } catch {
    return { id: job.id, error: fieldsOf(new ApiError(INVALID_JSON_MESSAGE, "invalid_json")) };
  }
  const schema = job.validate === "none" ? undefined : BODY_SCHEMAS[job.validate.route];
  if (schema === undefined) return { id: job.id, value: parsed, validated: false };
  try {
    // The validated request: unknown fields are dropped here, so they never cross back.
    return { id: job.id, value: parseWithSchema(schema, parsed), validated: true };
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    return { id: job.id, error: fieldsOf(error) };
  }
}

/** The answer to a body whose handling failed in a way no check foresaw: the job fails, the worker lives on. */
function internalError(job: BodyJob, error: unknown): BodyAnswer {
  const detail = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return { id: job.id, error: { status: 500, type: "server_error", code: "internal_error", param: null, message: "The server had an error while processing your request.", detail } };
}

parentPort!.on("message", (job: BodyJob) => {
  let reply: BodyAnswer;
  try {
    reply = answer(job);
  } catch (error) {
    reply = internalError(job, error);
  }
  try {
    parentPort!.postMessage(reply);
  } catch (error) {
    // The value could not be cloned back (the depth check makes this unexpected): this job fails alone.
    parentPort!.postMessage(internalError(job, error));
  }
});
