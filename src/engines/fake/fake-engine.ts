/**
 * A scripted engine for lifecycle and assembly tests: it generates what its script says, one part
 * at a time, and counts usage as a real engine would (a completion token per text or tool-call
 * delta, reasoning included). It sits beside the real engines' tests, never instead of them: it
 * pins what the serving layer does with parts, queues, failures and cut streams.
 *
 * It behaves as the real engines do where the serving layer can tell (the engine contract suite,
 * `test/contract/`, holds it to them): a request takes its slot when it starts (a full queue
 * refuses it there, synchronously), takes free slots for its other choices and interleaves the
 * choices it runs at once, gives its slots back however it ends, and stops when the engine closes.
 * Unlike them it generates lazily, one part per part taken, so tests can stop it at an exact point.
 */
import {
  CHAT_PARAMETERS,
  type Engine,
  type EmbeddingInput,
  type EmbeddingRequest,
  type EngineCapabilities,
  type EngineMember,
  type EngineModelInfo,
  type EngineStatus,
  type GenerationRequest,
  type GenerationUsage,
  type PreparedEmbeddings,
  type PreparedGeneration,
  type RunningGeneration,
  type StreamPart,
  type TokenLogprob,
  type UsageSource,
} from "../engine.ts";
import type { QueueTicket, QueuingOptions } from "../fair-queue.ts";
import { promptBound, type PromptBound } from "../prompt-bound.ts";
import { SlotQueue, type SlotLease } from "../slot-queue.ts";
import { ContextLengthExceededError, ModelNotReadyError } from "../../protocol/errors.ts";

/** One step of a choice's script: a part to yield (its `choice` is filled in), a pause, or a failure. */
export type ScriptStep =
  /** A text delta; `logprobs` are yielded with it as the engine's own would be. */
  | { text: string; logprobs?: TokenLogprob[] }
  | { reasoning: string }
  | { toolCall: { id: string; name: string; arguments: string[] } }
  /**
   * The model writes `stopSequence` here (one token): when the request's `stop` holds it, the
   * choice ends there, as a real engine's does, with reason `stop` and a `finish` naming it (the
   * text is not sent); otherwise it is a text delta like any other and the script goes on.
   */
  | { stopSequence: string }
  | { waitMs: number }
  /** Waits until `release()` is called on the script's gate (for tests that act mid-stream). */
  | { gate: FakeGate }
  | { fail: Error };

export type ChoiceScript = { steps: ScriptStep[]; finish?: "stop" | "length" | "tool_calls" | "content_filter" };

/** A latch a script waits on. */
export class FakeGate {
  #open = false;
  #waiters: Array<() => void> = [];
  release(): void {
    this.#open = true;
    for (const waiter of this.#waiters.splice(0)) waiter();
  }
  wait(signal: AbortSignal): Promise<void> {
    if (this.#open) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const onAbort = () => reject(signal.reason);
      if (signal.aborted) return onAbort();
      signal.addEventListener("abort", onAbort, { once: true });
      this.#waiters.push(() => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      });
    });
  }
}

export type FakeEngineOptions = {
  contextLength?: number;
  /** The script of each choice (the last one repeats for further choices). */
  script?: (request: GenerationRequest) => ChoiceScript[];
  /** Requests that run at once; more wait, past `queueSize` they are refused. */
  capacity?: number;
  queueSize?: number;
  /** The queue's per-account cap and wait reports (as a real engine's). */
  queuing?: QueuingOptions;
  capabilities?: Partial<EngineCapabilities>;
  /** `prepare` throws this (a 400 for a schema, say). */
  prepareFailure?: Error;
  /** The source usage reports; `counted` by default. */
  usageSource?: UsageSource;
  /** Cached prompt tokens reported. */
  cachedPromptTokens?: number;
  /**
   * `loading` until `open()`, as the real engines are (default false: ready at once, for tests
   * that hand the fake straight to the serving layer without opening it).
   */
  startLoading?: boolean;
  /** Embeddings runs wait on this gate (for tests that act while one runs). */
  embeddingGate?: FakeGate;
};

/** The fake's vector length when its capabilities name none. */
export const FAKE_EMBEDDING_DIMENSIONS = 8;

/** An embedding input's tokens on the fake: one per 4 characters of text (at least 1), or the ids given. */
export function fakeEmbeddingTokens(input: EmbeddingInput): number {
  return "text" in input ? Math.max(1, Math.ceil(input.text.length / 4)) : input.tokens.length;
}

