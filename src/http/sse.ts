/**
 * The one Server-Sent Events writer: `data: {json}` events, comment keep-alives, `data: [DONE]`.
 * Writes stop quietly once the client has gone. It honours backpressure: once the socket's
 * buffer is past its high-water mark (`congested`), the caller waits for the client to read
 * (`waitForRoom`) before it makes more, and cuts a client that has not read for the stall timeout.
 */
import type { ServerResponse } from "node:http";
import { performance } from "node:perf_hooks";
import { JsonText } from "../protocol/json-text.ts";

/** How a wait for the client to read ended: it read (`drained`), it went (`closed`), it did not read in time (`stalled`), or the caller gave up (`aborted`). */
export type RoomState = "drained" | "closed" | "stalled" | "aborted";

/** One event's text: its name line when it has one, its JSON `data` line, the blank line that ends it. */
function eventText(name: string | undefined, payload: unknown): string {
  const data = `data: ${payload instanceof JsonText ? payload.json : JSON.stringify(payload)}\n\n`;
  return name === undefined ? data : `event: ${name}\n${data}`;
}

/** The streams' keep-alive checks by period: one interval runs them all. */
const tickers = new Map<number, Set<(at: number) => void>>();

/**
 * Calls `check` every `periodMs` until the returned stop: one interval for every stream of the
 * same period, not one each (a timer made and cleared per stream was a cost of every streamed
 * request). An interval that finds no stream left stops; the next stream starts it again.
 */
function everyTick(periodMs: number, check: (at: number) => void): () => void {
  let checks = tickers.get(periodMs);
  if (checks === undefined) {
    const members = new Set<(at: number) => void>();
    checks = members;
    tickers.set(periodMs, members);
    const timer = setInterval(() => {
      if (members.size === 0) {
        clearInterval(timer);
        tickers.delete(periodMs);
        return;
      }
      const at = performance.now();
      for (const member of members) member(at);
    }, periodMs);
    // Streams keep the process alive; their keep-alive does not.
    timer.unref();
  }
  checks.add(check);
  return () => {
    checks.delete(check);
  };
}

/**
 * How long the headers and a stream's first events wait for the generation's first output to
 * leave with them (one write instead of two: a send costs more CPU than the events). Short beside
 * any model's time to a first token; what a client waits for is that token, which is not delayed.
 */
export const OPENING_WAIT_MS = 20;

export class SseWriter {
  readonly #response: ServerResponse;
  #lastWriteAt = performance.now();
  /** The last write found the buffer past its high-water mark, and no `drain` came since. */
  #congested = false;

