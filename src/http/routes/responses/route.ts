/**
 * The Responses API (`/v1/responses`): create (JSON, SSE, or in the background), and the stored
 * responses of the key's account: get, delete, list input items, cancel a background one, count a
 * request's input tokens. Creation is the Responses dialect (`dialect.ts`) over the generation
 * core's shared admission, run and settlement (`http/generation/`): the same order of cheap
 * refusals, holds, leases, limits and checkpoints as chat completions. A stored response is one
 * group-committed write (`ResponseStore.save`, deferred: it shares a commit with the saves of the
 * next few milliseconds, off the response path), made when the response is settled; this node
 * reads it from memory until it is written, and another node's read that misses it looks again
 * once it would be (`afterCommitWindow`). A background response's states are written at once.
 */
import { cheapBound } from "../../generation/cheap-bound.ts";
import type { FastifyInstance, FastifyRequest, onRequestHookHandler } from "fastify";
import { setTimeout as delay } from "node:timers/promises";
import { z } from "zod";
import type { ApiKeyRecord } from "../../../auth/api-keys.ts";
import { ApiError, InvalidRequestError, ShuttingDownError } from "../../../protocol/errors.ts";
import { parseWithSchema } from "../../../protocol/parse.ts";
import type { ResponseResource } from "../../../protocol/responses/resource.ts";
import type { ConversationItem, StoredInputItem } from "../../../protocol/responses/to-generation.ts";
import {
  BrokenResponseChainError,
  InputItemCursorError,
  ResponseChainTooLongError,
  StoredResponseTooLargeError,
  type ResponseStore,
} from "../../../responses/store.ts";
import { generationServing, openSse, type GenerationRouteOptions } from "../../generation/route-kit.ts";
import { runCompletion, runStream } from "../../generation/run.ts";
import { parseResponse, responseErrorOf, responsesDialect, type ResponseJob } from "./dialect.ts";

/** The stored responses of the Responses API, typed. */
export type StoredResponses = ResponseStore<ResponseResource, StoredInputItem>;

export type ResponsesRouteOptions = GenerationRouteOptions & {
  responses: StoredResponses;
  /** How often a node running a background response looks for a cancel asked of another node. */
  cancelPollMs?: number;
  /** How often a running background response's row is saved (its heartbeat: a row not saved for long belongs to a dead node). */
  heartbeatMs?: number;
};

/** How often a running background response's row is saved by default: its heartbeat. */
export const BACKGROUND_HEARTBEAT_MS = 10_000;
/**
 * A background response still queued or in progress whose row was not saved for this long
 * belongs to a node that died: the sweeper fails it (`ResponseStore.failStale`). Three missed
 * heartbeats, so that a busy event loop or a slow commit never fails a live one.
 */
export const BACKGROUND_STALE_MS = 3 * BACKGROUND_HEARTBEAT_MS;

/** How long a cancel waits for the response to settle before answering with its row as it stands. */
const CANCEL_WAIT_MS = 5000;
/** How often a cancel of a response running on another node reads its row while it waits. */
const CANCEL_CHECK_MS = 100;
const ACTIVE_STATUSES: ReadonlySet<string> = new Set(["queued", "in_progress"]);

/** The most responses a `previous_response_id` chain may hold (each a size-capped row). */
export const MAX_CHAIN_RESPONSES = 256;

class ResponseNotFoundError extends ApiError {
  constructor(id: string, param: string | null) {
    super(`No response with id '${id.slice(0, 80)}' is stored for this account.`, "response_not_found", { param });
  }
}

const idParams = z.object({ id: z.string().min(1).max(128) });
const inputItemsQuery = z.object({
  after: z.string().min(1).max(128).optional(),
  limit: z.coerce.number().int().min(1).max(100).optional(),
  order: z.enum(["asc", "desc"]).optional(),
});

/** A background response running on this node. */
type BackgroundRun = {
  cut: AbortController;
  job: ResponseJob;
  /** Resolves once it ended and its last state is stored. */
  ended: Promise<void>;
  /** It was deleted: stop saving it. */
  forget(): void;
};

/**
 * Refuses, before anything is admitted, the combination a background response cannot serve:
 * `store: false` (its only answer for a client that left is the stored row). Looked up on the raw
 * body: a malformed one is refused by the schema as usual.
 */
