/**
 * The cheap bound on what a request will cost, known before its prompt is rendered or tokenized:
 * computed once per request, from the engine's `boundPrompt`, for the refusals (rate limits,
 * quota) that must come before the expensive work.
 */
import type { PromptBound } from "../../engines/prompt-bound.ts";
import type { ParsedGeneration } from "./dialect.ts";

/**
 * What a request will cost at least, known before its prompt is rendered or tokenized (from the
 * engine's cheap `boundPrompt`): the refusals that must come before the expensive work use it.
 */
export type CheapBound = {
  /** The prompt has at least this many tokens. */
  promptTokens: number;
  /** Completion tokens the hold will reserve at least (all choices): `n × max_tokens`, or what the context leaves. */
  completionTokens: number;
  /** Prompt + reserved completion tokens at least: the lower bound of what rate limits will charge. */
  tokens: number;
  /**
   * What rate limits will likely charge once the prompt is counted (≥ `tokens`): the lower bound
   * raised by the most the engine's recent prompts counted above theirs (`notePromptCount`).
   * Charged first, it spares most requests the second charge after tokenizing.
   */
  likelyTokens: number;
  /** Whether `likelyTokens` was guessed from the engine's recent prompts: the count `prepare` makes then teaches the next guesses (`notePromptCount`). */
  guessed: boolean;
  /** The engine's bounds on the prompt, handed on to `prepare` so that it is computed once per request. */
  prompt: PromptBound;
};

/**
 * Lower bounds of what `prepare` will count, from the engine's bounds on the prompt. With
 * `max_tokens` given, each choice reserves it; without, each reserves what the context leaves
 * after the prompt, which is least for the longest prompt that still fits. A `max_tokens` the
 * engine fits to the context (`fitMaxTokens`: Anthropic's) reserves the smaller of the two, so an
 * account with little credit can still run a small request that asks for 32,000 tokens.
 * Throws `ModelNotReadyError` (503) when the model is not ready.
 */
export function cheapBound(parsed: Pick<ParsedGeneration<unknown>, "request" | "model">): CheapBound {
  const { request, model } = parsed;
  const bound = model.engine.boundPrompt(request);
  const contextLength = model.engine.info()?.contextLength;
  let perChoice: number;
  let promptForLimits = bound.atLeast;
  if (request.maxTokens !== undefined && request.fitMaxTokens === true && contextLength !== undefined) {
    // A ceiling the engine lowers to the room the prompt leaves: least for the longest prompt that
    // still fits (the completion), and for the shortest (prompt + completion, for rate limits).
    const longest = Math.max(bound.atLeast, Math.min(bound.atMost, contextLength - 1));
    perChoice = Math.min(request.maxTokens, Math.max(1, contextLength - longest));
    const completionTokens = perChoice * request.choices;
    const tokens = bound.atLeast + Math.min(request.maxTokens, Math.max(1, contextLength - bound.atLeast)) * request.choices;
    return { promptTokens: bound.atLeast, completionTokens, tokens, likelyTokens: tokens, guessed: false, prompt: bound };
  }
  let likelyPrompt: number | undefined;
  if (request.maxTokens !== undefined) {
    perChoice = request.maxTokens;
    // An engine that will count the bound's upper end is charged it now: the exact charge, once.
    const charged = model.engine.chargedPrompt?.(request, bound);
    if (charged !== undefined) promptForLimits = Math.max(bound.atLeast, charged);
    else likelyPrompt = likelyPromptTokens(model.engine, bound);
  }
  else if (contextLength === undefined) perChoice = 1;
  else {
    const longest = Math.max(bound.atLeast, Math.min(bound.atMost, contextLength - 1));
    perChoice = Math.max(1, contextLength - longest);
    promptForLimits = longest;
  }
  const completionTokens = perChoice * request.choices;
  const tokens = promptForLimits + completionTokens;
  const likelyTokens = likelyPrompt === undefined ? tokens : likelyPrompt + completionTokens;
  return { promptTokens: bound.atLeast, completionTokens, tokens, likelyTokens, guessed: likelyPrompt !== undefined, prompt: bound };
}

/** How many of an engine's last counted prompts `likelyPromptTokens` learns from. */
const RECENT_PROMPTS = 16;

/**
 * By engine, how many tokens its last counted prompts had above their lower bounds (`atLeast`):
 * a ring of `RECENT_PROMPTS`. What a template adds and how a vocabulary splits text differ from
 * one model to another, but little from one request to the next of the same client.
 */
const gapsByEngine = new WeakMap<object, { gaps: number[]; next: number; most: number }>();

/**
 * A guess at the tokens the engine will count for a prompt of these bounds: the lower bound plus
 * a quarter more than the largest gap among its recent prompts, within the upper bound. A guess
 * only sets what rate limits charge first (see `RequestLimits.admit`): too low costs a second
 * charge, too high a give-back, neither a refusal nor an overspend.
 */
export function likelyPromptTokens(engine: object, bound: PromptBound): number {
  const recent = gapsByEngine.get(engine);
  if (recent === undefined) return bound.atLeast;
  return Math.min(bound.atMost, bound.atLeast + Math.ceil(recent.most * 1.25));
}

/** Notes the tokens the engine counted for a prompt of these bounds (the next guesses learn from it). */
export function notePromptCount(engine: object, bound: PromptBound, counted: number): void {
  const gap = Math.max(0, counted - bound.atLeast);
  let recent = gapsByEngine.get(engine);
  if (recent === undefined) gapsByEngine.set(engine, (recent = { gaps: [], next: 0, most: 0 }));
  const replaced = recent.gaps.length < RECENT_PROMPTS ? undefined : recent.gaps[recent.next];
  recent.gaps[recent.next] = gap;
  recent.next = (recent.next + 1) % RECENT_PROMPTS;
  if (gap >= recent.most) recent.most = gap;
  else if (replaced === recent.most) recent.most = Math.max(...recent.gaps);
}

