/**
 * The one Server-Sent Events writer: `data: {json}` events, comment keep-alives, `data: [DONE]`.
 * Writes stop quietly once the client has gone.
 */
import type { ServerResponse } from "node:http";

export class SseWriter {
  readonly #response: ServerResponse;

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
    if (this.open) this.#response.write(`data: ${JSON.stringify(payload)}\n\n`);
  }

  /** A comment line: keeps proxies and clients from timing out while nothing else is sent. */
  comment(text: string): void {
    if (this.open) this.#response.write(`: ${text}\n\n`);
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
