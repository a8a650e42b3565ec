/**
 * Log probabilities of generated tokens, as OpenAI reports them: the token's text, its UTF-8
 * bytes, its natural-log probability and the likeliest alternatives at that step.
 *
 * The probabilities are those node-llama-cpp reports for the distribution the token was sampled
 * from: the model's logits after `logit_bias` and the presence/frequency penalties, and, when
 * temperature > 0, after top-k/top-p truncation and temperature scaling. With temperature 0 this
 * is the model's own distribution (adjusted only by bias and penalties).
 */
import type { TokenLogprob, TokenLogprobAlternative } from "../engine.ts";

/** The most negative log probability reported (OpenAI's floor for "practically impossible"). */
export const MIN_LOGPROB = -9999;

/** Natural log of a probability, floored at `MIN_LOGPROB` (never -Infinity, which JSON cannot carry). */
export function toLogprob(probability: number): number {
  if (!(probability > 0)) return MIN_LOGPROB;
  return Math.max(MIN_LOGPROB, Math.log(probability));
}

/** A token's text in context and its bytes. */
export type DescribeToken = (token: number, lastTokens: readonly number[]) => { text: string; bytes: number[] };

const byteTokenPattern = /^<0x([0-9A-Fa-f]{2})>$/;

/**
 * Describes tokens from the vocabulary: byte-fallback tokens (`<0xE2>`) are one raw byte whose
 * text alone is not valid UTF-8; any other token's bytes are the UTF-8 of its text in context
 * (so a SentencePiece word keeps its leading space).
 */
export function tokenDescriber(
  detokenize: (tokens: readonly number[], lastTokens: readonly number[]) => string,
  pieces: readonly string[] | undefined,
): DescribeToken {
  return (token, lastTokens) => {
    const text = detokenize([token], lastTokens);
    const byte = pieces?.[token]?.match(byteTokenPattern);
    if (byte) return { text, bytes: [Number.parseInt(byte[1]!, 16)] };
    return { text, bytes: [...Buffer.from(text, "utf8")] };
  };
}

/** `start`: where the token's text begins in the choice's decoded text (characters). */
type Entry = { logprob: TokenLogprob; start: number };

/**
 * Collects one choice's token log probabilities and hands each out with the text delta that
 * carries (the start of) its text, so streamed chunks pair text and tokens.
 */
export class ChoiceLogprobs {
  readonly #describe: DescribeToken;
  readonly #top: number;
  readonly #entries: Entry[] = [];

  constructor(describe: DescribeToken, top: number) {
    this.#describe = describe;
    this.#top = top;
  }

  /**
   * Records a generated token. `probability` is its probability; `alternatives` the distribution
   * sorted from likeliest (node-llama-cpp's order), needed only when top alternatives are asked
   * for; `start` where the token's text begins in the decoded text (the tokens of a character
   * split over several share its position).
   */
  record(token: number, probability: number, alternatives: ReadonlyMap<number, number> | undefined, lastTokens: readonly number[], start: number): void {
    const own = this.#describe(token, lastTokens);
    const topLogprobs: TokenLogprobAlternative[] = [];
    if (this.#top > 0 && alternatives !== undefined) {
      for (const [candidate, candidateProbability] of alternatives) {
        if (topLogprobs.length >= this.#top) break;
        const described = candidate === token ? own : this.#describe(candidate, lastTokens);
        topLogprobs.push({ token: described.text, logprob: toLogprob(candidateProbability), bytes: described.bytes });
      }
    }
    this.#entries.push({ logprob: { token: own.text, logprob: toLogprob(probability), bytes: own.bytes, topLogprobs }, start });
  }

  /** The recorded tokens whose text starts within the first `emittedLength` characters sent, not yet handed out. */
  take(emittedLength: number): TokenLogprob[] {
    let count = 0;
    while (count < this.#entries.length && this.#entries[count]!.start < emittedLength) count++;
    return this.#entries.splice(0, count).map((entry) => entry.logprob);
  }

  /** Every token not yet handed out (the generation ended without a stop sequence). */
  rest(): TokenLogprob[] {
    return this.#entries.splice(0).map((entry) => entry.logprob);
  }
}
