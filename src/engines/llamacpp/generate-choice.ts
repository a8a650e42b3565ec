/**
 * One choice of a chat completion on one context sequence: reuse the cached prompt prefix,
 * evaluate the rest, sample token by token (temperature, top-p, seed, penalties, logit bias),
 * turn tokens into text deltas (stop sequences held back), attach log probabilities when asked,
 * and end with a `finish` part that carries the exact usage and the request's stop sequence that
 * ended it, if one did. Cancellation is checked after every token.
 */
import { randomInt, randomUUID } from "node:crypto";
import fs from "node:fs/promises";
import path from "node:path";
import { LlamaGrammarEvaluationState, TokenBias, type LlamaContextSequence, type LlamaModel, type SequenceEvaluateOptions, type Token } from "node-llama-cpp";
import type { EngineFinishReason, GenerationRequest, StreamPart, TokenUsage } from "../engine.ts";
import type { RenderedPrompt } from "./chat-prompt.ts";
import { TextStream } from "./text-stream.ts";
import { ChoiceLogprobs, type DescribeToken } from "./token-logprobs.ts";
import type { ReplyPart, ReplyPlan } from "./reply-plan.ts";
import { sequenceKey, type DecodeStepper } from "./decode-barrier.ts";
import { promptLogprobs } from "./prompt-logprobs.ts";

/** Generated tokens the presence/frequency penalties look back over. */
export const PENALTY_WINDOW_TOKENS = 256;
/** Earlier tokens given to the detokenizer when describing a token for log probabilities. */
const LOGPROB_CONTEXT_TOKENS = 4;

export type ChoiceInput = {
  model: LlamaModel;
  sequence: LlamaContextSequence;
  prompt: RenderedPrompt;
  request: GenerationRequest;
  /** The reply's grammar and how its text is read (content, or content and tool calls). */
  plan: ReplyPlan;
  /** The choice's index: seeds and parts carry it. */
  choice: number;
  /** Text given out before the generated text (a text completion's `echo`: its prompt). */
  echo?: string;
  /**
   * Tokens the first generated token is read after, for its text and its log probability's
   * (a text completion: its first token keeps its leading space, as llama-server sends it).
   * Absent: the first token is read alone (a chat reply drops the space it starts with).
   */
  textContext?: readonly Token[];
  maxTokens: number;
  signal: AbortSignal;
  describeToken: DescribeToken;
  /** Updated as tokens are generated, so usage is exact even if the consumer stops early. */
  usage: TokenUsage;
  /** This choice's place in the context's decode barrier, counted while its tokens are generated. */
  stepper: DecodeStepper;
  /** The sequence's creation index (its llama.cpp sequence id): batches are ordered by it. */
  sequenceIndex: number;
};

/**
 * The seed of one choice: choice 0 uses the request's seed as it is; the others get distinct
 * seeds derived from it, so a seeded request with `n` > 1 is reproducible choice by choice.
 */
export function choiceSeed(seed: number | undefined, choice: number): number {
  if (seed === undefined) return randomInt(0, 2 ** 31);
  if (choice === 0) return seed;
  const base = ((seed % 2 ** 32) + 2 ** 32) % 2 ** 32;
  return (base + choice * 2_654_435_761) % 2 ** 32;
}

/** node-llama-cpp's token bias for OpenAI's `logit_bias`: added to the logit; -100 bans the token. */
export function toTokenBias(model: LlamaModel, logitBias: ReadonlyMap<number, number> | undefined): TokenBias | undefined {
  if (logitBias === undefined || logitBias.size === 0) return undefined;
  const bias = new TokenBias(model.tokenizer);
  for (const [token, value] of logitBias) bias.set(token as Token, value <= -100 ? "never" : { logit: value });
  return bias;
}

/**
 * node-llama-cpp's `topK` for the request's `top_k` vendor field: the K likeliest tokens only, 0
 * or less for no truncation (the whole vocabulary; vLLM spells that -1, llama.cpp 0). Without the
 * field nothing is given, so node-llama-cpp's own default (40) applies, as it always has here.
 */
export function topKOption(request: GenerationRequest): { topK?: number } {
  const topK = request.vendor?.top_k;
  if (typeof topK !== "number" || !Number.isFinite(topK)) return {};
  return { topK: Math.max(0, Math.floor(topK)) };
}

/**
 * The sampling options for one choice. OpenAI's penalties map onto llama.cpp's penalties sampler
 * with the multiplicative repeat penalty off (1): each token that appeared in the last
 * `PENALTY_WINDOW_TOKENS` generated tokens has `presence_penalty` subtracted from its logit once
 * and `frequency_penalty` × its count; negative values encourage repetition.
 * Made once per choice: per-choice sampling state (e.g. a grammar's evaluation state) goes here.
 */
