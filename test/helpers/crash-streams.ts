/**
 * Streams followed the way a client sees them, for the `kill -9` tests and benchmarks: how many
 * content chunks (tokens) each delivered, and whether it got `[DONE]`; and an upstream that
 * streams at its own pace, so that timing is the upstream's, not the gateway's CPU's.
 */
import type http from "node:http";
import { setTimeout as delay } from "node:timers/promises";
import { FaultUpstream } from "./fault-upstream.ts";

/** One request as its client saw it. */
export type Seen = {
  requestId: string;
  status: number;
  /** Content chunks received. */
  delivered: number;
  /** Whether `[DONE]` came. */
  done: boolean;
  /** `performance.now()` when the last chunk before `[DONE]` came, and when `[DONE]` did. */
  lastChunkAt?: number;
  doneAt?: number;
  /** Resolves when the connection ends. */
  ended: Promise<void>;
  /** A refusal's error code and `retry-after`. */
  code?: string;
  retryAfter?: string | null;
};

/** Whether an SSE `data: {chunk}` event carries content (a delivered token). */
export function carriesContent(event: string): boolean {
  const chunk = JSON.parse(event.slice(6)) as { choices?: Array<{ delta?: { content?: string } }> };
  return Boolean(chunk.choices?.[0]?.delta?.content);
}

/** Calls `onEvent` with each SSE event of `response` as it arrives, until the connection ends (or is reset: a killed server). */
export async function forEachSseEvent(response: Response, onEvent: (event: string) => void): Promise<void> {
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        onEvent(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
      }
    }
  } catch {
    // The server died: the connection is reset.
  }
}

/** Sends a streamed request and follows it to its end, counting content chunks (the client's count of delivered tokens). */
export async function send(url: string, key: string, model: string, maxTokens: number, index: number): Promise<Seen> {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body: JSON.stringify({ model, messages: [{ role: "user", content: `Go ${index}` }], max_tokens: maxTokens, stream: true }),
  });
  const seen: Seen = { requestId: response.headers.get("x-request-id") ?? "", status: response.status, delivered: 0, done: false, ended: Promise.resolve() };
  if (response.status !== 200) {
    const body = (await response.json()) as { error?: { code?: string } };
    seen.code = body.error?.code;
    seen.retryAfter = response.headers.get("retry-after");
    return seen;
  }
  seen.ended = forEachSseEvent(response, (event) => {
    if (event === "data: [DONE]") {
      seen.done = true;
      seen.doneAt = performance.now();
    }
    if (!event.startsWith("data: {")) return;
    seen.lastChunkAt = performance.now();
    if (carriesContent(event)) seen.delivered++;
  });
  return seen;
}

/**
 * An upstream that streams one content chunk every `pace` ms until `max_tokens`, then finishes:
 * the pace is the upstream's, whatever the gateway's CPU does.
 */
export async function pacedUpstream(paceMs: number): Promise<FaultUpstream> {
  return FaultUpstream.start({
    model: "paced",
    routes: {
      "POST /v1/chat/completions": (body: unknown, response: http.ServerResponse) => {
        const limits = body as { max_tokens?: number; max_completion_tokens?: number };
        const maxTokens = Number(limits.max_completion_tokens ?? limits.max_tokens ?? 16);
        const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
          id: "chatcmpl-paced",
          object: "chat.completion.chunk",
          created: 0,
          model: "paced",
          choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
        });
        response.writeHead(200, { "content-type": "text/event-stream" });
        const write = (payload: unknown) => response.write(`data: ${typeof payload === "string" ? payload : JSON.stringify(payload)}\n\n`);
        write(chunk({ role: "assistant", content: "" }));
        void (async () => {
          for (let sent = 0; sent < maxTokens; sent++) {
            await delay(paceMs);
            if (response.destroyed) return;
            write(chunk({ content: ` w${sent}` }));
          }
          write(chunk({}, "length"));
          write("[DONE]");
          response.end();
        })();
      },
    },
  });
}

