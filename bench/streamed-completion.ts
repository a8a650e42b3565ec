/**
 * For the benchmarks that call llama-server and Turnpike side by side: one streamed chat
 * completion timed on the client side from the raw SSE (the same parser for every side), the
 * end-of-text token a llama-server names, and a median.
 */
import { performance } from "node:perf_hooks";
import { request, type Agent } from "undici";

export type StreamTarget = { origin: string; headers: Record<string, string> };

/** One stream as the client saw it. */
export type StreamedCompletion = {
  /** Request sent → first content chunk. */
  ttftMs: number;
  /** (completion tokens − 1) ÷ (last content chunk − first content chunk). */
  decodeTokensPerSecond: number;
  totalMs: number;
  completionTokens: number;
  finishReason: string | undefined;
  text: string;
};

export const median = (values: number[]): number => {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (sorted.length === 0) return NaN;
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
};

/** The end-of-text token's id, from llama-server's `/props` and `/tokenize` (special tokens parsed). */
export async function endOfTextToken(llamaServerUrl: string): Promise<number> {
  const props = (await (await fetch(`${llamaServerUrl}/props`)).json()) as { eos_token?: string };
  if (typeof props.eos_token !== "string" || props.eos_token === "") throw new Error("llama-server's /props names no eos_token");
  const response = await fetch(`${llamaServerUrl}/tokenize`, { method: "POST", body: JSON.stringify({ content: props.eos_token, add_special: false, parse_special: true }) });
  const { tokens } = (await response.json()) as { tokens: number[] };
  if (tokens.length !== 1) throw new Error(`eos_token ${JSON.stringify(props.eos_token)} is not one token: ${JSON.stringify(tokens)}`);
  return tokens[0]!;
}

/**
 * Sends `body` (a streamed chat completion with `include_usage`) and times it. `reset` closes the
 * connection after the request, for sides that take turns: a kept-alive connection may be closed
 * by the server's idle timeout just as the next request goes out on it.
 */
export async function streamCompletion(agent: Agent, target: StreamTarget, body: Record<string, unknown>, options: { reset?: boolean; timeoutMs?: number } = {}): Promise<StreamedCompletion> {
  const started = performance.now();
  const timeout = options.timeoutMs ?? 60_000;
  const response = await request(`${target.origin}/v1/chat/completions`, {
    method: "POST",
    dispatcher: agent,
    headers: { "content-type": "application/json", ...target.headers },
    body: JSON.stringify(body),
    headersTimeout: timeout,
    bodyTimeout: timeout,
    reset: options.reset ?? false,
  });
  if (response.statusCode !== 200) throw new Error(`${target.origin}: ${response.statusCode} ${await response.body.text()}`);
  let firstAt: number | undefined;
  let lastAt: number | undefined;
  let completionTokens: number | undefined;
  let finishReason: string | undefined;
  let text = "";
  let buffered = "";
  for await (const piece of response.body) {
    const now = performance.now();
    buffered += piece.toString();
    let end: number;
    while ((end = buffered.indexOf("\n\n")) !== -1) {
      const event = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const chunk = JSON.parse(line.slice(6)) as {
          choices?: Array<{ delta?: { content?: string | null }; finish_reason?: string | null }>;
          usage?: { completion_tokens: number } | null;
        };
        const choice = chunk.choices?.[0];
        if (typeof choice?.delta?.content === "string" && choice.delta.content !== "") {
          firstAt ??= now;
          lastAt = now;
          text += choice.delta.content;
        }
        if (choice?.finish_reason) finishReason = choice.finish_reason;
        if (chunk.usage) completionTokens = chunk.usage.completion_tokens;
      }
    }
  }
  const endedAt = performance.now();
  if (completionTokens === undefined) throw new Error(`${target.origin}: the stream ended without a usage chunk`);
  if (firstAt === undefined || lastAt === undefined || lastAt === firstAt) throw new Error(`${target.origin}: fewer than two content chunks`);
  return {
    ttftMs: firstAt - started,
    decodeTokensPerSecond: (completionTokens - 1) / ((lastAt - firstAt) / 1000),
    totalMs: endedAt - started,
    completionTokens,
    finishReason,
    text,
  };
}