/** A vector that depends only on the input (its text or ids), L2-normalised: equal inputs, equal vectors. */
export function fakeEmbedding(input: EmbeddingInput, dimensions: number): Float32Array {
  const text = "text" in input ? input.text : input.tokens.join(",");
  let hash = 2166136261;
  for (let index = 0; index < text.length; index++) hash = Math.imul(hash ^ text.charCodeAt(index), 16777619) >>> 0;
  const vector = new Float32Array(dimensions);
  let sum = 0;
  for (let index = 0; index < dimensions; index++) {
    vector[index] = Math.sin(hash / 997 + index * 1.3) + 0.1;
    sum += vector[index]! * vector[index]!;
  }
  const norm = Math.sqrt(sum);
  for (let index = 0; index < dimensions; index++) vector[index] = vector[index]! / norm;
  return vector;
}


/** Prompts count one token per 4 characters of message text, plus 10 (the bound is exact for it: no token spans more than 4 bytes). */
export function fakePromptTokens(request: GenerationRequest): number {
  // A text completion: each prompt counted once (a token prompt its ids; a text prompt as a message).
  if (request.completion !== undefined) {
    return request.completion.prompts.reduce((sum, prompt) => sum + ("tokens" in prompt ? prompt.tokens.length : 10 + Math.ceil(prompt.text.length / 4)), 0);
  }
  return 10 + Math.ceil(request.messages.reduce((sum, message) => sum + message.content.length, 0) / 4);
}

/** A text completion's echo for `choice` (its prompt's text), or "" (a token prompt, no echo asked). */
function fakeEcho(request: GenerationRequest, choice: number): string {
  const completion = request.completion;
  if (completion?.echo !== true) return "";
  const prompt = completion.prompts[Math.floor(choice / completion.n)];
  return prompt !== undefined && "text" in prompt ? prompt.text : "";
}

export class FakeEngine implements Engine {
  /** `prepare` calls so far. */
  prepared = 0;
  /** Generations started so far. */
  started = 0;
  /** Embeddings runs started so far. */
  embedded = 0;
  /** The signals of the generations started (to check that a cut reaches the engine). */
  readonly signals: AbortSignal[] = [];
  status_: EngineStatus;
  /** When set, `prepare` throws it (a 400 for a schema, say). */
  prepareFailure: Error | undefined;
  readonly #options: FakeEngineOptions;
  /** One slot per request that may run at once (its value is only a name). */
  readonly #queue: SlotQueue<number>;
  readonly #closing = new AbortController();
  #closed = false;

