/**
 * JSON request bodies, parsed where they cost the event loop nothing: small ones on the main
 * thread with Fastify's own parser (prototype poisoning refused), large ones in a worker thread
 * that also validates chat completion requests, so a flood of multi-megabyte bodies that are
 * bound to be refused never holds up other requests. The worker's queue is bounded: past it,
 * 503 `server_busy` with `retry-after`.
 */
import { Worker } from "node:worker_threads";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { ApiError, InternalServerError } from "../../protocol/errors.ts";
import type { BodyAnswer, BodyJob, BodyValidation } from "./json-body-protocol.ts";

/** Bodies larger than this are parsed in the worker: parsing a quarter megabyte takes ~1–2 ms. */
export const WORKER_BODY_BYTES = 256 * 1024;
/** Large bodies waiting for the worker at most; more are refused (each holds its bytes meanwhile). */
export const MAX_WAITING_BODIES = 16;

export class ServerBusyError extends ApiError {
  constructor() {
    super("The server is busy reading other large requests. Retry in a moment, or send a smaller body.", "server_busy", { headers: { "retry-after": "1" } });
  }
}

/** Chat requests the worker validated: the route does not validate them again on the event loop. */
const validatedChatRequests = new WeakSet<object>();

/** Whether `body` is a chat completion request the body worker validated against the schema. */
export function validatedInWorker(body: unknown): boolean {
  return typeof body === "object" && body !== null && validatedChatRequests.has(body);
}

/** One worker thread parsing (and validating) large bodies in turn; started on first use. */
export class JsonBodyWorker {
  #worker: Worker | undefined;
  #nextId = 0;
  readonly #pending = new Map<number, { resolve: (value: unknown) => void; reject: (error: unknown) => void }>();
  #closed = false;

  /** Bodies sent to the worker and not answered yet. */
  get waiting(): number {
    return this.#pending.size;
  }

  /** Parses `bytes` (and validates them as `validate` says); rejects with the `ApiError` a client should see. */
  parse(bytes: Uint8Array, validate: BodyValidation): Promise<unknown> {
    if (this.#closed) return Promise.reject(new ServerBusyError());
    if (this.#pending.size >= MAX_WAITING_BODIES) return Promise.reject(new ServerBusyError());
    const worker = this.#start();
    const id = this.#nextId++;
    const job: BodyJob = { id, bytes, validate };
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      // A buffer that owns its whole memory moves to the worker without a copy.
      const whole = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength && bytes.buffer instanceof ArrayBuffer;
      worker.postMessage(job, whole ? [bytes.buffer as ArrayBuffer] : []);
    });
  }

  #start(): Worker {
    if (this.#worker !== undefined) return this.#worker;
    const worker = new Worker(new URL("./json-body-worker.ts", import.meta.url));
    // The worker never keeps the process alive: a stopping server does not wait for it.
    worker.unref();
    worker.on("message", (answer: BodyAnswer) => {
      const pending = this.#pending.get(answer.id);
      if (pending === undefined) return;
      this.#pending.delete(answer.id);
      if (answer.error === undefined) {
        if (answer.validated && typeof answer.value === "object" && answer.value !== null) validatedChatRequests.add(answer.value);
        pending.resolve(answer.value);
      } else pending.reject(new ApiError(answer.error.message, answer.error.code, { param: answer.error.param }));
    });
    const fail = (error: unknown) => {
      // A crashed worker (out of memory, say) fails what it held; the next body starts a new one.
      if (this.#worker === worker) this.#worker = undefined;
      for (const [id, pending] of this.#pending) {
        this.#pending.delete(id);
        pending.reject(new InternalServerError(undefined, error));
      }
    };
    worker.on("error", fail);
    worker.on("exit", (code) => fail(new Error(`the JSON body worker exited with code ${code}`)));
    this.#worker = worker;
    return worker;
  }

  /** Stops the worker; bodies still waiting are refused. */
  async close(): Promise<void> {
    this.#closed = true;
    const worker = this.#worker;
    this.#worker = undefined;
    if (worker !== undefined) await worker.terminate();
  }
}

/** Which validation the worker runs for a route's body. */
function validationFor(request: FastifyRequest): BodyValidation {
  return request.routeOptions.url === "/v1/chat/completions" ? "chat-completion" : "none";
}

/**
 * Replaces the server's `application/json` parser (scopes that set their own, like Stripe's
 * webhook, keep theirs). Small bodies go to Fastify's default parser unchanged.
 */
export function registerJsonBodyParser(server: FastifyInstance, worker: JsonBodyWorker): void {
  const small = server.getDefaultJsonParser("error", "error");
  server.removeContentTypeParser("application/json");
  server.addContentTypeParser("application/json", { parseAs: "buffer" }, function parseJsonBody(request, body: Buffer, done) {
    if (body.length <= WORKER_BODY_BYTES) {
      small(request, body.toString("utf8"), done);
      return;
    }
    worker.parse(body, validationFor(request)).then(
      (value) => done(null, value),
      (error: Error) => done(error, undefined),
    );
  });
  server.addHook("onClose", async () => worker.close());
}
