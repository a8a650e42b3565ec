/**
 * Server-sent events from an upstream's response body: bytes in, one event per blank line out.
 * Lenient as the SSE spec asks (LF, CR or CRLF line ends, `:` comments, `event:`/`id:`/`retry:`
 * lines, data spread over several `data:` lines, a missing space after the colon) and bounded: a
 * line or an event larger than the limit is a protocol error, never unbounded memory.
 */

/** One event: its `data:` lines joined with `\n`, and its `event:` name when it had one. */
export type ServerSentEvent = { data: string; event?: string };

export type SseDecoderOptions = {
  /** The longest line accepted, in UTF-16 code units (about bytes for JSON); default 8 Mi. */
  maxLineLength?: number;
  /** The largest event accepted (its data lines together), same unit; default 8 Mi. */
  maxEventLength?: number;
};

/** 8 Mi characters: far above any chunk an upstream sends (a chunk is a token or a tool call). */
export const DEFAULT_MAX_SSE_LINE = 8 * 1024 * 1024;

/** The upstream's stream is not valid SSE, or one of its lines or events is too large. */
export class SseProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SseProtocolError";
  }
}

/**
 * The events of an SSE byte stream, in order, decoded as the pieces come (`push`), with no promise
 * per event: an upstream's whole answer often arrives in one piece. `end` gives what the last
 * piece left open: an event not closed by a blank line before the end is still given (a stream
 * cut mid-event loses nothing it delivered whole), unless it has no data. Throws
 * `SseProtocolError` past the limits.
 */
export class SseDecoder {
  readonly #maxLine: number;
  readonly #maxEvent: number;
  readonly #decoder = new TextDecoder("utf-8");
  #buffer = "";
  /** Where lines are cut from: the consumed head is dropped once per piece. */
  #start = 0;
  /** Where the search for the next line end resumes: a long line arriving in small pieces is scanned once, not once per piece. */
  #scanned = 0;
  #data: string[] = [];
  #dataLength = 0;
  #event: string | undefined;
  #sawField = false;

  constructor(options: SseDecoderOptions = {}) {
    this.#maxLine = options.maxLineLength ?? DEFAULT_MAX_SSE_LINE;
    this.#maxEvent = options.maxEventLength ?? DEFAULT_MAX_SSE_LINE;
  }

  /** The events that `piece` completes. */
  push(piece: Uint8Array): ServerSentEvent[] {
    this.#buffer += this.#decoder.decode(piece, { stream: true });
    const events: ServerSentEvent[] = [];
    this.#lines(false, events);
    return events;
  }

  /** The bytes ended: the events still open. */
  end(): ServerSentEvent[] {
    this.#buffer += this.#decoder.decode();
    const events: ServerSentEvent[] = [];
    this.#lines(true, events);
    const last = this.#take("");
    if (last !== undefined) events.push(last);
    return events;
  }

  #take(line: string): ServerSentEvent | undefined {
    if (line === "") {
      const complete = this.#sawField && this.#data.length > 0 ? { data: this.#data.length === 1 ? this.#data[0]! : this.#data.join("\n"), ...(this.#event !== undefined ? { event: this.#event } : {}) } : undefined;
      this.#data = [];
      this.#dataLength = 0;
      this.#event = undefined;
      this.#sawField = false;
      return complete;
    }
    if (line.charCodeAt(0) === 58 /* : */) return undefined;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32 /* space */) value = value.slice(1);
    this.#sawField = true;
    if (field === "data") {
      this.#dataLength += value.length + 1;
      if (this.#dataLength > this.#maxEvent) throw new SseProtocolError(`The upstream sent an event larger than ${this.#maxEvent} characters.`);
      this.#data.push(value);
    } else if (field === "event") {
      this.#event = value;
    }
    // `id` and `retry` mean nothing to a one-shot stream; unknown fields are ignored, as the spec says.
    return undefined;
  }

  /** Cuts the complete lines out of the buffer (all of it when `final`), taking each; completed events go to `events`. */
  #lines(final: boolean, events: ServerSentEvent[]): void {
    const buffer = this.#buffer;
    let start = this.#start;
    // The next CR at or after where the search is: searched again only once passed (-1: none left
    // in this buffer), so a piece of many lines is scanned for CRs once, not once per line.
    let nextCr = -2;
    for (;;) {
      // A line ends at LF, CR or CRLF; indexOf (native) finds the next of each.
      const from = Math.max(this.#scanned, start);
      let end = buffer.indexOf("\n", from);
      if (nextCr !== -1 && nextCr < from) nextCr = buffer.indexOf("\r", from);
      if (nextCr !== -1 && (end === -1 || nextCr < end)) end = nextCr;
      if (end === -1) {
        if (buffer.length - start > this.#maxLine) throw new SseProtocolError(`The upstream sent a line longer than ${this.#maxLine} characters.`);
        const rest = start === 0 ? buffer : buffer.slice(start);
        this.#buffer = final ? "" : rest;
        this.#scanned = final ? 0 : rest.length;
        this.#start = 0;
        if (final && rest.length > 0) {
          const complete = this.#take(rest);
          if (complete !== undefined) events.push(complete);
        }
        return;
      }
      // A CR at the end of what arrived may be the first half of a CRLF: wait for the next piece.
      if (buffer.charCodeAt(end) === 13 && end === buffer.length - 1 && !final) {
        this.#buffer = buffer.slice(start);
        this.#scanned = end - start;
        this.#start = 0;
        return;
      }
      const line = buffer.slice(start, end);
      start = end + (buffer.charCodeAt(end) === 13 && buffer.charCodeAt(end + 1) === 10 ? 2 : 1);
      this.#scanned = start;
      if (line.length > this.#maxLine) throw new SseProtocolError(`The upstream sent a line longer than ${this.#maxLine} characters.`);
      const complete = this.#take(line);
      if (complete !== undefined) events.push(complete);
    }
  }
}

/** The events of an SSE byte stream, in order, as `SseDecoder` gives them. */
export async function* decodeServerSentEvents(body: AsyncIterable<Uint8Array>, options: SseDecoderOptions = {}): AsyncGenerator<ServerSentEvent> {
  const decoder = new SseDecoder(options);
  for await (const piece of body) yield* decoder.push(piece);
  yield* decoder.end();
}
