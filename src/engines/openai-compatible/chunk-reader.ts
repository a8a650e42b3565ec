/**
 * Upstream chat completion chunks → the engine's stream parts, leniently: the upstreams Turnpike
 * fronts all speak "OpenAI", each a little differently.
 *
 * - Tool calls arrive as OpenAI's deltas (an id and a name, then pieces of arguments), as whole
 *   calls in one delta (vLLM's some parsers, Ollama), without `index` (continue the last call of
 *   that choice) or without `id` (one is made up).
 * - Reasoning arrives as `reasoning_content` (SGLang, llama-server, older vLLM) or `reasoning`
 *   (vLLM ≥ 0.11, Ollama).
 * - An error may arrive inside the stream (`data: {"error": …}` or vLLM's flat `{"object":"error"}`):
 *   it becomes an `UpstreamStreamError` the engine classifies.
 * - Log probabilities may lack `bytes` (null): they are the UTF-8 bytes of the token's text.
 * - Usage comes as a last chunk with `choices: []`, on every chunk (vLLM's continuous usage), on
 *   the finishing chunk (older llama-server), or never (a cut stream).
 * - The stop string that ended a choice comes, from the kinds that say it, on the finishing chunk
 *   (vLLM's `stop_reason`, SGLang's `matched_stop`: see `stopSequenceField` in `dialects.ts`); a
 *   finish names it only when it is one of the request's stop strings.
 *
 * Usage is what the upstream reported at the end (`upstream`); else, for a stream cut short, the
 * larger of the last running count it reported and what this reader counted (`estimated`: a chunk
 * of content counts a token, or as many as its log probabilities list). A running count is usage
 * on a chunk with choices (vLLM's continuous usage) or llama-server's `timings` on a content chunk
 * (asked for with `timings_per_token`: `prompt_n` evaluated + `cache_n` reused is the prompt). Each choice ends with
 * exactly one `finish` part, given by `end()` (once usage is known) or `cancel()`.
 */
import type { EngineFinishReason, GenerationUsage, StreamPart, TokenLogprob, TokenLogprobAlternative, TokenUsage } from "../engine.ts";
import type { ServerSentEvent } from "./sse-decoder.ts";

/** An error event inside the upstream's stream; `payload` is the parsed event (see `classifyStreamError`). */
export class UpstreamStreamError extends Error {
  readonly payload: unknown;
  constructor(payload: unknown) {
    super("The upstream sent an error event in its stream.");
    this.name = "UpstreamStreamError";
    this.payload = payload;
  }
}

/** The upstream's stream broke its own format (not JSON, a choice out of range). */
export class UpstreamProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UpstreamProtocolError";
  }
}

export type ChunkReaderOptions = {
  /** Choices asked for (`n`): indexes outside 0..choices-1 are a protocol error. */
  choices: number;
  /** The prompt's tokens as `prepare` counted them (exact or an upper bound): the estimate's prompt. */
  promptTokens: number;
  /** Whether log probabilities were asked for (others are dropped). */
  logprobs: boolean;
  /** Makes ids for tool calls that came without one. */
  newCallId?: () => string;
  /** The field of a finishing choice naming the stop string met (the kind's `stopSequenceField`); undefined: none is read. */
  stopSequenceField?: "stop_reason" | "matched_stop";
  /** The request's stop strings: the only values of that field a finish repeats. */
  stop?: readonly string[];
};

type CallState = { id: string; name: string | undefined; upstreamIndex: number | undefined; started: boolean; pending: string };

type ChoiceState = {
  calls: CallState[];
  reason: EngineFinishReason | undefined;
  /** The request's stop string the upstream said ended the choice (only with reason `stop`). */
  stopSequence: string | undefined;
  /** Tokens counted from what was seen (estimate). */
  counted: number;
};

type WireUsage = {
  prompt_tokens?: unknown;
  completion_tokens?: unknown;
  prompt_tokens_details?: { cached_tokens?: unknown } | null;
  completion_tokens_details?: { reasoning_tokens?: unknown } | null;
  /** SGLang reports reasoning tokens at the top. */
  reasoning_tokens?: unknown;
};