function refuseUnservedBackground(body: unknown): void {
  if (typeof body !== "object" || body === null) return;
  const fields = body as Record<string, unknown>;
  if (fields.background !== true) return;
  if (fields.store === false) throw new InvalidRequestError("A background response is always stored (it is read back with GET /v1/responses/{id}): leave 'store' unset or true.", "store");
}

/** The account a key's stored responses belong to (null: the operator's). */
function ownerOf(key: ApiKeyRecord): string | null {
  return key.accountId;
}

/**
 * `read`'s answer; when it finds nothing (undefined, or a chain with a link missing), it reads
 * again once another node's deferred save of a response that just ended would be written
 * (`ResponseStore.visibleWithinMs`): a client continuing or reading on another node right after
 * its answer still finds it. Only a miss waits, and it costs a timer, not work.
 */
async function afterCommitWindow<T>(responses: StoredResponses, read: () => Promise<T | undefined>): Promise<T | undefined> {
  try {
    const found = await read();
    if (found !== undefined) return found;
  } catch (error) {
    if (!(error instanceof BrokenResponseChainError)) throw error;
  }
  await delay(responses.visibleWithinMs);
  return read();
}

/**
 * The conversation `previous_response_id` continues, oldest first: each stored response's input
 * items, then its output. Another account's id, or one never stored, is a 404 naming the field.
 */
async function historyOf(responses: StoredResponses, key: ApiKeyRecord, body: unknown): Promise<ConversationItem[]> {
  const previous = typeof body === "object" && body !== null ? (body as Record<string, unknown>).previous_response_id : undefined;
  if (typeof previous !== "string" || previous === "" || previous.length > 128) return [];
  try {
    const chain = await afterCommitWindow(responses, () => responses.chain(ownerOf(key), previous, { maxResponses: MAX_CHAIN_RESPONSES }));
    if (chain === undefined) throw new ResponseNotFoundError(previous, "previous_response_id");
    return chain.flatMap((stored) => [...stored.inputItems, ...stored.response.output]);
  } catch (error) {
    if (error instanceof BrokenResponseChainError) throw new ResponseNotFoundError(error.missingId, "previous_response_id");
    if (error instanceof ResponseChainTooLongError) {
      throw new InvalidRequestError(`The conversation is longer than ${MAX_CHAIN_RESPONSES} responses: start a new one, sending its context in 'input'.`, "previous_response_id");
    }
    throw error;
  }
}

