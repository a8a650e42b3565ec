/**
 * The benchmark's HTTP client: one streaming chat completion through the official `openai`
 * SDK, timed from sending the request. Runs in the benchmark's own thread, or as a worker
 * thread (`--client thread`) so that parsing the stream does not share the server's event loop.
 */
import { parentPort, workerData } from "node:worker_threads";
import { performance } from "node:perf_hooks";
import OpenAI from "openai";

export type StreamRequest = { model: string; messages: Array<{ role: string; content: string }>; maxTokens: number };
export type StreamResult = { ttftMs: number; totalMs: number; completionTokens: number; text: string };

export function streamClient(baseURL: string, apiKey: string): (request: StreamRequest) => Promise<StreamResult> {
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
  return async ({ model, messages, maxTokens }) => {
    const started = performance.now();
    const stream = await client.chat.completions.create({
      model,
      messages: messages.map((message) => ({ role: message.role as "user", content: message.content })),
      stream: true,
      stream_options: { include_usage: true },
      temperature: 0,
      max_tokens: maxTokens,
    });
    let firstAt: number | undefined;
    let completionTokens: number | undefined;
    let text = "";
    for await (const chunk of stream) {
      const content = chunk.choices[0]?.delta.content;
      if (content) {
        firstAt ??= performance.now();
        text += content;
      }
      if (chunk.usage) completionTokens = chunk.usage.completion_tokens;
    }
    const endedAt = performance.now();
    if (completionTokens === undefined) throw new Error("the stream ended without a usage chunk");
    return { ttftMs: (firstAt ?? endedAt) - started, totalMs: endedAt - started, completionTokens, text };
  };
}

// As a worker thread: answer each { id, request } with { id, result } or { id, error }.
if (parentPort !== null && (workerData as { streamClient?: boolean } | undefined)?.streamClient === true) {
  const port = parentPort;
  const { baseURL, apiKey } = workerData as { baseURL: string; apiKey: string };
  const run = streamClient(baseURL, apiKey);
  port.on("message", ({ id, request }: { id: number; request: StreamRequest }) => {
    run(request).then(
      (result) => port.postMessage({ id, result }),
      (error: unknown) => port.postMessage({ id, error: String(error) }),
    );
  });
}