const count = (value: unknown): number | undefined => (typeof value === "number" && Number.isFinite(value) && value >= 0 ? Math.floor(value) : undefined);

function toUsage(wire: WireUsage): TokenUsage | undefined {
  const prompt = count(wire.prompt_tokens);
  const completion = count(wire.completion_tokens);
  if (prompt === undefined && completion === undefined) return undefined;
  const reasoning = count(wire.completion_tokens_details?.reasoning_tokens) ?? count(wire.reasoning_tokens);
  return {
    promptTokens: prompt ?? 0,
    cachedPromptTokens: count(wire.prompt_tokens_details?.cached_tokens) ?? 0,
    completionTokens: completion ?? 0,
    ...(reasoning !== undefined && reasoning > 0 ? { reasoningTokens: reasoning } : {}),
  };
}

/** llama-server's `timings` (the counts only): `prompt_n` tokens evaluated, `cache_n` reused, `predicted_n` generated. */
type WireTimings = { prompt_n?: unknown; cache_n?: unknown; predicted_n?: unknown };

/** llama-server's running counts as usage; undefined unless it says both prompt and completion. */
function timingsToUsage(wire: WireTimings): TokenUsage | undefined {
  const evaluated = count(wire.prompt_n);
  const completion = count(wire.predicted_n);
  if (evaluated === undefined || completion === undefined) return undefined;
  const cached = count(wire.cache_n) ?? 0;
  return { promptTokens: evaluated + cached, cachedPromptTokens: cached, completionTokens: completion };
}

function finishReason(value: unknown): EngineFinishReason | undefined {
  if (typeof value !== "string" || value === "") return undefined;
  switch (value) {
    case "length":
      return "length";
    case "tool_calls":
    case "function_call":
      return "tool_calls";
    case "content_filter":
      return "content_filter";
    // `stop`, `eos`, `stop_sequence`, and names only some upstreams use.
    default:
      return "stop";
  }
}

function utf8(text: string): number[] {
  return [...Buffer.from(text, "utf8")];
}

function alternative(wire: unknown): TokenLogprobAlternative | undefined {
  if (typeof wire !== "object" || wire === null) return undefined;
  const record = wire as { token?: unknown; logprob?: unknown; bytes?: unknown };
  const token = typeof record.token === "string" ? record.token : "";
  // -inf is sent as null or a huge negative number (JSON has no infinity).
  const logprob = typeof record.logprob === "number" ? Math.max(record.logprob, -9999) : -9999;
  const bytes = Array.isArray(record.bytes) && record.bytes.every((byte) => typeof byte === "number") ? (record.bytes as number[]) : utf8(token);
  return { token, logprob, bytes };
}

function tokenLogprobs(wire: unknown): TokenLogprob[] | undefined {
  const content = (wire as { content?: unknown } | null | undefined)?.content;
  if (!Array.isArray(content)) return undefined;
  const tokens: TokenLogprob[] = [];
  for (const entry of content) {
    const token = alternative(entry);
    if (token === undefined) continue;
    const top = (entry as { top_logprobs?: unknown }).top_logprobs;
    const topLogprobs = Array.isArray(top) ? top.map(alternative).filter((item): item is TokenLogprobAlternative => item !== undefined) : [];
    tokens.push({ ...token, topLogprobs });
  }
  return tokens;
}

/** Reads one upstream stream (one attempt): feed it each chunk with `read`, then `end` or `cancel`. */
export class ChunkReader {
  readonly #options: ChunkReaderOptions;
  readonly #choices: ChoiceState[];
  #finalUsage: TokenUsage | undefined;
  #runningUsage: TokenUsage | undefined;
  #content = false;
  #ended = false;
  #callCounter = 0;

  constructor(options: ChunkReaderOptions) {
    this.#options = options;
    this.#choices = Array.from({ length: options.choices }, () => ({ calls: [], reason: undefined, stopSequence: undefined, counted: 0 }));
  }

  /** Whether any part was given out (the client may have seen it: the request can no longer be retried). */
  get sawContent(): boolean {
    return this.#content;
  }