function evaluateOptions(input: ChoiceInput, generated: readonly Token[]): SequenceEvaluateOptions {
  const sampling = input.request.sampling;
  const penalize = sampling.frequencyPenalty !== 0 || sampling.presencePenalty !== 0;
  return {
    temperature: sampling.temperature,
    // Always given: node-llama-cpp's own default is 0.95, OpenAI's (and ours) 1, no truncation.
    topP: sampling.topP,
    ...topKOption(input.request),
    // A text completion's choices are numbered within their prompt: a prompt answers alike alone or among others.
    seed: choiceSeed(sampling.seed, input.request.completion === undefined ? input.choice : input.choice % input.request.completion.n),
    // Each choice walks the grammar on its own.
    grammarEvaluationState: input.plan.grammar && new LlamaGrammarEvaluationState({ model: input.model, grammar: input.plan.grammar }),
    yieldEogToken: true,
    // Read only by the decode barrier: which sequence this is, so batches go in sequence order.
    evaluationPriority: sequenceKey(input.sequenceIndex),
    tokenBias: toTokenBias(input.model, sampling.logitBias),
    repeatPenalty: penalize
      ? {
          punishTokens: () => generated.slice(-PENALTY_WINDOW_TOKENS),
          maxPunishTokens: PENALTY_WINDOW_TOKENS,
          penalty: 1,
          frequencyPenalty: sampling.frequencyPenalty,
          presencePenalty: sampling.presencePenalty,
        }
      : undefined,
  };
}

/** Generates one choice in `input.sequence`; yields its deltas and one `finish`. */
export async function* generateChoice(input: ChoiceInput): AsyncGenerator<StreamPart> {
  const { model, sequence, prompt, request, plan, choice, maxTokens, signal, usage } = input;
  // An echoed prompt with log probabilities: the prompt is evaluated anew for them (none of it cached).
  const echoLogprobs =
    input.echo !== undefined && request.logprobs !== undefined
      ? await promptLogprobs(sequence, prompt.tokens, { top: request.logprobs.top, describeToken: input.describeToken, sequenceIndex: input.sequenceIndex })
      : undefined;
  const reused = await reusePrefix(sequence, prompt.tokens);
  usage.cachedPromptTokens = echoLogprobs === undefined ? reused : 0;
  const generated: Token[] = [];
  const detokenize = (tokens: readonly number[], lastTokens: readonly number[]) =>
    model.detokenize(tokens as Token[], plan.specialTokensAsText, lastTokens as Token[]);
  const text = new TextStream(detokenize, [...request.sampling.stop, ...prompt.stopTexts], input.textContext);
  const reply = plan.reader();
  const logprobs = request.logprobs === undefined ? undefined : new ChoiceLogprobs(input.describeToken, request.logprobs.top);
  /** Characters of reply text read so far (logprobs go out with the content delta that carries their token's text). */
  let read = 0;
  /**
   * The reply's parts for `content` with this choice's index; the log probabilities of the tokens
   * read so far ride on the first content delta (tool-call tokens have none, as with OpenAI).
   */
  const partsOf = (content: string, end?: { allTokens: boolean }): StreamPart[] => {
    read += content.length;
    const parts: ReplyPart[] = content.length > 0 ? reply.push(content) : [];
    if (end !== undefined) parts.push(...reply.flush());
    const tokens = logprobs === undefined ? undefined : end?.allTokens ? logprobs.rest() : logprobs.take(read);
    const out: StreamPart[] = [];
    let attached = tokens === undefined || tokens.length === 0;
    for (const part of parts) {
      if (part.type === "text-delta" && !attached) {
        out.push({ ...part, choice, logprobs: tokens });
        attached = true;
      } else {
        out.push({ ...part, choice });
      }
    }
    if (!attached && reply.calls === 0) out.push({ type: "text-delta", choice, text: "", logprobs: tokens });
    return out;
  };

  if (echoLogprobs !== undefined) yield { type: "text-delta", choice, text: input.echo!, logprobs: echoLogprobs };
  else if (input.echo !== undefined && input.echo !== "") yield { type: "text-delta", choice, text: input.echo };
  let reason: EngineFinishReason = "length";
  // From here to the end of the loop, every decode this sequence queues is one the next batch waits for.
  input.stepper.start();
  try {
    const outputs = sequence.evaluateWithMetadata(
      prompt.tokens.slice(reused),
      { confidence: logprobs !== undefined, probabilities: logprobs !== undefined && request.logprobs!.top > 0 },
      evaluateOptions(input, generated),
    );
    // One token read ahead: as soon as a token is known to go on, the sequence is asked for the
    // next one, so its decode runs on llama.cpp's thread while this one's text is made and sent
    // (and it joins the next batch without waiting for that work). A read-ahead that turns out
    // unneeded (a stop sequence, a cut) costs one decode and is never counted or sent.
    let pending: Promise<IteratorResult<(typeof outputs extends AsyncGenerator<infer Output> ? Output : never)>> | undefined;
    try {
      if (signal.aborted) reason = "cancelled";
      // `max_tokens` 0 (an echo alone): nothing is generated.
      else if (maxTokens > 0) pending = outputs.next();
      while (pending !== undefined) {
        const result = await pending;
        pending = undefined;
        if (result.done === true) break;
        const output = result.value;
        const token = output.token;
        const lastTokens = generated.length === 0 && input.textContext !== undefined ? input.textContext.slice(-LOGPROB_CONTEXT_TOKENS) : generated.slice(-LOGPROB_CONTEXT_TOKENS);
        generated.push(token);
        usage.completionTokens = generated.length;
        if (model.isEogToken(token) || prompt.stopTokens.has(token)) {
          reason = "stop";
          break;
        }
        if (generated.length >= maxTokens) reason = "length";
        else if (signal.aborted) reason = "cancelled";
        else pending = outputs.next();
        if (logprobs !== undefined) {
          const metadata = output as { confidence?: number; probabilities?: Map<Token, number> };
          logprobs.record(token, metadata.confidence ?? metadata.probabilities?.get(token) ?? 0, metadata.probabilities, lastTokens, text.produced);
        }
        const step = text.push(token);
        if (step.text.length > 0) yield* partsOf(step.text);
        if (step.stopped) {
          reason = "stop";
          break;
        }
        if (signal.aborted) {
          reason = "cancelled";
          break;
        }
      }
    } finally {
      // The read-ahead holds the sequence until its decode ends: let it, then end the evaluation.
      if (pending !== undefined) await pending.catch(() => undefined);
      await outputs.return(undefined).catch(() => undefined);
    }
  } finally {
    input.stepper.stop();
  }
  if (reason !== "cancelled") {
    const tail = text.flush();
    // Without a stop sequence every recorded token's text is in the content: hand out the rest.
    yield* partsOf(tail, { allTokens: !text.stopped });
    if (text.stopped) reason = "stop";
    if (reason === "stop" && reply.calls > 0) reason = "tool_calls";
  }
  // Named only when one of the request's own stop strings ended it (not the template's end-of-turn text).
  const stopSequence = reason === "stop" && text.stoppedBy !== undefined && request.sampling.stop.includes(text.stoppedBy) ? text.stoppedBy : undefined;
  yield { type: "finish", choice, reason, usage: { ...usage }, ...(stopSequence !== undefined ? { stopSequence } : {}) };
}