export function registerResponsesRoutes(app: FastifyInstance, options: ResponsesRouteOptions): void {
  const serving = generationServing(options);
  const { responses } = options;
  /** Background responses running on this node, by id: a cancel here aborts at once. */
  const running = new Map<string, BackgroundRun>();
  const heartbeatMs = options.heartbeatMs ?? BACKGROUND_HEARTBEAT_MS;

  /** The row of a response in a state (`deferred`: it may wait for the commit window, see `ResponseStore.save`). */
  const keep = (key: ApiKeyRecord, job: ResponseJob, resource: ResponseResource, deferred = false) =>
    responses
      .save(
        {
        id: resource.id,
        accountId: ownerOf(key),
        keyId: key.id,
        model: resource.model,
        status: resource.status,
        createdAt: resource.created_at * 1000,
        previousResponseId: resource.previous_response_id,
        background: resource.background,
        inputItems: job.inputItems,
        response: resource,
        },
        { deferred },
      )
      .catch((error: unknown) => {
        if (error instanceof StoredResponseTooLargeError) {
          throw new ApiError(`The response is ${error.sizeBytes} bytes with its input, more than the ${error.maxBytes} a stored response may hold; send it with 'store: false'.`, "stored_response_too_large", { param: "store" });
        }
        throw error;
      });

  /** Runs a background response to its end without a client: admitted, held and billed like any request. */
  const runInBackground = (
    request: FastifyRequest,
    job: ResponseJob,
    input: Parameters<typeof runCompletion<ResponseJob, ResponseResource>>[2],
    /** Streams its events while it runs (`stream: true`) instead of running silently; the client may leave. */
    run: (input: Parameters<typeof runCompletion<ResponseJob, ResponseResource>>[2]) => Promise<unknown> = (detached) => runCompletion(serving.runDependencies(request), responsesDialect, detached),
  ): Promise<void> => {
    const id = job.assembly.shape.id;
    const key = request.apiKey!;
    /** Deleted (here or on another node): nothing more is saved, or the row would come back. */
    let gone = false;
    const forget = () => {
      gone = true;
      job.keep = undefined;
    };
    const progress = () => {
      if (!gone && job.final === undefined) void keep(key, job, job.assembly.resource({ status: "in_progress" })).catch(() => undefined);
    };
    // Queued until the engine gives it a slot, in progress from then on.
    const prepared = input.job.prepared;
    const start = prepared.start;
    prepared.start = (signal, ticket) => {
      const generation = start(signal, ticket);
      void generation.admitted.then(progress, () => undefined);
      return generation;
    };
    // A cancel or a delete asked of another node reaches this one through the row.
    const poll = setInterval(() => {
      void responses.runState(id).then(
        (state) => {
          if (state === "gone") forget();
          if (state !== "running") input.cut.abort(new Error(state === "gone" ? "deleted" : "cancelled"));
        },
        () => undefined,
      );
    }, options.cancelPollMs ?? 1000);
    // The row's heartbeat: the sweeper fails a background response whose node stopped saving it.
    const heartbeat = setInterval(progress, heartbeatMs);
    poll.unref();
    heartbeat.unref();
    const ended = run(input)
      .then(
        () => undefined,
        async (error: unknown) => {
          if (!(error instanceof ApiError) || error.status >= 500) request.log.warn({ err: error, response_id: id }, "background response ended with an error");
          // Refused before it started (a full queue): settled never ran, so the row still says queued.
          if (job.final === undefined && !gone) {
            job.final = job.assembly.finalResource(undefined, responseErrorOf(error));
            await keep(key, job, job.final).catch((keepError: unknown) => request.log.error({ err: keepError, response_id: id }, "could not store a failed background response"));
          }
        },
      )
      .finally(() => {
        clearInterval(poll);
        clearInterval(heartbeat);
        running.delete(id);
      });
    running.set(id, { cut: input.cut, job, ended, forget });
    return ended;
  };

  app.post("/v1/responses", { onRequest: serving.onRequest }, async function createResponse(request, reply) {
    const startedAt = performance.now();
    const key = request.apiKey!;
    refuseUnservedBackground(request.body);
    const history = await historyOf(responses, key, request.body);
    const admitted = await serving.admit(request, reply, (catalog, body) => parseResponse(catalog, body, history));
    const job = admitted.job.shape;
    if (job.request.store !== false && job.request.background !== true) {
      // The finished response joins the next group commit; its client need not wait for it. This
      // node reads it from memory until it is written; another node's read that misses it waits for it (`historyOf`).
      job.keep = (resource) => {
        keep(key, job, resource, true).catch((error: unknown) => request.log.error({ err: error, response_id: resource.id }, "could not store a response"));
        return Promise.resolve();
      };
    }
    if (job.request.background === true) job.keep = (resource) => keep(key, job, resource);
    if (job.request.background === true) {
      // Runs on after this reply: only a shutdown or a cancel cuts it, never the client's going away.
      const cut = new AbortController();
      const onShutdown = () => cut.abort(new ShuttingDownError());
      if (options.shutdownSignal.aborted) onShutdown();
      else options.shutdownSignal.addEventListener("abort", onShutdown, { once: true });
      cut.signal.addEventListener("abort", () => options.shutdownSignal.removeEventListener("abort", onShutdown), { once: true });
      const queued = job.assembly.resource({ status: "queued" });
      // Written before the reply: a GET or a cancel right after it finds the row.
      try {
        await keep(key, job, queued);
      } catch (error) {
        await admitted.limited.finish(0).catch(() => undefined);
        await admitted.admission.settle({ usage: null, status: 500, finishReason: null, latencyMs: performance.now() - startedAt }).catch(() => undefined);
        throw error;
      }
      const input = { ...admitted, cut, keyId: key.id, startedAt, detached: true };
      if (!admitted.job.stream) {
        void runInBackground(request, job, input);
        return queued;
      }
      // Streamed while it runs; the client's going away (or not reading) stops the stream, never the response.
      let refused: unknown;
      await runInBackground(request, job, input, (detached) =>
        runStream(serving.runDependencies(request), responsesDialect, detached, () => openSse(reply)).catch((error: unknown) => {
          // Refused before it started (a full queue): stored failed by the runner; the client hears the error.
          refused = error;
          throw error;
        }),
      );
      if (refused !== undefined) throw refused;
      return undefined;
    }
    return serving.answer(request, reply, responsesDialect, admitted, startedAt);
  });

  app.post("/v1/responses/input_tokens", { onRequest: serving.onRequest }, async function countInputTokens(request) {
    const key = request.apiKey!;
    const history = await historyOf(responses, key, request.body);
    const parsed = parseResponse(options.catalog, request.body, history);
    const { plan } = await options.metering.standingOf(key);
    options.metering.checkModel(key, plan, parsed.model);
    // The prompt as a response would build it, counted by the model's own tokenizer (an upper bound where the upstream has none).
    // Prepared as creation prepares it: truncated under `truncation: "auto"`, its refusals in the Responses spelling.
    const bound = cheapBound(parsed).prompt;
    const prepared = await (parsed.prepare?.(bound) ?? parsed.model.engine.prepare(parsed.request, bound));
    return { object: "response.input_tokens", input_tokens: prepared.promptTokens };
  });

  const authenticate: onRequestHookHandler = options.authenticate;

  const stored = async (request: FastifyRequest) => {
    const { id } = parseWithSchema(idParams, request.params);
    const owner = ownerOf(request.apiKey!);
    const found = await afterCommitWindow(responses, () => responses.get(owner, id));
    if (found === undefined) throw new ResponseNotFoundError(id, null);
    return found;
  };

  app.get("/v1/responses/:id", { onRequest: authenticate }, async function getResponse(request) {
    return (await stored(request)).response;
  });

  app.delete("/v1/responses/:id", { onRequest: authenticate }, async function deleteResponse(request) {
    const { id } = parseWithSchema(idParams, request.params);
    if (!(await responses.delete(ownerOf(request.apiKey!), id))) throw new ResponseNotFoundError(id, null);
    // A background response still running here stops; its row is gone, so it is not written again.
    const run = running.get(id);
    if (run !== undefined) {
      run.forget();
      run.cut.abort(new Error("deleted"));
    }
    return { id, object: "response", deleted: true };
  });

  app.get("/v1/responses/:id/input_items", { onRequest: authenticate }, async function listInputItems(request) {
    const { id } = parseWithSchema(idParams, request.params);
    const query = parseWithSchema(inputItemsQuery, request.query ?? {});
    try {
      const owner = ownerOf(request.apiKey!);
      const page = await afterCommitWindow(responses, () => responses.inputItems(owner, id, query));
      if (page === undefined) throw new ResponseNotFoundError(id, null);
      return page;
    } catch (error) {
      if (error instanceof InputItemCursorError) throw new ApiError(`'after' names no input item of response '${id.slice(0, 80)}'.`, "invalid_cursor", { param: "after" });
      throw error;
    }
  });

  app.post("/v1/responses/:id/cancel", { onRequest: authenticate }, async function cancelResponse(request) {
    const { id } = parseWithSchema(idParams, request.params);
    const owner = ownerOf(request.apiKey!);
    const found = await responses.requestCancel(owner, id);
    if (found === undefined) throw new ResponseNotFoundError(id, null);
    if (!found.background) throw new ApiError("Only background responses can be cancelled.", "response_not_cancellable", { param: null });
    const local = running.get(id);
    if (local !== undefined) {
      // Running here: stop it now and answer with its settled state.
      local.cut.abort(new Error("cancelled"));
      await Promise.race([local.ended, delay(CANCEL_WAIT_MS, undefined, { ref: false })]);
    } else if (found.cancelRequested) {
      // Running on another node, which sees the flag within its poll: answer with the state it settles in.
      const deadline = performance.now() + CANCEL_WAIT_MS;
      while (performance.now() < deadline) {
        await delay(CANCEL_CHECK_MS);
        const now = await responses.get(owner, id);
        if (now === undefined || !ACTIVE_STATUSES.has(now.status)) return now?.response ?? found.response;
      }
    }
    // Already ended, or still stopping past the wait: the row as it stands.
    const now = await responses.get(owner, id);
    return now?.response ?? found.response;
  });
}