  /** Whether every choice received its finish reason. */
  get allFinished(): boolean {
    return this.#choices.every((choice) => choice.reason !== undefined);
  }

  /**
   * The parts one parsed chunk carries (finishes excepted: see `end`). Throws
   * `UpstreamStreamError` for an error event, `UpstreamProtocolError` for a malformed chunk.
   */
  read(chunk: unknown): StreamPart[] {
    if (typeof chunk !== "object" || chunk === null || Array.isArray(chunk)) throw new UpstreamProtocolError("The upstream sent a chunk that is not a JSON object.");
    const record = chunk as { error?: unknown; object?: unknown; choices?: unknown; usage?: unknown; timings?: unknown };
    if (record.error !== undefined && record.error !== null) throw new UpstreamStreamError(chunk);
    if (record.object === "error") throw new UpstreamStreamError(chunk);
    const parts: StreamPart[] = [];
    const choices = Array.isArray(record.choices) ? record.choices : [];
    for (const wire of choices) parts.push(...this.#readChoice(wire));
    if (typeof record.usage === "object" && record.usage !== null) {
      const usage = toUsage(record.usage as WireUsage);
      // Usage on a chunk without choices, or once every choice has finished, is the final count;
      // on any other chunk it is a running count (vLLM's continuous usage).
      if (usage !== undefined) {
        if (choices.length === 0 || this.allFinished) this.#finalUsage = usage;
        else this.#runningUsage = usage;
      }
    }
    // llama-server's timings on a chunk of the reply without usage: a running count (its final counts come as usage).
    if (record.usage == null && choices.length > 0 && !this.allFinished && typeof record.timings === "object" && record.timings !== null) {
      const running = timingsToUsage(record.timings as WireTimings);
      if (running !== undefined) this.#runningUsage = running;
    }
    if (parts.length > 0) this.#content = true;
    return parts;
  }

  #readChoice(wire: unknown): StreamPart[] {
    if (typeof wire !== "object" || wire === null) return [];
    const record = wire as { index?: unknown; delta?: unknown; finish_reason?: unknown; logprobs?: unknown; stop_reason?: unknown; matched_stop?: unknown };
    const index = record.index === undefined || record.index === null ? 0 : record.index;
    if (typeof index !== "number" || !Number.isInteger(index) || index < 0 || index >= this.#options.choices) {
      throw new UpstreamProtocolError(`The upstream sent a chunk for choice ${String(index)}; ${this.#options.choices} were asked for.`);
    }
    const state = this.#choices[index]!;
    const parts: StreamPart[] = [];
    const delta = (typeof record.delta === "object" && record.delta !== null ? record.delta : {}) as {
      content?: unknown;
      reasoning_content?: unknown;
      reasoning?: unknown;
      refusal?: unknown;
      tool_calls?: unknown;
    };
    let tokens = 0;
    const reasoning = typeof delta.reasoning_content === "string" ? delta.reasoning_content : typeof delta.reasoning === "string" ? delta.reasoning : "";
    if (reasoning !== "") {
      parts.push({ type: "reasoning-delta", choice: index, text: reasoning });
      tokens = 1;
    }
    const logprobs = this.#options.logprobs ? tokenLogprobs(record.logprobs) : undefined;
    // A refusal (OpenAI) is what the model answered instead: the client reads it as content.
    const text = (typeof delta.content === "string" ? delta.content : "") + (typeof delta.refusal === "string" ? delta.refusal : "");
    if (text !== "" || (logprobs !== undefined && logprobs.length > 0)) {
      parts.push(logprobs !== undefined && logprobs.length > 0 ? { type: "text-delta", choice: index, text, logprobs } : { type: "text-delta", choice: index, text });
      tokens = 1;
    }
    if (Array.isArray(delta.tool_calls)) {
      for (const call of delta.tool_calls) {
        const before = parts.length;
        parts.push(...this.#readToolCall(index, state, call));
        if (parts.length > before) tokens = 1;
      }
    }
    state.counted += Math.max(tokens, logprobs?.length ?? 0);
    const reason = finishReason(record.finish_reason);
    if (reason !== undefined && state.reason === undefined) {
      parts.push(...this.#flushCalls(index, state));
      state.reason = reason;
      if (reason === "stop") state.stopSequence = this.#stopSequence(record);
    }
    return parts;
  }

  /** The request's stop string a finishing choice names in the kind's field, if it names one. */
  #stopSequence(record: { stop_reason?: unknown; matched_stop?: unknown }): string | undefined {
    const field = this.#options.stopSequenceField;
    if (field === undefined) return undefined;
    const value = record[field];
    // A number is a stop token's id (the end of text among them): no stop string.
    return typeof value === "string" && (this.#options.stop ?? []).includes(value) ? value : undefined;
  }

  /** Finds the call a tool-call delta continues, or starts a new one. */
  #callFor(state: ChoiceState, upstreamIndex: number | undefined, id: string | undefined, name: string | undefined): CallState {
    const last = state.calls.at(-1);
    let call: CallState | undefined;
    if (id !== undefined) call = state.calls.find((candidate) => candidate.id === id);
    if (call === undefined && upstreamIndex !== undefined) {
      const atIndex = state.calls.findLast((candidate) => candidate.upstreamIndex === upstreamIndex);
      // Ollama numbers every whole call 0 in some releases: a new id at a used index is a new call.
      if (atIndex !== undefined && (id === undefined || atIndex.id === id)) call = atIndex;
    }
    if (call === undefined && upstreamIndex === undefined && id === undefined && last !== undefined) {
      // No index and no id: a delta without a name (or with the last call's) continues it.
      if (name === undefined || name === last.name || last.name === undefined) call = last;
    }
    if (call !== undefined) return call;
    const created: CallState = { id: id ?? this.#newCallId(), name: undefined, upstreamIndex, started: false, pending: "" };
    state.calls.push(created);
    return created;
  }

  #newCallId(): string {
    this.#callCounter++;
    return this.#options.newCallId?.() ?? `call_${Date.now().toString(36)}${this.#callCounter.toString(36)}${Math.random().toString(36).slice(2, 10)}`;
  }

  #readToolCall(choice: number, state: ChoiceState, wire: unknown): StreamPart[] {
    if (typeof wire !== "object" || wire === null) return [];
    const record = wire as { index?: unknown; id?: unknown; function?: unknown };
    const fn = (typeof record.function === "object" && record.function !== null ? record.function : {}) as { name?: unknown; arguments?: unknown };
    const upstreamIndex = typeof record.index === "number" ? record.index : undefined;
    const id = typeof record.id === "string" && record.id !== "" ? record.id : undefined;
    const name = typeof fn.name === "string" && fn.name !== "" ? fn.name : undefined;
    // Some upstreams send arguments as a JSON object rather than its text.
    const argumentsDelta = typeof fn.arguments === "string" ? fn.arguments : fn.arguments !== undefined && fn.arguments !== null ? JSON.stringify(fn.arguments) : "";
    const call = this.#callFor(state, upstreamIndex, id, name);
    const parts: StreamPart[] = [];
    if (call.name === undefined && name !== undefined) call.name = name;
    if (!call.started && call.name !== undefined) parts.push(...this.#startCall(choice, state, call));
    if (argumentsDelta !== "") {
      if (call.started) parts.push({ type: "tool-call-delta", choice, index: state.calls.indexOf(call), argumentsDelta });
      else call.pending += argumentsDelta;
    }
    return parts;
  }

  #startCall(choice: number, state: ChoiceState, call: CallState): StreamPart[] {
    call.started = true;
    const index = state.calls.indexOf(call);
    const parts: StreamPart[] = [{ type: "tool-call-start", choice, index, id: call.id, name: call.name ?? "" }];
    if (call.pending !== "") parts.push({ type: "tool-call-delta", choice, index, argumentsDelta: call.pending });
    call.pending = "";
    return parts;
  }

