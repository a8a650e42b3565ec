/**
 * Generation parts → llama-server's `/infill` replies (`response.ts`): the whole result, or its
 * partial events then the final one. Two of llama-server's stopping rules live here, on the text,
 * as its `process_token` applies them after each token (here after each text delta, one token
 * each on the embedded engine): `n_indent` (once a line break was generated, a later line
 * indented less than `n_indent` ends the middle, cut just before that line's first character)
 * and `t_max_predict_ms` (once a line break was generated, a line break after that long ends
 * it). Either stops reading the generation, which cuts it: the tokens made so far are billed.
 */
import type { GenerationOutcome, GenerationOutput, GenerationUsage } from "../generation.ts";
import type { InfillEvent, InfillPartial, InfillResult, InfillStopType } from "./response.ts";

/** What an infill reply says besides the generated text. */
export type InfillReplyShape = {
  /** The model's id as the catalog names it. */
  model: string;
  /** 0: no indentation rule. */
  nIndent: number;
  /** 0: no time limit. */
  maxPredictMs: number;
  /** Only these paths of the final result (`response_fields`); undefined or empty: all of it. */
  responseFields?: readonly string[];
  /** When the request was parsed (`performance.now()`): `prompt_ms` counts from here. */
  startedAt: number;
};

/** The middle as it is generated, with llama-server's text stopping rules (see the file's comment). */
class MiddleText {
  text = "";
  hasNewLine = false;
  /** Where the line after the last line break seen by the indentation rule starts (0: none yet). */
  #lineStart = 0;
  firstAt: number | undefined;
  lastAt: number | undefined;
  readonly #shape: InfillReplyShape;

  constructor(shape: InfillReplyShape) {
    this.#shape = shape;
  }

