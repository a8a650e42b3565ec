/**
 * The one Server-Sent Events writer: `data: {json}` events, comment keep-alives, `data: [DONE]`.
 * Writes stop quietly once the client has gone.
 */
import type { ServerResponse } from "node:http";
import { performance } from "node:perf_hooks";

export class SseWriter {
  readonly #response: ServerResponse;
  #lastWriteAt = performance.now();

  constructor(response: ServerResponse, headers: Record<string, string | number | string[] | undefined>) {
    this.#response = response;
    response.writeHead(200, {
      ...headers,
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    });
    response.flushHeaders();
  }

  /** False once the client closed the connection or the stream was ended. */
  get open(): boolean {
    return !this.#response.destroyed && !this.#response.writableEnded;
  }

  /** Sends one event with a JSON payload. */
  data(payload: unknown): void {
    this.#write(`data: ${JSON.stringify(payload)}\n\n`);
  }

  /** A comment line: keeps proxies and clients from timing out while nothing else is sent. */
  comment(text: string): void {
    this.#write(`: ${text}\n\n`);
  }

  #write(text: string): void {
    if (!this.open) return;
    this.#response.write(text);
    this.#lastWriteAt = performance.now();
  }

  /**
   * Sends a comment whenever the stream has been quiet for `idleMs`: while the request waits for
   * a slot, during a long prompt evaluation, or while text is held back. `text` says which.
   * Returns a function that stops it.
   */
  keepAlive(idleMs: number, text: () => string): () => void {
    const timer = setInterval(() => this.pulse(idleMs, text()), Math.max(1, Math.floor(idleMs / 2)));
    return () => clearInterval(timer);
  }

  /** One keep-alive check at time `at`: a comment if nothing was written for `idleMs`. */
  pulse(idleMs: number, text: string, at = performance.now()): void {
    if (at - this.#lastWriteAt >= idleMs) this.comment(text);
  }

  /** Sends `data: [DONE]` and ends the response. */
  done(): void {
    if (!this.open) return;
    this.#response.end("data: [DONE]\n\n");
  }

  /** Ends the response without `[DONE]` (after an error event). */
  end(): void {
    if (this.open) this.#response.end();
  }
}