  /** Calls that never got a name are given out before the choice finishes (with an empty name). */
  #flushCalls(choice: number, state: ChoiceState): StreamPart[] {
    return state.calls.filter((call) => !call.started).flatMap((call) => this.#startCall(choice, state, call));
  }

  /**
   * The stream ended: one `finish` per choice, with the reason the upstream gave (`stop` for a
   * choice it never finished) and the choice's usage. Given once; later calls give nothing.
   */
  end(): StreamPart[] {
    return this.#finish((state) => state.reason ?? "stop");
  }

  /** The caller aborted: every choice not finished yet ends `cancelled`, with what was counted. */
  cancel(): StreamPart[] {
    return this.#finish((state) => (state.reason === undefined ? "cancelled" : state.reason));
  }

  #finish(reasonOf: (state: ChoiceState) => EngineFinishReason): StreamPart[] {
    if (this.#ended) return [];
    this.#ended = true;
    const total = this.usage();
    const shares = shareOut(total.completionTokens, this.#choices.map((state) => state.counted));
    return this.#choices.flatMap((state, choice): StreamPart[] => {
      const usage: TokenUsage = { promptTokens: total.promptTokens, cachedPromptTokens: total.cachedPromptTokens, completionTokens: shares[choice]! };
      const reason = reasonOf(state);
      const stopSequence = reason === "stop" ? state.stopSequence : undefined;
      return [...this.#flushCalls(choice, state), { type: "finish", choice, reason, usage, ...(stopSequence !== undefined ? { stopSequence } : {}) }];
    });
  }

