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
 * The events of an SSE byte stream, in order. Ends when the bytes end; an event not closed by a
 * blank line before the end is still given (a stream cut mid-event loses nothing it delivered
 * whole), unless it has no data. Throws `SseProtocolError` past the limits.
 */
export async function* decodeServerSentEvents(body: AsyncIterable<Uint8Array>, options: SseDecoderOptions = {}): AsyncGenerator<ServerSentEvent> {
  const maxLine = options.maxLineLength ?? DEFAULT_MAX_SSE_LINE;
  const maxEvent = options.maxEventLength ?? DEFAULT_MAX_SSE_LINE;
  const decoder = new TextDecoder("utf-8");
  let buffer = "";
  // Where the search for the next line end resumes: a long line arriving in small pieces is
  // scanned once, not once per piece.
  let scanned = 0;
  let data: string[] = [];
  let dataLength = 0;
  let event: string | undefined;
  let sawField = false;

  const take = (line: string): ServerSentEvent | undefined => {
    if (line === "") {
      const complete = sawField && data.length > 0 ? { data: data.join("\n"), ...(event !== undefined ? { event } : {}) } : undefined;
      data = [];
      dataLength = 0;
      event = undefined;
      sawField = false;
      return complete;
    }
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    sawField = true;
    if (field === "data") {
      dataLength += value.length + 1;
      if (dataLength > maxEvent) throw new SseProtocolError(`The upstream sent an event larger than ${maxEvent} characters.`);
      data.push(value);
    } else if (field === "event") {
      event = value;
    }
    // `id` and `retry` mean nothing to a one-shot stream; unknown fields are ignored, as the spec says.
    return undefined;
  };

  // Lines are cut out of `buffer` from `start` on; the consumed head is dropped once per piece.
  let start = 0;
  const lines = function* (final: boolean): Generator<string> {
    for (;;) {
      let end = -1;
      for (let index = Math.max(scanned, start); index < buffer.length; index++) {
        const code = buffer.charCodeAt(index);
        if (code === 10 || code === 13) {
          end = index;
          break;
        }
      }
      if (end === -1) {
        scanned = buffer.length;
        if (buffer.length - start > maxLine) throw new SseProtocolError(`The upstream sent a line longer than ${maxLine} characters.`);
        const rest = buffer.slice(start);
        buffer = final ? "" : rest;
        scanned -= start;
        start = 0;
        if (final) {
          scanned = 0;
          if (rest.length > 0) yield rest;
        }
        return;
      }
      // A CR at the end of what arrived may be the first half of a CRLF: wait for the next piece.
      if (buffer.charCodeAt(end) === 13 && end === buffer.length - 1 && !final) {
        buffer = buffer.slice(start);
        scanned = end - start;
        start = 0;
        return;
      }
      const line = buffer.slice(start, end);
      start = end + (buffer.charCodeAt(end) === 13 && buffer.charCodeAt(end + 1) === 10 ? 2 : 1);
      scanned = start;
      if (line.length > maxLine) throw new SseProtocolError(`The upstream sent a line longer than ${maxLine} characters.`);
      yield line;
    }
  };

  for await (const piece of body) {
    buffer += decoder.decode(piece, { stream: true });
    for (const line of lines(false)) {
      const complete = take(line);
      if (complete !== undefined) yield complete;
    }
  }
  buffer += decoder.decode();
  for (const line of lines(true)) {
    const complete = take(line);
    if (complete !== undefined) yield complete;
  }
  const last = take("");
  if (last !== undefined) yield last;
}
