/**
 * Generation parts → text completions: the whole `text_completion` (one choice per prompt × `n`,
 * in index order) or its streamed chunks (text deltas interleaved across choices, a finish chunk
 * per choice, the usage chunk last when asked), with OpenAI's legacy log probabilities. An echoed
 * prompt is the engine's first text delta of each choice, so it needs nothing here.
 */
import { overallFinishReason, type GenerationOutcome, type GenerationOutput, type TokenLogprob } from "../generation.ts";
import { usageOf } from "../chat-completions/response.ts";
import type { Completion, CompletionChunk, CompletionFinishReason, LegacyLogprobs } from "./response.ts";

/** What a text completion says besides its generated text. */
export type CompletionReplyShape = {
  id: string;
  /** Seconds since the epoch. */
  created: number;
  /** The model's id as the client named it. */
  model: string;
  /** Choices of the whole request: prompts × `n`. */
  choices: number;
  /** A stream ends with a usage chunk (`stream_options.include_usage`). */
  includeUsage: boolean;
  /** Whether choices carry `logprobs` (the request's `logprobs`, 0..5). */
  logprobs: boolean;
};

/**
 * The legacy shape of some tokens' log probabilities; `offset` is where the first one's text
 * starts in the choice's text (characters), each next one after the one before.
 */
export function toLegacyLogprobs(tokens: readonly TokenLogprob[], offset: number): LegacyLogprobs {
  const legacy: LegacyLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  let at = offset;
  for (const token of tokens) {
    legacy.tokens.push(token.token);
    legacy.text_offset.push(at);
    at += token.token.length;
    // An echoed prompt's first token: nothing before it, no log probability (OpenAI's null).
    if (token.unconditioned === true) {
      legacy.token_logprobs.push(null);
      legacy.top_logprobs.push(null);
      continue;
    }
    legacy.token_logprobs.push(token.logprob);
    // The likeliest alternatives, and the sampled token always (OpenAI: up to `logprobs` + 1 entries).
    const top: Record<string, number> = {};
    for (const alternative of token.topLogprobs) if (!(alternative.token in top)) top[alternative.token] = alternative.logprob;
    if (!(token.token in top)) top[token.token] = token.logprob;
    legacy.top_logprobs.push(top);
  }
  return legacy;
}

function wireReason(reason: string | undefined): CompletionFinishReason {
  return reason === "length" || reason === "content_filter" ? reason : "stop";
}

/** Runs a non-streamed request to its end and builds the `text_completion`. */
export async function completeTextCompletion(shape: CompletionReplyShape, generation: GenerationOutput): Promise<{ completion: Completion; outcome: GenerationOutcome }> {
  const texts = Array.from({ length: shape.choices }, () => "");
  const logprobs = Array.from({ length: shape.choices }, (): LegacyLogprobs => ({ tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] }));
  const reasons = new Array<Parameters<typeof overallFinishReason>[0][number]>(shape.choices).fill(undefined);
  let stopSequence: string | undefined;
  for await (const part of generation.parts) {
    if (part.type === "text-delta") {
      if (part.logprobs !== undefined) {
        const legacy = toLegacyLogprobs(part.logprobs, texts[part.choice]!.length);
        const into = logprobs[part.choice]!;
        into.tokens.push(...legacy.tokens);
        into.token_logprobs.push(...legacy.token_logprobs);
        into.top_logprobs.push(...legacy.top_logprobs);
        into.text_offset.push(...legacy.text_offset);
      }
      texts[part.choice] += part.text;
    } else if (part.type === "finish") {
      reasons[part.choice] = part.reason;
      if (part.choice === 0) stopSequence = part.stopSequence;
    }
  }
  const usage = generation.usage();
  const finishReason = overallFinishReason(reasons);
  return {
    outcome: { finishReason, usage, ...(finishReason === "stop" && stopSequence !== undefined ? { stopSequence } : {}) },
    completion: {
      id: shape.id,
      object: "text_completion",
      created: shape.created,
      model: shape.model,
      system_fingerprint: null,
      choices: texts.map((text, index) => ({ text, index, logprobs: shape.logprobs ? logprobs[index]! : null, finish_reason: wireReason(reasons[index]) })),
      usage: usageOf(usage),
    },
  };
}

/**
 * Turns engine parts into chunks: text deltas (each naming its choice's `index`), a chunk with
 * each choice's finish reason, and (when asked) a last chunk with `choices: []` and the usage.
 * `outcome` is filled in when every choice has finished. A cancelled choice gets no finish chunk.
 */
export async function* streamTextCompletion(shape: CompletionReplyShape, generation: GenerationOutput, outcome: { value?: GenerationOutcome }): AsyncGenerator<CompletionChunk> {
  const chunk = (index: number, text: string, finishReason: CompletionFinishReason | null, logprobs: LegacyLogprobs | null): CompletionChunk => ({
    id: shape.id,
    object: "text_completion",
    created: shape.created,
    model: shape.model,
    system_fingerprint: null,
    choices: [{ text, index, logprobs, finish_reason: finishReason }],
    ...(shape.includeUsage ? { usage: null } : {}),
  });
  const lengths = new Array<number>(shape.choices).fill(0);
  const reasons = new Array<Parameters<typeof overallFinishReason>[0][number]>(shape.choices).fill(undefined);
  for await (const part of generation.parts) {
    if (part.type === "text-delta") {
      const logprobs = shape.logprobs ? toLegacyLogprobs(part.logprobs ?? [], lengths[part.choice]!) : null;
      lengths[part.choice]! += part.text.length;
      yield chunk(part.choice, part.text, null, logprobs);
      continue;
    }
    if (part.type !== "finish") continue;
    reasons[part.choice] = part.reason;
    if (part.reason !== "cancelled") yield chunk(part.choice, "", wireReason(part.reason), null);
  }
  const usage = generation.usage();
  const finishReason = overallFinishReason(reasons);
  outcome.value = { finishReason, usage };
  if (finishReason === "cancelled" || !shape.includeUsage) return;
  yield { id: shape.id, object: "text_completion", created: shape.created, model: shape.model, system_fingerprint: null, choices: [], usage: usageOf(usage) };
}