  /**
   * The request's usage so far: the upstream's final report; else an estimate from its last
   * running count and what was counted here, the prompt as `prepare` bounded it.
   */
  usage(): GenerationUsage {
    if (this.#finalUsage !== undefined) return { ...this.#finalUsage, source: "upstream" };
    const counted = this.#choices.reduce((sum, choice) => sum + choice.counted, 0);
    const running = this.#runningUsage;
    return {
      source: "estimated",
      promptTokens: running?.promptTokens || this.#options.promptTokens,
      cachedPromptTokens: running?.cachedPromptTokens ?? 0,
      completionTokens: Math.max(running?.completionTokens ?? 0, counted),
      ...(running?.reasoningTokens !== undefined ? { reasoningTokens: running.reasoningTokens } : {}),
    };
  }
}

/**
 * The request's completion tokens shared out over its choices in proportion to what was counted
 * of each (the upstream reports only the sum), largest remainders first, so the shares add up to
 * the total exactly (rounding each share alone could give one token more or less). One choice,
 * or nothing counted: the first choice takes all.
 */
export function shareOut(total: number, counted: readonly number[]): number[] {
  const sum = counted.reduce((accumulated, count) => accumulated + count, 0);
  if (counted.length <= 1 || sum === 0) return counted.map((_, index) => (index === 0 ? total : 0));
  const exact = counted.map((count) => (total * count) / sum);
  const shares = exact.map(Math.floor);
  let left = total - shares.reduce((accumulated, share) => accumulated + share, 0);
  const byRemainder = exact.map((value, index) => ({ index, remainder: value - Math.floor(value) })).sort((a, b) => b.remainder - a.remainder || a.index - b.index);
  for (const { index } of byRemainder) {
    if (left <= 0) break;
    shares[index]!++;
    left--;
  }
  return shares;
}

/**
 * One SSE event of an upstream's stream, read: `[DONE]` ends the reply; named events other than
 * `error` (pings, vendor extras) are skipped; anything else must be a JSON chunk. Throws what
 * `ChunkReader.read` throws, and `UpstreamProtocolError` for data that is not JSON.
 */
export function readServerSentEvent(reader: ChunkReader, event: ServerSentEvent, asChatChunk: (chunk: unknown) => unknown = (chunk) => chunk): { done: boolean; parts: StreamPart[] } {
  if (event.data === "[DONE]") return { done: true, parts: [] };
  if (event.event !== undefined && event.event !== "message" && event.event !== "error") return { done: false, parts: [] };
  let payload: unknown;
  try {
    payload = JSON.parse(event.data);
  } catch {
    throw new UpstreamProtocolError("The upstream sent a chunk that is not JSON.");
  }
  return { done: false, parts: reader.read(asChatChunk(payload)) };
}
