/**
 * A text completion (`GenerationRequest.completion`) for an upstream: where it goes and with what
 * body. A plain completion goes to the member's `/v1/completions` (all prompts in one request, as
 * OpenAI takes them: choice `prompt × n + j`). Fill-in-the-middle goes:
 * - to a llama-server member's `/infill` (`input_prefix` = the prompt, `input_suffix` = the
 *   suffix, and `/infill`'s own `input_extra` and `prompt` as they came), which lays out the
 *   model's own FIM tokens; one prompt per request;
 * - to vLLM and SGLang (which take no `suffix`) as a plain prompt built from the entry's `fim`
 *   token texts: prefix token, prompt, the middle's start (`/infill`'s `prompt`), suffix token,
 *   suffix, middle token (llama-server's order; the server parses the token texts as the special
 *   tokens they are). `/infill`'s extra files are refused there: the entry names no repository
 *   tokens, and llama-server's token-exact cut of them cannot be made without the tokenizer;
 * - nowhere else (`fillInTheMiddle` is false there, so the dialect refused it already).
 * The engine gives an `echo` itself (the prompt's text, before the first part of each choice):
 * no kind echoes the same way, and llama-server not at all.
 */
import type { GenerationRequest, RunningGeneration, StreamPart, TextCompletion } from "../engine.ts";
import { UnsupportedParameterError } from "../../protocol/errors.ts";
import type { UpstreamKind } from "./config-schema.ts";
import { writeSampling, writeVendorFields } from "./request-body.ts";
import type { Dialect } from "./dialects.ts";

/** The FIM token texts of a model entry (`fim`). */
export type FimTokenTexts = { prefix: string; suffix: string; middle: string };

/** Which upstream endpoint a generation posts to, and so how its stream reads. */
export type UpstreamWire = "chat" | "completions" | "infill";

/** Whether a kind serves fill-in-the-middle, given the entry's FIM tokens. */
export function servesFillInTheMiddle(kind: UpstreamKind | undefined, fim: FimTokenTexts | undefined): boolean {
  if (kind === "llama-server") return true;
  return (kind === "vllm" || kind === "sglang") && fim !== undefined;
}

/** The endpoint a text completion goes to on this kind. */
export function completionWire(completion: TextCompletion, kind: UpstreamKind | undefined): UpstreamWire {
  return completion.suffix !== undefined && kind === "llama-server" ? "infill" : "completions";
}

/**
 * Refuses what the kind cannot serve of a text completion, naming the field: an echo of token
 * prompts (the engine echoes text only) or with the prompt's log probabilities, `max_tokens` 0,
 * several prompts to llama-server's `/infill` (one each), token prompts in a FIM prompt built from
 * token texts.
 */
export function checkCompletionForKind(request: GenerationRequest, wire: UpstreamWire, where: string): void {
  const completion = request.completion!;
  const tokens = completion.prompts.some((prompt) => "tokens" in prompt);
  if (completion.echo === true && request.logprobs !== undefined) {
    throw new UnsupportedParameterError(`'echo' with 'logprobs' (the prompt tokens' log probabilities) is not supported by ${where}; the embedded engine serves it.`, "echo");
  }
  // llama-server's `/infill` takes `n_predict` 0 (the prompt alone, an editor's cache warm-up).
  if (request.maxTokens === 0 && wire !== "infill") throw new UnsupportedParameterError(`'max_tokens' 0 is not supported by ${where}; the embedded engine serves it.`, "max_tokens");
  if (completion.echo === true && tokens) {
    throw new UnsupportedParameterError(`'echo' of token prompts is not supported by ${where}: send the prompt as text to have it echoed.`, "echo");
  }
  if (wire === "infill" && completion.prompts.length > 1) {
    throw new UnsupportedParameterError(`Fill-in-the-middle takes one prompt at a time on ${where} (llama-server's /infill): send one request per prompt.`, "prompt");
  }
  if (wire === "completions" && completion.extra !== undefined && completion.extra.length > 0) {
    throw new UnsupportedParameterError(`Extra files ('input_extra') are not supported by ${where}: only the embedded engine and llama-server members lay them out. Leave 'input_extra' out, or empty.`, "input_extra");
  }
  if (wire === "completions" && completion.suffix !== undefined && tokens) {
    throw new UnsupportedParameterError(`Fill-in-the-middle with token prompts is not supported by ${where}: send the prompt as text.`, "prompt");
  }
}

