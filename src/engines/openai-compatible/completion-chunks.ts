/**
 * The streamed chunks of a text completion, rewritten into the chat chunk shape the `ChunkReader`
 * reads, so that one reader (usage, finishes, running counts, error events) serves all three wires:
 *
 * - `/v1/completions` (vLLM, SGLang, llama-server, OpenAI): `choices[].text` becomes the delta's
 *   content, the legacy log probabilities (`tokens`, `token_logprobs`, `top_logprobs` as
 *   `{token: logprob}`) become chat's `logprobs.content` (llama-server sends that shape already);
 *   usage and the rest pass as they are.
 * - llama-server answers several prompts as one task each, one after another in the same stream:
 *   each task's finishing chunk carries that task's usage, and a `data: null` comes between tasks.
 *   Usage met on a finishing chunk is kept per choice and summed: the last finishing chunk carries
 *   the sum (what the reader takes as the final count); `null` is an empty chunk; running counts
 *   (`timings`, one task's) are dropped when there are several choices, so a stream cut short is
 *   estimated instead of billed one task's prompt.
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

type Counts = { prompt_tokens: number; completion_tokens: number; cached_tokens: number };

const tokens = (value: unknown): number => (typeof value === "number" && Number.isFinite(value) && value >= 0 ? value : 0);

/**
 * Sums the usage of finishing chunks that each carry one task's (see the file's comment): for a
 * request of several choices; one choice's usage passes as it is.
 */
function perTaskUsage(choices: number): (chunk: Json) => Json {
  const finished = new Map<number, Counts>();
  return (chunk) => {
    if (choices <= 1 || !Array.isArray(chunk.choices) || chunk.choices.length === 0) return chunk;
    const { timings: _running, usage, ...rest } = chunk;
    const ending = chunk.choices.filter((choice): choice is Json => isObject(choice) && typeof choice.finish_reason === "string" && choice.finish_reason !== "");
    if (!isObject(usage) || ending.length !== 1) return rest;
    const details = isObject(usage.prompt_tokens_details) ? usage.prompt_tokens_details : {};
    finished.set(typeof ending[0]!.index === "number" ? ending[0]!.index : 0, { prompt_tokens: tokens(usage.prompt_tokens), completion_tokens: tokens(usage.completion_tokens), cached_tokens: tokens(details.cached_tokens) });
    if (finished.size < choices) return rest;
    const sum = { prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0 };
    for (const counts of finished.values()) {
      sum.prompt_tokens += counts.prompt_tokens;
      sum.completion_tokens += counts.completion_tokens;
      sum.cached_tokens += counts.cached_tokens;
    }
    return { ...rest, usage: { prompt_tokens: sum.prompt_tokens, completion_tokens: sum.completion_tokens, prompt_tokens_details: { cached_tokens: sum.cached_tokens } } };
  };
}

/**
 * Reads one attempt's chunks of `wire`'s stream into the chat chunk shape (a chat chunk as it
 * is); `choices`: how many the request asked for; `perTask`: the upstream reports each prompt's
 * usage on its own finishing chunk (llama-server). Stateful: a new one per attempt.
 */
export function chatChunksOf(wire: UpstreamWire, choices: number, perTask: boolean): (chunk: unknown) => unknown {
  if (wire === "chat") return (chunk) => chunk;
  if (wire === "infill") return (chunk) => (isObject(chunk) ? fromInfillChunk(chunk) : chunk);
  const sum = perTask ? perTaskUsage(choices) : (chunk: Json) => chunk;
  return (chunk) => {
    // llama-server's separator between two prompts' tasks.
    if (chunk === null) return { choices: [] };
    return isObject(chunk) ? sum(fromCompletionChunk(chunk)) : chunk;
  };
}