/**
 * Keeps the part of the sequence's state that matches the new prompt (prefix caching) and
 * erases the rest. At least one prompt token is always evaluated anew, to get its logits.
 * Returns how many prompt tokens were reused.
 */
export async function reusePrefix(sequence: LlamaContextSequence, promptTokens: readonly Token[]): Promise<number> {
  const { firstDifferentIndex } = sequence.compareContextTokens([...promptTokens]);
  const keep = Math.min(firstDifferentIndex, promptTokens.length - 1);
  if (sequence.nextTokenIndex > keep) {
    await sequence.eraseContextTokenRanges([{ start: keep, end: sequence.nextTokenIndex }]);
  }
  return keep;
}

/** Prompt tokens past which parallel choices copy the first one's evaluated prompt instead of evaluating it again. */
export const MIN_SHARED_PROMPT_TOKENS = 32;

/**
 * Evaluates the prompt once for choices that run in parallel (`n` > 1 over several sequences):
 * `first` evaluates all of it but the last token (which each choice evaluates itself, for its
 * logits), and the others load that state. node-llama-cpp 3.22's public API copies a sequence's
 * state only through a file (`saveStateToFile` / `loadStateFromFile`; its in-memory copy is
 * internal), so the state goes through one in `directory`: about 12 KB a token on the benchmark
 * model, milliseconds against the seconds a long prompt takes to evaluate again. Best effort: a
 * failure leaves each sequence to evaluate the prompt itself. Returns how many prompt tokens
 * `first` had cached before (the request's cached tokens), or undefined when nothing was shared.
 */
export async function sharePromptPrefix(
  first: LlamaContextSequence,
  others: readonly LlamaContextSequence[],
  promptTokens: readonly Token[],
  options: { directory: string; sequenceIndex: number; signal: AbortSignal },
): Promise<number | undefined> {
  const shared = promptTokens.length - 1;
  if (others.length === 0 || shared < MIN_SHARED_PROMPT_TOKENS) return undefined;
  // Worth it only for the sequences that do not hold most of the prompt already.
  const behind = others.filter((sequence) => shared - sequence.compareContextTokens([...promptTokens]).firstDifferentIndex >= MIN_SHARED_PROMPT_TOKENS);
  if (behind.length === 0) return undefined;
  const reused = await reusePrefix(first, promptTokens);
  if (reused < shared) {
    await first.evaluateWithoutGeneratingNewTokens(promptTokens.slice(reused, shared), { evaluationPriority: sequenceKey(options.sequenceIndex) });
  }
  if (options.signal.aborted) return reused;
  const file = path.join(options.directory, `turnpike-prefix-${process.pid}-${randomUUID()}.bin`);
  try {
    await first.saveStateToFile(file);
    await Promise.all(behind.map((sequence) => sequence.loadStateFromFile(file, { acceptRisk: true })));
  } catch {
    // Each choice evaluates what its sequence lacks (reusePrefix), as without sharing.
  } finally {
    await fs.rm(file, { force: true });
  }
  return reused;
}
