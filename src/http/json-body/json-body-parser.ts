/**
 * JSON request bodies, parsed where they cost the event loop nothing: small ones on the main
 * thread with Fastify's own parser (prototype poisoning refused), large ones in a worker thread
 * that also validates chat completion requests, so a flood of multi-megabyte bodies that are
 * bound to be refused never holds up other requests. Either way a body nested deeper than
 * `MAX_JSON_DEPTH` is refused (400 `json_too_deep`) by a linear scan before it is parsed.
 *
 * The worker's queue is bounded and fair. At most `MAX_WAITING_BODIES` large bodies wait (the one
 * being parsed included), and at most `MAX_WAITING_BODIES_PER_OWNER` of them belong to one owner
 * (an account, or a key without one): past either, 503 `server_busy` with `retry-after`. Owners
 * take turns: the next body parsed is the oldest of the owner served longest ago, so a key with
 * many bodies waiting delays another key's body by one of its own at most. The worker parses one
 * body at a time, so when it crashes the body it was on is known: that body alone is refused (500,
 * logged at error level), and the bodies still waiting go to a new worker.
 */
import { BODY_SCHEMAS } from "./body-schemas.ts";
import { Worker } from "node:worker_threads";
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { Logger } from "pino";
import { ApiError, InternalServerError } from "../../protocol/errors.ts";
import type { BodyAnswer, BodyJob, BodyValidation } from "./json-body-protocol.ts";
import { JsonTooDeepError, nestedDeeperThan } from "./json-depth.ts";

/** Bodies larger than this are parsed in the worker: parsing a quarter megabyte takes ~1–2 ms. */
export const WORKER_BODY_BYTES = 256 * 1024;
/** Large bodies waiting for the worker at most, the one it is parsing included (each holds its bytes meanwhile). */
export const MAX_WAITING_BODIES = 16;
/** Of those, one owner's (an account's, or a key's without one) at most: a quarter, so four owners are always served. */
export const MAX_WAITING_BODIES_PER_OWNER = 4;

export class ServerBusyError extends ApiError {
  constructor() {
    super("The server is busy reading other large requests. Retry in a moment, or send a smaller body.", "server_busy", { headers: { "retry-after": "1" } });
  }
}

/** Requests the worker validated against their route's schema: the route does not validate them again on the event loop. */
const validatedChatRequests = new WeakSet<object>();

/** Whether `body` is a request the body worker validated against its route's schema. */
export function validatedInWorker(body: unknown): boolean {
  return typeof body === "object" && body !== null && validatedChatRequests.has(body);
}

export type JsonBodyWorkerOptions = {
  /** Where a crashed worker is reported (at error level). */
  logger: Logger;
  /** The worker's script; `json-body-worker.ts` unless a test gives another. */
  workerUrl?: URL;
};

type Job = { id: number; owner: string; bytes: Uint8Array; validate: BodyValidation; resolve: (value: unknown) => void; reject: (error: unknown) => void };

/** One owner's bodies waiting, oldest first, and when the owner was last served (-1: never). */
type OwnerQueue = { jobs: Job[]; servedAt: number };

/** One worker thread parsing (and validating) large bodies one at a time; started on first use. */
export class JsonBodyWorker {
  readonly #logger: Logger;
  readonly #workerUrl: URL;
  #worker: Worker | undefined;
  #nextId = 0;
  /** Counts the bodies handed to the worker: an owner's `servedAt`. */
  #served = 0;
  /** Owners with bodies waiting, or with the body being parsed. */
  readonly #owners = new Map<string, OwnerQueue>();
  /** The body the worker is parsing now. */
  #current: Job | undefined;
  #waiting = 0;
  #closed = false;

  constructor(options: JsonBodyWorkerOptions) {
    this.#logger = options.logger;
    this.#workerUrl = options.workerUrl ?? new URL("./json-body-worker.ts", import.meta.url);
  }

  /** Bodies waiting for the worker or being parsed by it. */
  get waiting(): number {
    return this.#waiting;
  }

