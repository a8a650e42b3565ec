/**
 * The Responses API (`/v1/responses`): create (JSON, SSE, or in the background), and the stored
 * responses of the key's account: get, delete, list input items, cancel a background one, count a
 * request's input tokens. Creation is the Responses dialect (`dialect.ts`) over the generation
 * core's shared admission, run and settlement (`http/generation/`): the same order of cheap
 * refusals, holds, leases, limits and checkpoints as chat completions. A stored response is one
 * group-committed write (`ResponseStore.save`), made when the response is settled and before
 * the client hears its end, so any node's `GET` and `previous_response_id` find it.
 */
import type { FastifyInstance, FastifyRequest, onRequestHookHandler } from "fastify";
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
import { SseWriter } from "../../sse.ts";
import { abortOnDisconnect, generationServing, type GenerationRouteOptions } from "../../generation/route-kit.ts";
import { runCompletion, runStream } from "../../generation/run.ts";
import { parseResponse, responsesDialect, type ResponseJob } from "./dialect.ts";

/** The stored responses of the Responses API, typed. */
export type StoredResponses = ResponseStore<ResponseResource, StoredInputItem>;

export type ResponsesRouteOptions = GenerationRouteOptions & {
  responses: StoredResponses;
  /** How often a node running a background response looks for a cancel asked of another node. */
  cancelPollMs?: number;
  /** How often a running background response's row is saved (its heartbeat: a row not saved for long belongs to a dead node). */
  heartbeatMs?: number;
};

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

/** The account a key's stored responses belong to (null: the operator's). */
function ownerOf(key: ApiKeyRecord): string | null {
  return key.accountId;
}

/**
 * The conversation `previous_response_id` continues, oldest first: each stored response's input
 * items, then its output. Another account's id, or one never stored, is a 404 naming the field.
 */
async function historyOf(responses: StoredResponses, key: ApiKeyRecord, body: unknown): Promise<ConversationItem[]> {
  const previous = typeof body === "object" && body !== null ? (body as Record<string, unknown>).previous_response_id : undefined;
  if (typeof previous !== "string" || previous === "" || previous.length > 128) return [];
  try {
    const chain = await responses.chain(ownerOf(key), previous, { maxResponses: MAX_CHAIN_RESPONSES });
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
  const running = new Map<string, AbortController>();

  /** The row of a response in a state. */
  const keep = (key: ApiKeyRecord, job: ResponseJob, resource: ResponseResource) =>
    responses
      .save({
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
      })
      .catch((error: unknown) => {
        if (error instanceof StoredResponseTooLargeError) {
          throw new ApiError(`The response is ${error.sizeBytes} bytes with its input, more than the ${error.maxBytes} a stored response may hold; send it with 'store: false'.`, "stored_response_too_large", { param: "store" });
        }
        throw error;
      });

  /** Runs a background response to its end without a client: admitted, held and billed like any request. */
  const runInBackground = (request: FastifyRequest, job: ResponseJob, input: Parameters<typeof runCompletion<ResponseJob, ResponseResource>>[2]) => {
    const id = job.assembly.shape.id;
    running.set(id, input.cut);
    // A cancel asked of another node reaches this one through the row's flag.
    const poll = setInterval(() => {
      void responses.isCancelRequested(id).then(
        (asked) => {
          if (asked) input.cut.abort(new Error("cancelled"));
        },
        () => undefined,
      );
    }, options.cancelPollMs ?? 1000);
    // The row's heartbeat: the sweeper fails a background response whose node stopped saving it.
    const heartbeat = setInterval(() => {
      if (job.final === undefined) void keep(request.apiKey!, job, job.assembly.resource({ status: "in_progress" })).catch(() => undefined);
    }, options.heartbeatMs ?? 10_000);
    poll.unref();
    heartbeat.unref();
    void runCompletion(serving.runDependencies(request), responsesDialect, input)
      .catch((error: unknown) => {
        if (!(error instanceof ApiError) || error.status >= 500) request.log.warn({ err: error, response_id: id }, "background response ended with an error");
      })
      .finally(() => {
        clearInterval(poll);
        clearInterval(heartbeat);
        running.delete(id);
      });
  };

  app.post("/v1/responses", { onRequest: serving.onRequest }, async function createResponse(request, reply) {
    const startedAt = performance.now();
    const key = request.apiKey!;
    const history = await historyOf(responses, key, request.body);
    const admitted = await serving.admit(request, reply, (catalog, body) => parseResponse(catalog, body, history));
    const job = admitted.job.shape;
    if (job.request.store !== false) job.keep = (resource) => keep(key, job, resource);
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
      runInBackground(request, job, { ...admitted, cut, keyId: key.id, startedAt });
      return queued;
    }
    const input = { ...admitted, cut: abortOnDisconnect(reply, options.shutdownSignal), keyId: key.id, startedAt };
    const dependencies = serving.runDependencies(request);
    if (!admitted.job.stream) return runCompletion(dependencies, responsesDialect, input);
    await runStream(dependencies, responsesDialect, input, () => {
      reply.hijack();
      return new SseWriter(reply.raw, reply.getHeaders());
    });
    return undefined;
  });

  app.post("/v1/responses/input_tokens", { onRequest: serving.onRequest }, async function countInputTokens(request) {
    const key = request.apiKey!;
    const history = await historyOf(responses, key, request.body);
    const parsed = parseResponse(options.catalog, request.body, history);
    const { plan } = await options.metering.standingOf(key);
    options.metering.checkModel(key, plan, parsed.model);
    // The prompt as a response would build it, counted by the model's own tokenizer (an upper bound where the upstream has none).
    const prepared = await parsed.model.engine.prepare(parsed.request);
    return { object: "response.input_tokens", input_tokens: prepared.promptTokens };
  });

  const authenticate: onRequestHookHandler = options.authenticate;

  const stored = async (request: FastifyRequest) => {
    const { id } = parseWithSchema(idParams, request.params);
    const found = await responses.get(ownerOf(request.apiKey!), id);
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
    running.get(id)?.abort(new Error("deleted"));
    return { id, object: "response", deleted: true };
  });

  app.get("/v1/responses/:id/input_items", { onRequest: authenticate }, async function listInputItems(request) {
    const { id } = parseWithSchema(idParams, request.params);
    const query = parseWithSchema(inputItemsQuery, request.query ?? {});
    try {
      const page = await responses.inputItems(ownerOf(request.apiKey!), id, query);
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
      const ended = new Promise<void>((resolve) => {
        const check = setInterval(() => {
          if (!running.has(id)) {
            clearInterval(check);
            resolve();
          }
        }, 10);
      });
      local.abort(new Error("cancelled"));
      await Promise.race([ended, new Promise((resolve) => setTimeout(resolve, 5000))]);
      const settled = await responses.get(owner, id);
      if (settled !== undefined) return settled.response;
    }
    // Running elsewhere (its node polls the flag) or already ended: the row as it stands.
    const now = await responses.get(owner, id);
    return now?.response ?? found.response;
  });
}