  /** Adds a delta; returns the text to send of it and whether a rule ended the middle. */
  push(delta: string): { sent: string; stop: boolean } {
    const now = performance.now();
    this.firstAt ??= now;
    this.lastAt = now;
    const before = this.text.length;
    this.text += delta;
    let stop = false;
    if (this.hasNewLine && this.#shape.nIndent > 0) {
      if (this.#lineStart > 0) {
        let at = this.#lineStart;
        while (at < this.text.length && (this.text[at] === " " || this.text[at] === "\t")) at += 1;
        if (at < this.text.length && at - this.#lineStart < this.#shape.nIndent) {
          stop = true;
          this.text = this.text.slice(0, at);
        }
      }
      const lineBreak = this.text.indexOf("\n", this.#lineStart);
      if (lineBreak >= 0) this.#lineStart = lineBreak + 1;
    }
    if (delta.includes("\n")) {
      this.hasNewLine = true;
      if (this.#shape.maxPredictMs > 0 && now - this.firstAt > this.#shape.maxPredictMs) stop = true;
    }
    return { sent: this.text.length > before ? this.text.slice(before) : "", stop };
  }
}

function perToken(milliseconds: number, tokens: number): { perTokenMs: number; perSecond: number } {
  return tokens > 0 && milliseconds > 0 ? { perTokenMs: milliseconds / tokens, perSecond: (1000 * tokens) / milliseconds } : { perTokenMs: 0, perSecond: 0 };
}

/** The final result; `content` as given (empty at the end of a stream). */
function resultOf(shape: InfillReplyShape, middle: MiddleText, usage: GenerationUsage, ending: Ending, content: string): InfillResult {
  const end = middle.lastAt ?? performance.now();
  const promptMs = (middle.firstAt ?? end) - shape.startedAt;
  const predictedMs = end - (middle.firstAt ?? end);
  const evaluated = usage.promptTokens - usage.cachedPromptTokens;
  const prompt = perToken(promptMs, evaluated);
  const predicted = perToken(predictedMs, usage.completionTokens);
  return {
    index: 0,
    content,
    tokens: [],
    id_slot: -1,
    stop: true,
    model: shape.model,
    tokens_predicted: usage.completionTokens,
    tokens_evaluated: usage.promptTokens,
    has_new_line: middle.hasNewLine,
    truncated: false,
    stop_type: ending.stopType,
    stopping_word: ending.stoppingWord,
    tokens_cached: usage.promptTokens + usage.completionTokens,
    timings: {
      cache_n: usage.cachedPromptTokens,
      prompt_n: evaluated,
      prompt_ms: promptMs,
      prompt_per_token_ms: prompt.perTokenMs,
      prompt_per_second: prompt.perSecond,
      predicted_n: usage.completionTokens,
      predicted_ms: predictedMs,
      predicted_per_token_ms: predicted.perTokenMs,
      predicted_per_second: predicted.perSecond,
    },
  };
}

/** llama-server's `json_get_nested_values`: each path (`timings/prompt_n`) found in `result`, as a flat key. */
export function pickResponseFields(result: Record<string, unknown>, paths: readonly string[] | undefined): Record<string, unknown> {
  if (paths === undefined || paths.length === 0) return result;
  const picked: Record<string, unknown> = {};
  for (const path of paths) {
    let current: unknown = result;
    let found = true;
    for (const key of path.split("/")) {
      if (found && current !== null && typeof current === "object" && !Array.isArray(current) && Object.hasOwn(current, key)) current = (current as Record<string, unknown>)[key];
      else found = false;
    }
    if (found) picked[path] = current;
  }
  return picked;
}

/** How the middle ended: llama-server's stop type and word, and the core's finish reason (none yet: cut short). */
type Ending = { stopType: InfillStopType; stoppingWord: string; reason?: GenerationOutcome["finishReason"] };

/** Reads the generation's parts to the end, or until a text rule stops the middle. */
async function* readMiddle(generation: GenerationOutput, middle: MiddleText, ending: Ending): AsyncGenerator<string> {
  for await (const part of generation.parts) {
    if (part.type === "text-delta") {
      const { sent, stop } = middle.push(part.text);
      if (sent !== "") yield sent;
      if (stop) {
        Object.assign(ending, { stopType: "limit", stoppingWord: "", reason: "length" });
        return;
      }
    } else if (part.type === "finish") {
      ending.reason = part.reason;
      if (part.reason === "length") ending.stopType = "limit";
      else if (part.reason === "stop" && part.stopSequence !== undefined) Object.assign(ending, { stopType: "word", stoppingWord: part.stopSequence });
      else if (part.reason === "stop") ending.stopType = "eos";
    }
  }
}

function outcomeOf(ending: Ending, usage: GenerationUsage): GenerationOutcome {
  const finishReason = ending.reason ?? "cancelled";
  return { finishReason, usage, ...(ending.stopType === "word" ? { stopSequence: ending.stoppingWord } : {}) };
}

/** Runs a non-streamed infill to its end: the result (narrowed to `response_fields`). */
export async function completeInfill(shape: InfillReplyShape, generation: GenerationOutput): Promise<{ reply: Record<string, unknown>; outcome: GenerationOutcome }> {
  const middle = new MiddleText(shape);
  const ending: Ending = { stopType: "none", stoppingWord: "" };
  for await (const _ of readMiddle(generation, middle, ending));
  const usage = generation.usage();
  const result = resultOf(shape, middle, usage, ending, middle.text);
  return { reply: pickResponseFields(result, shape.responseFields), outcome: outcomeOf(ending, usage) };
}

/** A streamed infill's events: a partial event per piece of the middle, then the final result (empty `content`). */
export async function* streamInfill(shape: InfillReplyShape, generation: GenerationOutput, outcome: { value?: GenerationOutcome }): AsyncGenerator<InfillEvent> {
  const middle = new MiddleText(shape);
  const ending: Ending = { stopType: "none", stoppingWord: "" };
  for await (const piece of readMiddle(generation, middle, ending)) {
    const usage = generation.usage();
    const partial: InfillPartial = { index: 0, content: piece, tokens: [], stop: false, id_slot: -1, tokens_predicted: usage.completionTokens, tokens_evaluated: usage.promptTokens };
    yield partial;
  }
  const usage = generation.usage();
  outcome.value = outcomeOf(ending, usage);
  if (outcome.value.finishReason === "cancelled") return;
  yield pickResponseFields(resultOf(shape, middle, usage, ending, ""), shape.responseFields);
}
