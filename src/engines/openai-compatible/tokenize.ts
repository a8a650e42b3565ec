/**
 * Exact prompt counts from the upstream's own template and tokenizer, where the server offers
 * them; undefined elsewhere (the caller falls back to an upper bound, see `prompt-bound.ts`).
 *
 * - vLLM: `POST /tokenize` (at the root) takes the chat form — `model`, `messages`, `tools`,
 *   `add_generation_prompt`, `chat_template_kwargs` — renders it with the model's template and
 *   answers `{count, max_model_len, tokens}`.
 * - llama-server: recent builds take the whole chat body at `POST /v1/chat/completions/input_tokens`
 *   and answer `{"input_tokens": N, "object": "response.input_tokens"}` (template, tools and media
 *   counted as a completion would count them). Older builds: `POST /apply-template` takes
 *   `messages` (and `tools`, as `/v1/chat/completions` does) and answers `{prompt}`;
 *   `POST /tokenize` takes `content`, `add_special` and `parse_special` and answers `{tokens}`. The
 *   rendered prompt is tokenized as the server tokenizes a chat prompt: special tokens parsed, BOS
 *   added where the model adds it.
 * - SGLang: its `/tokenize` and `/v1/tokenize` take a `prompt` text only, no chat form: no count.
 * - Ollama and OpenAI: no tokenize endpoint: no count.
 *
 * Prompts with images are counted only by llama-server's `input_tokens` (vLLM would fetch and
 * process them; `/apply-template` holds a marker in their place): else the upper bound covers them.
 */
import type { UpstreamKind } from "./config-schema.ts";
import { callJson } from "./upstream-json.ts";
import { serverRoot } from "./upstream-url.ts";

export type CountPromptOptions = {
  kind: UpstreamKind | undefined;
  baseUrl: string;
  /** The model's name upstream. */
  model: string;
  /** The messages as they will be sent upstream (OpenAI wire format). */
  messages: readonly unknown[];
  /** The tools as they will be sent upstream (OpenAI wire format). */
  tools?: readonly unknown[];
  /** Passed to the template as the chat request passes them (e.g. `enable_thinking`). */
  chatTemplateKwargs?: Readonly<Record<string, unknown>>;
  apiKey?: string;
  /** Milliseconds the whole count may take (default 2000). */
  timeoutMs?: number;
  /** The caller's signal: when it aborts, the count throws its reason. */
  signal?: AbortSignal;
};

/** Whether servers of this kind can count a chat prompt exactly. */
export function countsPromptsExactly(kind: UpstreamKind | undefined): boolean {
  return kind === "vllm" || kind === "llama-server";
}

/**
 * The prompt's tokens as the upstream will count them, or undefined when the kind cannot say, the
 * prompt holds images, or the server failed or took too long. Never throws for the upstream.
 */
export async function countPromptTokens(options: CountPromptOptions): Promise<{ tokens: number } | undefined> {
  if (!countsPromptsExactly(options.kind)) return undefined;
  const images = holdsImages(options.messages);
  if (images && options.kind === "vllm") return undefined;
  const deadline = Date.now() + (options.timeoutMs ?? 2000);
  const call = (path: string, body: Record<string, unknown>) =>
    callJson(`${serverRoot(options.baseUrl)}${path}`, { body, apiKey: options.apiKey, timeoutMs: Math.max(1, deadline - Date.now()), signal: options.signal });
  const withTools = options.tools !== undefined && options.tools.length > 0 ? { tools: options.tools } : {};
  const withKwargs = options.chatTemplateKwargs === undefined ? {} : { chat_template_kwargs: options.chatTemplateKwargs };

  if (options.kind === "vllm") {
    const answer = await call("/tokenize", { model: options.model, messages: options.messages, ...withTools, ...withKwargs, add_generation_prompt: true });
    if (!answer.ok || !isRecord(answer.body)) return undefined;
    return count(answer.body.count) ?? count(Array.isArray(answer.body.tokens) ? answer.body.tokens.length : undefined);
  }

  const native = await callJson(`${serverRoot(options.baseUrl)}/v1/chat/completions/input_tokens`, {
    body: { model: options.model, messages: options.messages, ...withTools, ...withKwargs },
    apiKey: options.apiKey,
    timeoutMs: Math.max(1, deadline - Date.now()),
    signal: options.signal,
  });
  if (native.ok) return isRecord(native.body) ? count(native.body.input_tokens) : undefined;
  // An older build answers 404 there; a server that did not answer in time will not answer the rest either.
  if (native.failure !== "status" || images) return undefined;
  const rendered = await call("/apply-template", { messages: options.messages, ...withTools, ...withKwargs });
  const prompt = rendered.ok && isRecord(rendered.body) ? rendered.body.prompt : undefined;
  if (typeof prompt !== "string" || Date.now() >= deadline) return undefined;
  const answer = await call("/tokenize", { content: prompt, add_special: true, parse_special: true });
  if (!answer.ok || !isRecord(answer.body) || !Array.isArray(answer.body.tokens)) return undefined;
  return count(answer.body.tokens.length);
}

function count(value: unknown): { tokens: number } | undefined {
  return typeof value === "number" && Number.isInteger(value) && value >= 0 ? { tokens: value } : undefined;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Whether a message holds a content part other than text (an image, audio). */
function holdsImages(messages: readonly unknown[]): boolean {
  return messages.some((message) => {
    const content = isRecord(message) ? message.content : undefined;
    return Array.isArray(content) && content.some((part) => !isRecord(part) || part.type !== "text");
  });
}
