/**
 * Turns generated tokens into text deltas: detokenizes incrementally without splitting a
 * multi-byte character, and ends at a stop sequence without ever emitting (part of) it.
 */

export type Detokenize = (tokens: readonly number[], lastTokens: readonly number[]) => string;

/** How many earlier tokens give the detokenizer enough context (leading spaces, merges). */
const CONTEXT_TOKENS = 4;
/** A character split over more tokens than this is emitted as it is (replacement characters). */
const MAX_PENDING_TOKENS = 8;

export type TextStreamStep = {
  /** Text that is final and may be sent to the client (may be empty). */
  text: string;
  /** True when a stop sequence was found: generation must end, `text` is the last of it. */
  stopped: boolean;
};

export class TextStream {
  readonly #detokenize: Detokenize;
  readonly #stops: string[];
  readonly #longestStop: number;
  /** The last few tokens already turned into text: context for the detokenizer. */
  #decoded: number[] = [];
  /** Tokens whose text is incomplete (an unfinished UTF-8 sequence). */
  #pending: number[] = [];
  /** Text decoded but held back because it may be the start of a stop sequence. */
  #held = "";
  #stopped = false;
  /** The stop sequence found, once `stopped`. */
  #stoppedBy: string | undefined;
  /** Characters decoded so far (sent, held back, or cut at a stop sequence). */
  #produced = 0;

  /**
   * `context`: tokens the first token is read after (never sent): a text completion's first token
   * keeps the leading space a SentencePiece tokenizer drops from text that starts with it.
   */
  constructor(detokenize: Detokenize, stops: readonly string[], context: readonly number[] = []) {
    this.#detokenize = detokenize;
    this.#decoded = context.slice(-CONTEXT_TOKENS);
    this.#stops = stops.filter((stop) => stop.length > 0);
    this.#longestStop = Math.max(0, ...this.#stops.map((stop) => stop.length));
  }

  get stopped(): boolean {
    return this.#stopped;
  }

  /** The stop sequence that ended the stream (as given, the earliest in the text), once `stopped`. */
  get stoppedBy(): string | undefined {
    return this.#stoppedBy;
  }

  /**
   * Characters of text the tokens pushed so far decoded to, held-back text included; tokens of
   * an unfinished character do not count yet. The next token's text starts here.
   */
  get produced(): number {
    return this.#produced;
  }

  /** Feeds one generated token. */
  push(token: number): TextStreamStep {
    if (this.#stopped) return { text: "", stopped: true };
    this.#pending.push(token);
    const text = this.#detokenize(this.#pending, this.#decoded);
    if (text.endsWith("\uFFFD") && this.#pending.length < MAX_PENDING_TOKENS) return { text: "", stopped: false };
    this.#commitPending();
    this.#produced += text.length;
    return this.#accept(text);
  }

  /** Ends the stream: releases whatever was held back (no stop sequence can complete now). */
  flush(): string {
    if (this.#stopped) return "";
    let text = this.#held;
    if (this.#pending.length > 0) {
      const pending = this.#detokenize(this.#pending, this.#decoded);
      text += pending;
      this.#produced += pending.length;
      this.#commitPending();
    }
    this.#held = "";
    // A stop sequence may still complete inside the flushed tail.
    const found = this.#findStop(text);
    if (found !== undefined) {
      this.#stop(found.stop);
      return text.slice(0, found.index);
    }
    return text;
  }

  #commitPending(): void {
    this.#decoded = [...this.#decoded, ...this.#pending].slice(-CONTEXT_TOKENS);
    this.#pending = [];
  }

  #accept(text: string): TextStreamStep {
    const buffer = this.#held + text;
    const found = this.#findStop(buffer);
    if (found !== undefined) {
      this.#held = "";
      this.#stop(found.stop);
      return { text: buffer.slice(0, found.index), stopped: true };
    }
    const keep = this.#partialStopSuffix(buffer);
    this.#held = buffer.slice(buffer.length - keep);
    return { text: buffer.slice(0, buffer.length - keep), stopped: false };
  }

  #stop(stop: string): void {
    this.#stopped = true;
    this.#stoppedBy = stop;
  }

  /** The earliest stop sequence in `text` and where it starts (at a tie, the first given); undefined when none is. */
  #findStop(text: string): { index: number; stop: string } | undefined {
    let earliest: { index: number; stop: string } | undefined;
    for (const stop of this.#stops) {
      const index = text.indexOf(stop);
      if (index !== -1 && (earliest === undefined || index < earliest.index)) earliest = { index, stop };
    }
    return earliest;
  }

  /** Length of the longest suffix of `text` that is a proper prefix of a stop sequence. */
  #partialStopSuffix(text: string): number {
    const limit = Math.min(text.length, this.#longestStop - 1);
    for (let length = limit; length > 0; length--) {
      const suffix = text.slice(text.length - length);
      if (this.#stops.some((stop) => stop.startsWith(suffix))) return length;
    }
    return 0;
  }
}
