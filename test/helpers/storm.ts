/**
 * A storm of chat completions whose clients leave at random moments: while queued, while
 * generating, or after the end. Seeded, so every run sends the same storm.
 */
import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";

/** A seeded pseudo-random number generator in [0, 1). */
export function seededRandom(seed: number): () => number {
  let state = seed;
  return () => (state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
}

export type StormOptions = {
  /** `…/v1` of the server. */
  baseURL: string;
  key: string;
  requests: number;
  seed: number;
  /** The most a request waits before it is sent, and after that before its client leaves. */
  maxStartDelayMs: number;
  maxCutAfterMs: number;
  /** The request body; `stream` is chosen at random. */
  body: (index: number, random: () => number) => Record<string, unknown>;
  /** Checks each answer the client read to the end. */
  check?: (answer: { status: number; text: string; stream: boolean }) => void;
};

/** Sends the storm; each outcome is the status the client read, or "cut" when it left first. */
export async function stormOfCutRequests(options: StormOptions): Promise<Array<number | "cut">> {
  const random = seededRandom(options.seed);
  return Promise.all(
    Array.from({ length: options.requests }, async (_, index) => {
      await delay(Math.floor(random() * options.maxStartDelayMs));
      const cutAfter = random() < 0.7 ? Math.floor(random() * options.maxCutAfterMs) : undefined;
      const stream = random() < 0.5;
      const body = { ...options.body(index, random), stream };
      const controller = new AbortController();
      const timer = cutAfter === undefined ? undefined : setTimeout(() => controller.abort(), cutAfter);
      try {
        const response = await fetch(`${options.baseURL}/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${options.key}` },
          body: JSON.stringify(body),
          signal: controller.signal,
        });
        const text = await response.text();
        options.check?.({ status: response.status, text, stream });
        return response.status;
      } catch (error) {
        assert.equal((error as Error).name, "AbortError", String(error));
        return "cut" as const;
      } finally {
        clearTimeout(timer);
      }
    }),
  );
}
