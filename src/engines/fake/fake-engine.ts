/**
 * A scripted engine for lifecycle and assembly tests: it generates what its script says, one part
 * at a time, and counts usage as a real engine would (a completion token per text or tool-call
 * delta, reasoning included). It sits beside the real engines' tests, never instead of them: it
 * pins what the serving layer does with parts, queues, failures and cut streams.
 */
import {
  CHAT_PARAMETERS,
  type Engine,
  type EngineCapabilities,
  type EngineMember,
  type EngineModelInfo,
  type EngineStatus,
  type GenerationRequest,
  type GenerationUsage,
  type PreparedGeneration,
  type RunningGeneration,
  type StreamPart,
  type TokenLogprob,
  type UsageSource,
} from "../engine.ts";
import { promptBound, type PromptBound } from "../prompt-bound.ts";
import { EngineOverloadedError, ModelNotReadyError } from "../../protocol/errors.ts";

/** One step of a choice's script: a part to yield (its `choice` is filled in), a pause, or a failure. */
export type ScriptStep =
  /** A text delta; `logprobs` are yielded with it as the engine's own would be. */
  | { text: string; logprobs?: TokenLogprob[] }
  | { reasoning: string }
  | { toolCall: { id: string; name: string; arguments: string[] } }
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
  capabilities?: Partial<EngineCapabilities>;
  /** `prepare` throws this (a 400 for a schema, say). */
  prepareFailure?: Error;
  /** The source usage reports; `counted` by default. */
  usageSource?: UsageSource;
  /** Cached prompt tokens reported. */
  cachedPromptTokens?: number;
};


/** Prompts count one token per 4 characters of message text, plus 10 (the bound is exact for it: no token spans more than 4 bytes). */
export function fakePromptTokens(request: GenerationRequest): number {
  return 10 + Math.ceil(request.messages.reduce((sum, message) => sum + message.content.length, 0) / 4);
}

export class FakeEngine implements Engine {
  /** `prepare` calls so far. */
  prepared = 0;
  /** Generations started so far. */
  started = 0;
  /** Generations running now. */
  running = 0;
  /** The signals of the generations started (to check that a cut reaches the engine). */
  readonly signals: AbortSignal[] = [];
  status_: EngineStatus = { state: "ready" };
  /** When set, `prepare` throws it (a 400 for a schema, say). */
  prepareFailure: Error | undefined;
  readonly #options: FakeEngineOptions;
  #waiting: Array<() => void> = [];

  constructor(options: FakeEngineOptions = {}) {
    this.#options = options;
    this.prepareFailure = options.prepareFailure;
  }

  async open(): Promise<void> {}

  status(): EngineStatus {
    return this.status_;
  }

  info(): EngineModelInfo {
    return { contextLength: this.#options.contextLength ?? 2048 };
  }

  capabilities(): EngineCapabilities {
    return { supportedParameters: CHAT_PARAMETERS, inputModalities: ["text"], vendorFields: [], ...this.#options.capabilities };
  }

  members(): EngineMember[] {
    const capacity = this.#options.capacity ?? 4;
    return [{ id: "fake", busy: this.running, capacity, waiting: this.#waiting.length, healthy: this.status_.state !== "unavailable" }];
  }

  boundPrompt(request: GenerationRequest): PromptBound {
    if (this.status_.state !== "ready" && this.status_.state !== "degraded") throw new ModelNotReadyError("The fake model is not ready.");
    return promptBound(request, 4);
  }

  async prepare(request: GenerationRequest): Promise<PreparedGeneration> {
    this.prepared++;
    if (this.prepareFailure !== undefined) throw this.prepareFailure;
    const promptTokens = fakePromptTokens(request);
    const maxTokens = request.maxTokens ?? this.info().contextLength - promptTokens;
    return { promptTokens, promptCount: "exact", maxTokens, choices: request.choices, start: (signal) => this.#start(request, promptTokens, maxTokens, signal) };
  }

  #start(request: GenerationRequest, promptTokens: number, maxTokens: number, signal: AbortSignal): RunningGeneration {
    const capacity = this.#options.capacity ?? 4;
    if (this.running >= capacity && this.#waiting.length >= (this.#options.queueSize ?? 16)) {
      throw new EngineOverloadedError("The fake engine's queue is full.", 1);
    }
    this.started++;
    this.signals.push(signal);
    const scripts = this.#options.script?.(request) ?? [{ steps: [{ text: "Hello" }, { text: " world" }] }];
    const counts = Array.from({ length: request.choices }, () => ({ completion: 0, reasoning: 0 }));
    let begun = false;
    const admitted = this.#admit(signal);
    admitted.catch(() => {});
    const engine = this;
    const parts: AsyncIterable<StreamPart> = {
      async *[Symbol.asyncIterator]() {
        await admitted;
        begun = true;
        engine.running++;
        try {
          for (let choice = 0; choice < request.choices; choice++) {
            const script = scripts[Math.min(choice, scripts.length - 1)]!;
            const count = counts[choice]!;
            let reason: "stop" | "length" | "tool_calls" | "content_filter" | "cancelled" = script.finish ?? "stop";
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
            yield { type: "finish", choice, reason, usage: { promptTokens, cachedPromptTokens: 0, completionTokens: count.completion } };
          }
        } finally {
          engine.running--;
          engine.#waiting.shift()?.();
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
    return { admitted, parts, usage };
  }

  /** Resolves when a slot is free (FIFO); rejects when aborted while waiting. */
  #admit(signal: AbortSignal): Promise<void> {
    if (this.running < (this.#options.capacity ?? 4)) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const wake = () => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      };
      const onAbort = () => {
        this.#waiting = this.#waiting.filter((waiter) => waiter !== wake);
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      this.#waiting.push(wake);
    });
  }

  async close(): Promise<void> {}
}
