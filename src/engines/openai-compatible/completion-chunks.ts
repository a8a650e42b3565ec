/**
 * The streamed chunks of a text completion, rewritten into the chat chunk shape the `ChunkReader`
 * reads, so that one reader (usage, finishes, running counts, error events) serves all three wires:
 *
 * - `/v1/completions` (vLLM, SGLang, llama-server, OpenAI): `choices[].text` becomes the delta's
 *   content, the legacy log probabilities (`tokens`, `token_logprobs`, `top_logprobs` as
 *   `{token: logprob}`) become chat's `logprobs.content` (llama-server sends that shape already);
 *   usage and the rest pass as they are.
 * - llama-server's native `/infill` stream: `{content, stop, stop_type, tokens_evaluated,
 *   tokens_predicted, timings, completion_probabilities}` becomes one choice's delta; its last
 *   chunk (`stop: true`) finishes it (`stop_type` `limit` is `length`) and carries the usage.
 */
import type { UpstreamWire } from "./completion-request.ts";

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value);

/** Legacy log probabilities → chat's `{content: [{token, logprob, top_logprobs}]}`. */
function chatLogprobs(legacy: unknown): Json | undefined {
  // llama-server's `/v1/completions` sends chat's shape already.
  if (isObject(legacy) && Array.isArray(legacy.content)) return legacy;
  if (!isObject(legacy) || !Array.isArray(legacy.tokens)) return undefined;
  const logprobs = Array.isArray(legacy.token_logprobs) ? legacy.token_logprobs : [];
  const tops = Array.isArray(legacy.top_logprobs) ? legacy.top_logprobs : [];
  const content = legacy.tokens.map((token, index) => {
    const top = tops[index];
    return {
      token: typeof token === "string" ? token : "",
      logprob: logprobs[index] ?? null,
      top_logprobs: isObject(top) ? Object.entries(top).map(([text, logprob]) => ({ token: text, logprob })) : [],
    };
  });
  return { content };
}

function fromCompletionChunk(chunk: Json): Json {
  if (!Array.isArray(chunk.choices)) return chunk;
  const choices = chunk.choices.map((choice: unknown) => {
    if (!isObject(choice)) return choice;
    const { text, logprobs, ...rest } = choice;
    const converted = chatLogprobs(logprobs);
    return { ...rest, delta: { content: typeof text === "string" ? text : "" }, ...(converted !== undefined ? { logprobs: converted } : {}) };
  });
  return { ...chunk, choices };
}

/** llama-server's native probabilities (`completion_probabilities`) are chat's `logprobs.content` already, `id`s aside. */
function fromInfillChunk(chunk: Json): Json {
  if (chunk.error !== undefined) return chunk;
  const finished = chunk.stop === true;
  const content = typeof chunk.content === "string" ? chunk.content : "";
  const probabilities = Array.isArray(chunk.completion_probabilities) ? { content: chunk.completion_probabilities } : undefined;
  const choice: Json = {
    index: 0,
    delta: { content },
    finish_reason: finished ? (chunk.stop_type === "limit" ? "length" : "stop") : null,
    ...(probabilities !== undefined ? { logprobs: probabilities } : {}),
  };
  const usage = finished ? { prompt_tokens: chunk.tokens_evaluated, completion_tokens: chunk.tokens_predicted } : undefined;
  return { choices: [choice], ...(usage !== undefined ? { usage } : {}), ...(isObject(chunk.timings) ? { timings: chunk.timings } : {}) };
}

/** A parsed chunk of `wire`'s stream in the chat chunk shape (a chat chunk as it is). */
export function asChatChunk(wire: UpstreamWire, chunk: unknown): unknown {
  if (wire === "chat" || !isObject(chunk)) return chunk;
  return wire === "completions" ? fromCompletionChunk(chunk) : fromInfillChunk(chunk);
}
