/** Where a stream's events go: the SSE writer, or a test's sink. */
import type { RoomState } from "../sse.ts";

export type ChunkSink = {
  /** One event with a JSON payload (`data: {…}`). */
  data(payload: unknown): void;
  /** One named event with a JSON payload (`event: name` then `data: {…}`), as the Responses API streams. */
  event(name: string, payload: unknown): void;
  /** Several events (each named or not) in one write to the socket: what one generation part made. */
  many(events: ReadonlyArray<readonly [name: string | undefined, payload: unknown]>): void;
  /** An SSE comment line (`: text`): read by no client, it keeps proxies from timing the stream out. */
  comment(text: string): void;
  /** Ends with `data: [DONE]`. */
  done(): void;
  /** Ends without `[DONE]` (after an error event, or a dialect that has no terminator line). */
  end(): void;
  /** Drops the connection (a client that stopped reading). */
  destroy(): void;
  /** True while the client has not read enough of what was sent. */
  readonly congested: boolean;
  /** Bytes sent and not yet read by the client. */
  readonly buffered: number;
  waitForRoom(stallMs: number, signal?: AbortSignal): Promise<RoomState>;
  /**
   * Sends keep-alive comments while nothing else is sent, or the event `event` gives when it gives
   * one (a dialect's `ping`); returns the stop.
   */
  keepAlive(idleMs: number, text: () => string, event?: () => readonly [name: string, payload: unknown] | undefined): () => void;
};