/** The `prompt` field: the prompts as OpenAI takes them (one string or token array alone, else an array of them). */
function wirePrompt(completion: TextCompletion, fim: FimTokenTexts | undefined): unknown {
  const prompts = completion.prompts.map((prompt) => {
    if ("tokens" in prompt) return prompt.tokens;
    if (completion.suffix === undefined || fim === undefined) return prompt.text;
    return `${fim.prefix}${prompt.text}${completion.middle ?? ""}${fim.suffix}${completion.suffix}${fim.middle}`;
  });
  return prompts.length === 1 ? prompts[0] : prompts;
}

/** The sampling and vendor fields every body carries (as a chat body carries them). */
function samplingFields(request: GenerationRequest, dialect: Dialect, body: Record<string, unknown>): void {
  writeSampling(request, dialect, body);
  writeVendorFields(request, dialect, body);
}

/**
 * The body of a text completion for `wire` (see the file's comment); `maxTokens` per choice.
 * Always streamed, with usage asked for (llama-server's `/infill` reports its counts at the end
 * and, with `timings_per_token`, as it goes).
 */
export function buildCompletionBody(request: GenerationRequest, options: { dialect: Dialect; model: string; maxTokens: number; wire: UpstreamWire; fim?: FimTokenTexts }): Record<string, unknown> {
  const completion = request.completion!;
  const { dialect, wire } = options;
  if (wire === "infill") {
    const prompt = completion.prompts[0]!;
    const body: Record<string, unknown> = {
      input_prefix: "tokens" in prompt ? prompt.tokens : prompt.text,
      input_suffix: completion.suffix ?? "",
      ...(completion.extra !== undefined && completion.extra.length > 0 ? { input_extra: completion.extra.map((chunk) => ({ filename: chunk.filename, text: chunk.text })) } : {}),
      ...(completion.middle !== undefined ? { prompt: completion.middle } : {}),
      n_predict: options.maxTokens,
      stream: true,
      timings_per_token: true,
      cache_prompt: true,
    };
    samplingFields(request, dialect, body);
    // The native API's log probabilities: the likeliest `n_probs` candidates of each token.
    if (request.logprobs !== undefined) body.n_probs = Math.max(1, request.logprobs.top);
    return body;
  }
  const body: Record<string, unknown> = {
    model: options.model,
    prompt: wirePrompt(completion, options.fim),
    stream: true,
    stream_options: dialect.continuousUsage ? { include_usage: true, continuous_usage_stats: true } : { include_usage: true },
    max_tokens: options.maxTokens,
  };
  if (dialect.timingsPerToken) body.timings_per_token = true;
  samplingFields(request, dialect, body);
  if (completion.n > 1) body.n = completion.n;
  if (request.logprobs !== undefined) body.logprobs = request.logprobs.top;
  return body;
}

/**
 * A text completion's `echo` over an upstream generation: each choice's prompt text goes out just
 * before that choice's first part (its own text, or its finish), so the upstream's retries before
 * any content stay invisible as they are without echo. Text prompts only (`checkCompletionForKind`).
 */
export function withEcho(generation: RunningGeneration, completion: TextCompletion): RunningGeneration {
  if (completion.echo !== true) return generation;
  const echoed = new Set<number>();
  const echoOf = (choice: number): string => {
    const prompt = completion.prompts[Math.floor(choice / completion.n)];
    return prompt !== undefined && "text" in prompt ? prompt.text : "";
  };
  async function* parts(): AsyncGenerator<StreamPart> {
    for await (const part of generation.parts) {
      if (!echoed.has(part.choice)) {
        echoed.add(part.choice);
        const text = echoOf(part.choice);
        if (text !== "" && !(part.type === "finish" && part.reason === "cancelled")) yield { type: "text-delta", choice: part.choice, text };
      }
      yield part;
    }
  }
  return { admitted: generation.admitted, usage: () => generation.usage(), parts: { [Symbol.asyncIterator]: parts } };
}