  constructor(options: FakeEngineOptions = {}) {
    this.#options = options;
    this.prepareFailure = options.prepareFailure;
    this.status_ = options.startLoading === true ? { state: "loading", detail: "opening the fake model" } : { state: "ready" };
    this.#queue = new SlotQueue(
      Array.from({ length: options.capacity ?? 4 }, (_, index) => index),
      options.queueSize ?? 16,
      options.queuing,
    );
  }

  /** Slots in use: generations started and not ended, choices beyond the first included. */
  get running(): number {
    return this.#queue.busy;
  }

  async open(): Promise<void> {
    if (this.status_.state === "loading") this.status_ = { state: "ready" };
  }

  status(): EngineStatus {
    return this.status_;
  }

  info(): EngineModelInfo | undefined {
    if (this.status_.state === "loading") return undefined;
    return { contextLength: this.#options.contextLength ?? 2048 };
  }

  capabilities(): EngineCapabilities {
    return { supportedParameters: CHAT_PARAMETERS, inputModalities: ["text"], vendorFields: [], ...this.#options.capabilities };
  }

  members(): EngineMember[] {
    return [{ id: "fake", busy: this.#queue.busy, capacity: this.#queue.capacity, waiting: this.#queue.waiting, queue: () => this.#queue.snapshot(), healthy: this.status_.state !== "unavailable" }];
  }

  /** Throws what a real engine throws when it cannot take work: loading, unavailable, or closed. */
  #checkReady(): void {
    if (this.#closed) throw new ModelNotReadyError("The fake model is shutting down.");
    if (this.status_.state === "loading") throw new ModelNotReadyError("The fake model is loading. Retry in a moment.", 5);
    if (this.status_.state !== "ready" && this.status_.state !== "degraded") throw new ModelNotReadyError("The fake model is not ready.");
  }

  boundPrompt(request: GenerationRequest): PromptBound {
    this.#checkReady();
    return promptBound(request, 4);
  }

  async prepare(request: GenerationRequest): Promise<PreparedGeneration> {
    this.prepared++;
    this.#checkReady();
    if (this.prepareFailure !== undefined) throw this.prepareFailure;
    const promptTokens = fakePromptTokens(request);
    const room = (this.#options.contextLength ?? 2048) - promptTokens;
    const maxTokens = request.maxTokens === undefined ? room : request.fitMaxTokens === true ? Math.min(request.maxTokens, Math.max(1, room)) : request.maxTokens;
    return { promptTokens, promptCount: "exact", maxTokens, choices: request.choices, start: (signal, ticket) => this.#start(request, promptTokens, maxTokens, signal, ticket) };
  }

  boundEmbeddings(request: EmbeddingRequest): PromptBound {
    this.#checkReady();
    const tokens = request.inputs.reduce((sum, input) => sum + fakeEmbeddingTokens(input), 0);
    return { atLeast: tokens, atMost: tokens, bytes: 0, verbatimBytes: 0 };
  }

  /** As a real engine: each input within the context (cut to it with `truncate`, else a 400 naming it), one slot per run. */
  async prepareEmbeddings(request: EmbeddingRequest): Promise<PreparedEmbeddings> {
    this.#checkReady();
    if (this.prepareFailure !== undefined) throw this.prepareFailure;
    const contextLength = this.#options.contextLength ?? 2048;
    const counts = request.inputs.map((input, index) => {
      const tokens = fakeEmbeddingTokens(input);
      if (tokens <= contextLength) return tokens;
      if (request.truncate) return contextLength;
      throw new ContextLengthExceededError(`This model's maximum context length is ${contextLength} tokens per input. However, 'input[${index}]' has ${tokens} tokens.`, "input");
    });
    const promptTokens = counts.reduce((sum, count) => sum + count, 0);
    const dimensions = this.capabilities().embeddingDimensions ?? FAKE_EMBEDDING_DIMENSIONS;
    let embeddedTokens = 0;
    return {
      promptTokens,
      promptCount: "exact",
      // All the vectors are made at once, after the gate: none before.
      embeddedTokens: () => embeddedTokens,
      run: async (signal, ticket) => {
        const stop = AbortSignal.any([signal, this.#closing.signal]);
        // Throws EngineOverloadedError when the queue is full, as generation does.
        const lease = await this.#queue.acquire(stop, undefined, ticket === undefined ? undefined : { ticket, served: () => promptTokens });
        this.embedded++;
        this.signals.push(signal);
        try {
          if (this.#options.embeddingGate !== undefined) await this.#options.embeddingGate.wait(stop);
          if (stop.aborted) throw stop.reason;
          embeddedTokens = promptTokens;
          return { vectors: request.inputs.map((input) => fakeEmbedding(input, dimensions)), usage: { promptTokens, source: this.#options.usageSource ?? "counted" } };
        } finally {
          lease.release();
        }
      },
    };
  }

  #start(request: GenerationRequest, promptTokens: number, maxTokens: number, signal: AbortSignal, ticket?: QueueTicket): RunningGeneration {
    const stop = AbortSignal.any([signal, this.#closing.signal]);
    const counts = Array.from({ length: request.choices }, () => ({ completion: 0, reasoning: 0 }));
    // Takes the slot now; throws EngineOverloadedError synchronously when the queue is full.
    const served = () => promptTokens + counts.reduce((sum, count) => sum + count.completion, 0);
    const leased = this.#queue.acquire(stop, undefined, ticket === undefined ? undefined : { ticket, served });
    this.started++;
    this.signals.push(signal);
    let begun = false;
    let releaseIfIdle: (() => void) | undefined;
    // A lease nobody will consume (cut before generation began) goes straight back, as the real engines' do.
    const guarded = leased.then((lease) => {
      releaseIfIdle = () => {
        if (!begun) lease.release();
      };
      if (stop.aborted) releaseIfIdle();
      else stop.addEventListener("abort", releaseIfIdle, { once: true });
      return lease;
    });
    guarded.catch(() => {});
    const admitted = guarded.then(() => undefined);
    admitted.catch(() => {});
    const scripts = this.#options.script?.(request) ?? [{ steps: [{ text: "Hello" }, { text: " world" }] }];
    const queue = this.#queue;
    const parts: AsyncIterable<StreamPart> = {
      async *[Symbol.asyncIterator]() {
        const first = await guarded;
        begun = true;
        if (releaseIfIdle !== undefined) stop.removeEventListener("abort", releaseIfIdle);
        // Other choices run at once only in slots free now (never waiting while holding one).
        const leases: SlotLease<number>[] = [first];
        while (leases.length < request.choices) {
          const extra = queue.tryAcquire(undefined, ticket);
          if (extra === undefined) break;
          leases.push(extra);
        }
        const choiceParts = (choice: number) => runScript(scripts[Math.min(choice, scripts.length - 1)]!, choice, counts[choice]!, promptTokens, maxTokens, request.sampling.stop, stop, fakeEcho(request, choice));
        let nextChoice = 0;
        /** The choices running now, one per slot held: each gives a part in turn. */
        const lanes = leases.map((lease) => ({ lease, parts: nextChoice < request.choices ? choiceParts(nextChoice++) : undefined }));
        try {
          for (let turn = 0; lanes.some((lane) => lane.parts !== undefined); turn++) {
            const lane = lanes[turn % lanes.length]!;
            if (lane.parts === undefined) continue;
            const next = await lane.parts.next();
            if (next.done === true) {
              lane.parts = nextChoice < request.choices ? choiceParts(nextChoice++) : undefined;
              if (lane.parts === undefined) lane.lease.release();
              continue;
            }
            yield next.value;
          }
        } finally {
          for (const lane of lanes) {
            await lane.parts?.return(undefined);
            lane.lease.release();
          }
        }
      },
    };
    const usage = (): GenerationUsage => ({
      source: this.#options.usageSource ?? "counted",
      promptTokens: begun ? promptTokens : 0,
      cachedPromptTokens: begun ? (this.#options.cachedPromptTokens ?? 0) : 0,
      completionTokens: counts.reduce((sum, count) => sum + count.completion, 0),
      reasoningTokens: counts.reduce((sum, count) => sum + count.reasoning, 0),
    });
    return { admitted, parts, usage, position: () => leased.position() };
  }

  /** Running generations end `cancelled`; new requests are refused as by a real engine that closed. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#closing.abort(new Error("engine closing"));
  }
}

/**
 * One choice's script as parts, ending with its `finish`; counts its tokens into `count` as they
 * are made. `stops`: the request's stop sequences (a `stopSequence` step among them ends the choice).
 */
async function* runScript(
  script: ChoiceScript,
  choice: number,
  count: { completion: number; reasoning: number },
  promptTokens: number,
  maxTokens: number,
  stops: readonly string[],
  signal: AbortSignal,
  echo = "",
): AsyncGenerator<StreamPart> {
  if (echo !== "") yield { type: "text-delta", choice, text: echo };
  let reason: "stop" | "length" | "tool_calls" | "content_filter" | "cancelled" = script.finish ?? "stop";
  let stopSequence: string | undefined;
  let toolIndex = 0;
  for (const step of script.steps) {
    if (signal.aborted) {
      reason = "cancelled";
      break;
    }
    if (count.completion >= maxTokens) {
      reason = "length";
      break;
    }
    if ("text" in step) {
      count.completion++;
      yield step.logprobs === undefined ? { type: "text-delta", choice, text: step.text } : { type: "text-delta", choice, text: step.text, logprobs: step.logprobs };
    } else if ("stopSequence" in step) {
      count.completion++;
      if (stops.includes(step.stopSequence)) {
        reason = "stop";
        stopSequence = step.stopSequence;
        break;
      }
      yield { type: "text-delta", choice, text: step.stopSequence };
    } else if ("reasoning" in step) {
      count.completion++;
      count.reasoning++;
      yield { type: "reasoning-delta", choice, text: step.reasoning };
    } else if ("toolCall" in step) {
      const index = toolIndex++;
      yield { type: "tool-call-start", choice, index, id: step.toolCall.id, name: step.toolCall.name };
      for (const argumentsDelta of step.toolCall.arguments) {
        count.completion++;
        yield { type: "tool-call-delta", choice, index, argumentsDelta };
      }
    } else if ("waitMs" in step) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, step.waitMs);
        signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
      });
    } else if ("gate" in step) {
      await step.gate.wait(signal).catch(() => {});
    } else {
      throw step.fail;
    }
  }
  if (signal.aborted) reason = "cancelled";
  const usage = { promptTokens, cachedPromptTokens: 0, completionTokens: count.completion };
  yield reason === "stop" && stopSequence !== undefined ? { type: "finish", choice, reason, usage, stopSequence } : { type: "finish", choice, reason, usage };
}