  constructor(response: ServerResponse, headers: Record<string, string | number | string[] | undefined>) {
    this.#response = response;
    response.on("drain", () => {
      this.#congested = false;
    });
    response.writeHead(200, {
      ...headers,
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    });
    // The headers and what this turn writes (a chat stream's role chunk) wait for the
    // generation's first output, to leave with it in one write, `OPENING_WAIT_MS` at most; a
    // comment written meanwhile (a queued request's place) sends them at the turn's end.
    setImmediate(this.#endOpening);
  }

  /** In the turn that opened the stream: writes wait for `#endOpening`. */
  #opening = true;
  /** A comment was written while opening: it leaves at the opening turn's end. */
  #urgent = false;
  #openingTimer: NodeJS.Timeout | undefined;

  readonly #endOpening = (): void => {
    this.#opening = false;
    if (!this.open) return;
    if (this.#urgent) this.#flush();
    else this.#openingTimer = setTimeout(this.#flushLater, OPENING_WAIT_MS);
  };

  /** False once the client closed the connection or the stream was ended. */
  get open(): boolean {
    return !this.#response.destroyed && !this.#response.writableEnded;
  }

  /**
   * True while the bytes written but not yet taken by the client are past the socket's
   * high-water mark: write nothing more until `waitForRoom` says the client read them.
   */
  get congested(): boolean {
    return this.open && this.#congested;
  }

  /** Bytes written but not yet handed to the kernel (what a client that stops reading makes us hold). */
  get buffered(): number {
    return this.#response.writableLength + this.#pending.length;
  }

  /** Sends one event with a JSON payload. */
  data(payload: unknown): void {
    this.#write(eventText(undefined, payload));
  }

  /** Sends several events (named or not) in one write: a few small events cost one system call, not one each. */
  many(events: ReadonlyArray<readonly [name: string | undefined, payload: unknown]>): void {
    let text = "";
    for (const [name, payload] of events) text += eventText(name, payload);
    if (text !== "") this.#write(text);
  }

  /** Sends one named event (`event: name`) with a JSON payload; `name` is the caller's own constant, never client text. */
  event(name: string, payload: unknown): void {
    this.#write(eventText(name, payload));
  }

  /**
   * A comment line: keeps proxies and clients from timing out while nothing else is sent. Skipped
   * while the stream is congested: the client is not reading, and a comment would only grow the buffer.
   */
  comment(text: string): void {
    if (this.congested) return;
    this.#write(`: ${text}\n\n`);
    if (this.#opening) this.#urgent = true;
  }

  #write(text: string): void {
    if (!this.open) return;
    this.#pending += text;
    this.#lastWriteAt = performance.now();
    // Past the socket's high-water mark the client is behind: write now, so that `congested` says so.
    if (this.#pending.length >= this.#response.writableHighWaterMark) this.#flush();
    else if (!this.#opening) this.#schedule();
  }

  /**
   * What is written in one turn of the event loop (the headers; the events of one upstream read,
   * which reach here through promise jobs; the stream's end when it follows at once) leaves as one
   * string in one write, at the turn's end (`setImmediate`): each event would be a system call
   * otherwise (three buffers each, as chunked encoding frames it), and on loopback a send costs
   * more CPU than making the event.
   */
  #pending = "";
  #scheduled = false;

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(this.#flushLater);
  }

  readonly #flushLater = (): void => {
    this.#scheduled = false;
    if (this.open) this.#flush();
  };

  #flush(): void {
    if (this.#openingTimer !== undefined) {
      clearTimeout(this.#openingTimer);
      this.#openingTimer = undefined;
    }
    const text = this.#pending;
    this.#pending = "";
    if (text !== "") {
      if (!this.#response.write(text)) this.#congested = true;
    } else if (!this.#response.headersSent) this.#response.flushHeaders();
  }

  /**
   * Resolves once the stream has room again: at once when it is not congested, else when the
   * client has read the buffer (`drained`), has gone (`closed`), has not read it within
   * `stallMs` (`stalled`: the caller cuts the stream), or when `signal` aborts (`aborted`).
   */
  waitForRoom(stallMs: number, signal?: AbortSignal): Promise<RoomState> {
    if (!this.open) return Promise.resolve("closed");
    if (!this.#congested) return Promise.resolve("drained");
    if (signal?.aborted) return Promise.resolve("aborted");
    const response = this.#response;
    return new Promise((resolve) => {
      const done = (state: RoomState) => {
        clearTimeout(timer);
        response.off("drain", onDrain);
        response.off("close", onClose);
        signal?.removeEventListener("abort", onAbort);
        resolve(state);
      };
      const onDrain = () => done("drained");
      const onClose = () => done("closed");
      const onAbort = () => done("aborted");
      const timer = setTimeout(() => done("stalled"), stallMs);
      response.on("drain", onDrain);
      response.on("close", onClose);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /**
   * Sends a comment whenever the stream has been quiet for `idleMs`: while the request waits for
   * a slot, during a long prompt evaluation, or while text is held back. `text` says which.
   * Returns a function that stops it.
   */
  keepAlive(idleMs: number, text: () => string, event?: () => readonly [name: string, payload: unknown] | undefined): () => void {
    return everyTick(Math.max(1, Math.floor(idleMs / 2)), (at) => this.pulse(idleMs, text(), at, event?.()));
  }

  /**
   * One keep-alive check at time `at`: if nothing was written for `idleMs`, a comment, or `event`
   * when given (a dialect's `ping`; skipped while congested, as a comment is).
   */
  pulse(idleMs: number, text: string, at = performance.now(), event?: readonly [name: string, payload: unknown]): void {
    if (at - this.#lastWriteAt < idleMs) return;
    if (event === undefined) this.comment(text);
    else if (!this.congested) this.event(event[0], event[1]);
  }

  /** Sends `data: [DONE]` and ends the response (with what is still to be written, in one write). */
  done(): void {
    clearTimeout(this.#openingTimer);
    if (!this.open) return;
    const text = `${this.#pending}data: [DONE]\n\n`;
    this.#pending = "";
    this.#response.end(text);
  }

  /** Ends the response without `[DONE]` (after an error event). */
  end(): void {
    clearTimeout(this.#openingTimer);
    if (!this.open) return;
    const text = this.#pending;
    this.#pending = "";
    if (text === "") this.#response.end();
    else this.#response.end(text);
  }

  /** Drops the connection and whatever is still buffered for it (a client cut for not reading). */
  destroy(): void {
    clearTimeout(this.#openingTimer);
    this.#pending = "";
    this.#response.destroy();
  }
}
