/**
 * The log probabilities of a prompt's own tokens (a text completion's `echo` with `logprobs`, as
 * evaluation harnesses ask for them): each token's probability given the tokens before it, from
 * the model's distribution at the position before (node-llama-cpp's `controlledEvaluate`, every
 * position's probabilities asked for). The first token has none (nothing comes before it).
 *
 * Every position's logits are needed, which a reused prefix does not keep: the sequence's state is
 * erased and the prompt evaluated anew, all but its last token (the generation evaluates that one,
 * reusing the rest). Costs one evaluation of the prompt with a probability distribution read per
 * token.
 */
import type { LlamaContextSequence, Token } from "node-llama-cpp";
import type { TokenLogprob } from "../engine.ts";
import { sequenceKey } from "./decode-barrier.ts";
import { toLogprob, type DescribeToken } from "./token-logprobs.ts";

/** Earlier tokens given to the detokenizer when describing a prompt token. */
const CONTEXT_TOKENS = 4;

/**
 * Evaluates `tokens` but the last into `sequence` (from scratch) and returns each token's log
 * probability with the `top` likeliest alternatives at its position; the first one `unconditioned`.
 */
export async function promptLogprobs(
  sequence: LlamaContextSequence,
  tokens: readonly Token[],
  options: { top: number; describeToken: DescribeToken; sequenceIndex: number },
): Promise<TokenLogprob[]> {
  if (sequence.nextTokenIndex > 0) await sequence.eraseContextTokenRanges([{ start: 0, end: sequence.nextTokenIndex }]);
  const outputs = await sequence.controlledEvaluate(
    tokens.slice(0, -1).map((token) => [token, { generateNext: { probabilities: true } }] as [Token, { generateNext: { probabilities: true } }]),
    { evaluationPriority: sequenceKey(options.sequenceIndex) },
  );
  return tokens.map((token, index): TokenLogprob => {
    const before = tokens.slice(Math.max(0, index - CONTEXT_TOKENS), index);
    const own = options.describeToken(token, before);
    if (index === 0) return { token: own.text, logprob: 0, bytes: own.bytes, topLogprobs: [], unconditioned: true };
    // Sorted from the likeliest (node-llama-cpp's order).
    const probabilities = outputs[index - 1]?.next.probabilities;
    const topLogprobs = [...(probabilities ?? new Map<Token, number>())].slice(0, options.top).map(([candidate, probability]) => {
      const described = candidate === token ? own : options.describeToken(candidate, before);
      return { token: described.text, logprob: toLogprob(probability), bytes: described.bytes };
    });
    return { token: own.text, logprob: toLogprob(probabilities?.get(token) ?? 0), bytes: own.bytes, topLogprobs };
  });
}