  /**
   * Parses `bytes` (and validates them as `validate` says) for `owner` (whose bodies share one
   * share of the queue); rejects with the `ApiError` a client should see.
   */
  parse(bytes: Uint8Array, validate: BodyValidation, owner: string): Promise<unknown> {
    if (this.wouldRefuse(owner)) return Promise.reject(new ServerBusyError());
    const queue = this.#owners.get(owner) ?? { jobs: [], servedAt: -1 };
    return new Promise((resolve, reject) => {
      queue.jobs.push({ id: this.#nextId++, owner, bytes, validate, resolve, reject });
      this.#owners.set(owner, queue);
      this.#waiting++;
      this.#sendNext();
    });
  }

  /** Whether a body of `owner` would be refused now: the queue is full, or holds the owner's share. */
  wouldRefuse(owner: string): boolean {
    if (this.#closed || this.#waiting >= MAX_WAITING_BODIES) return true;
    const held = (this.#owners.get(owner)?.jobs.length ?? 0) + (this.#current?.owner === owner ? 1 : 0);
    return held >= MAX_WAITING_BODIES_PER_OWNER;
  }

  /** Hands the worker its next body when it is idle: the oldest of the owner served longest ago. */
  #sendNext(): void {
    if (this.#current !== undefined || this.#closed) return;
    let next: OwnerQueue | undefined;
    // Few owners (at most MAX_WAITING_BODIES): a scan is cheaper than keeping them ordered.
    for (const queue of this.#owners.values()) if (queue.jobs.length > 0 && (next === undefined || queue.servedAt < next.servedAt)) next = queue;
    if (next === undefined) return;
    const job = next.jobs.shift()!;
    next.servedAt = this.#served++;
    this.#current = job;
    const message: BodyJob = { id: job.id, bytes: job.bytes, validate: job.validate };
    // A buffer that owns its whole memory moves to the worker without a copy.
    const bytes = job.bytes;
    const whole = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength && bytes.buffer instanceof ArrayBuffer;
    try {
      this.#start().postMessage(message, whole ? [bytes.buffer as ArrayBuffer] : []);
    } catch (error) {
      this.#finish(job, () => job.reject(new InternalServerError(undefined, error)));
    }
  }

  /** Ends `job` (the current one): answers it, frees its place, and starts the next. */
  #finish(job: Job, answer: () => void): void {
    if (this.#current !== job) return;
    this.#current = undefined;
    this.#waiting--;
    const queue = this.#owners.get(job.owner);
    if (queue !== undefined && queue.jobs.length === 0) this.#owners.delete(job.owner);
    answer();
    this.#sendNext();
  }

  #start(): Worker {
    if (this.#worker !== undefined) return this.#worker;
    const worker = new Worker(this.#workerUrl);
    // The worker never keeps the process alive: a stopping server does not wait for it.
    worker.unref();
    worker.on("message", (answer: BodyAnswer) => {
      const job = this.#current;
      if (job === undefined || answer.id !== job.id) return;
      this.#finish(job, () => {
        if (answer.error !== undefined) {
          if (answer.error.code === "internal_error") this.#logger.error({ detail: answer.error.detail, body_bytes: job.bytes.byteLength }, "the JSON body worker failed on a body: that body is refused");
          job.reject(new ApiError(answer.error.message, answer.error.code, { param: answer.error.param }));
          return;
        }
        if (answer.validated && typeof answer.value === "object" && answer.value !== null) validatedChatRequests.add(answer.value);
        job.resolve(answer.value);
      });
    });
    // An uncaught error is followed by `exit`; `process.exit` (or running out of memory) by `exit` alone.
    const crashed = (error: unknown) => {
      if (this.#worker !== worker) return;
      this.#worker = undefined;
      if (this.#closed) return;
      const job = this.#current;
      this.#logger.error({ err: error, body_bytes: job?.bytes.byteLength ?? null }, "the JSON body worker crashed: the body it was parsing is refused, a new worker takes the rest");
      // The body it was on is the one that crashed it: refused alone; the others go to a new worker.
      if (job === undefined) return;
      this.#finish(job, () => job.reject(new InternalServerError(undefined, error)));
    };
    worker.on("error", crashed);
    worker.on("exit", (code) => crashed(new Error(`the JSON body worker exited with code ${code}`)));
    this.#worker = worker;
    return worker;
  }

  /** Stops the worker; bodies still waiting are refused. */
  async close(): Promise<void> {
    this.#closed = true;
    const refused = [...this.#owners.values()].flatMap((queue) => queue.jobs);
    if (this.#current !== undefined) refused.push(this.#current);
    this.#owners.clear();
    this.#current = undefined;
    this.#waiting = 0;
    for (const job of refused) job.reject(new ServerBusyError());
    const worker = this.#worker;
    this.#worker = undefined;
    if (worker !== undefined) await worker.terminate();
  }
}

/** Which validation the worker runs for a route's body. */
function validationFor(request: FastifyRequest): BodyValidation {
  const route = request.routeOptions.url;
  return route !== undefined && Object.hasOwn(BODY_SCHEMAS, route) ? { route } : "none";
}

/** Whose share of the worker's queue a request's body takes: its account's, its key's, or its address's. */
function ownerOf(request: FastifyRequest): string {
  const key = request.apiKey;
  if (key === null) return `address:${request.ip}`;
  return key.accountId === null ? `key:${key.id}` : `account:${key.accountId}`;
}

/**
 * Replaces the server's `application/json` parser (scopes that set their own, like Stripe's
 * webhook, keep theirs). Small bodies go to Fastify's default parser, once their depth is checked.
 */
export function registerJsonBodyParser(server: FastifyInstance, worker: JsonBodyWorker): void {
  const small = server.getDefaultJsonParser("error", "error");
  server.removeContentTypeParser("application/json");
  server.addContentTypeParser("application/json", { parseAs: "buffer" }, function parseJsonBody(request, body: Buffer, done) {
    if (body.length <= WORKER_BODY_BYTES) {
      if (nestedDeeperThan(body)) done(new JsonTooDeepError(), undefined);
      else small(request, body.toString("utf8"), done);
      return;
    }
    worker.parse(body, validationFor(request), ownerOf(request)).then(
      (value) => done(null, value),
      (error: Error) => done(error, undefined),
    );
  });
  // A large body whose owner holds its share of the queue already (or a full queue) is refused on
  // its headers, once the route's own `onRequest` hooks named its key: none of it is read (the
  // connection closes after the 503, rather than reading the rest of the body to keep it).
  // Synchronous: it runs for every request with a body, and decides on the headers alone.
  server.addHook("preParsing", function refuseWhileQueueFull(request, reply, payload, done) {
    if (!request.headers["content-type"]?.toLowerCase().startsWith("application/json")) return done(null, payload);
    if ((request.routeOptions.bodyLimit ?? 0) <= WORKER_BODY_BYTES) return done(null, payload);
    const length = Number(request.headers["content-length"]);
    if (Number.isFinite(length) && length <= WORKER_BODY_BYTES) return done(null, payload);
    if (!worker.wouldRefuse(ownerOf(request))) return done(null, payload);
    void reply.header("connection", "close");
    done(new ServerBusyError());
  });
  server.addHook("onClose", async () => worker.close());
}
