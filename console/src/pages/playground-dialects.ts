/**
 * The playground's two wire dialects: Chat Completions (`/v1/chat/completions`) and the
 * Responses API (`/v1/responses`). Each builds its request body from the same settings and reads
 * its own stream into the same three things: text as it comes, the usage at the end, and errors.
 */
import type { Model } from "../api.ts";

export type Dialect = "chat" | "responses";

/** Each dialect's name in the toggle and the endpoint it posts to. */
export const DIALECTS: Record<Dialect, { label: string; path: string }> = {
  chat: { label: "Chat Completions", path: "/v1/chat/completions" },
  responses: { label: "Responses", path: "/v1/responses" },
};

/** Where the choice is kept, like the theme (`turnpike.theme`). */
export const DIALECT_STORAGE_KEY = "turnpike.playground-dialect";

/** The saved dialect ("chat" when none is saved or storage is blocked). */
export function savedDialect(): Dialect {
  try {
    return window.localStorage.getItem(DIALECT_STORAGE_KEY) === "responses" ? "responses" : "chat";
  } catch {
    return "chat";
  }
}

/** Saves the dialect for the next visit. */
export function saveDialect(dialect: Dialect): void {
  try {
    window.localStorage.setItem(DIALECT_STORAGE_KEY, dialect);
  } catch {
    // Storage blocked: the choice lasts until the page is reloaded.
  }
}

const ALL_DIALECTS = Object.keys(DIALECTS) as Dialect[];

/** The dialects `model` is served through (the `endpoints` of `/api/models`); Chat Completions while no model is chosen. */
export function dialectsOf(model: Model | undefined): Dialect[] {
  if (model === undefined) return ["chat"];
  return ALL_DIALECTS.filter((dialect) => model.endpoints.includes(DIALECTS[dialect].path));
}

/** The models the playground can talk to: those served through one of its dialects at least (not an embedding model, say). */
export function playgroundModels(models: readonly Model[]): Model[] {
  return models.filter((model) => dialectsOf(model).length > 0);
}

export type Message = { role: "user" | "assistant"; content: string };
export type Parameters = { temperature: number; max_tokens: number; top_p: number; seed: string };

/** What a request is made of, whatever its dialect. */
export type RequestSettings = { model: Model | undefined; modelId: string; system: string; parameters: Parameters; conversation: Message[] };

/**
 * The body the playground posts (streamed). Parameters go only where the model takes them
 * (its `supported_parameters`, named as in chat completions). In Responses the system prompt is
 * `instructions`, the conversation is `input` items, `max_tokens` is `max_output_tokens`, `seed`
 * has no field, and `store` is false: the playground sends the whole conversation each time and
 * has no use for a stored response.
 */
export function requestBody(dialect: Dialect, settings: RequestSettings): Record<string, unknown> {
  const { model, modelId, system, parameters, conversation } = settings;
  const supported = new Set(model?.supported_parameters ?? []);
  const withSystem = system.trim() !== "";
  const body: Record<string, unknown> =
    dialect === "chat"
      ? { model: modelId, messages: [...(withSystem ? [{ role: "system", content: system }] : []), ...conversation], stream: true, stream_options: { include_usage: true } }
      : { model: modelId, ...(withSystem ? { instructions: system } : {}), input: conversation, stream: true, store: false };
  if (supported.has("temperature")) body.temperature = parameters.temperature;
  if (supported.has("top_p")) body.top_p = parameters.top_p;
  if (supported.has("max_tokens")) body[dialect === "chat" ? "max_tokens" : "max_output_tokens"] = parameters.max_tokens;
  if (dialect === "chat" && supported.has("seed") && parameters.seed.trim() !== "") body.seed = Number(parameters.seed);
  return body;
}

/** The usage a stream ended with, in common names; `finish` is the finish reason or the response's status. */
export type StreamUsage = { input: number; output: number; cached: number; finish: string | null };

/** What a stream tells as it is read. An error in the stream is thrown, with the server's message. */
export type StreamHandlers = { onText: (delta: string) => void; onUsage: (usage: StreamUsage) => void };

/** Reads an SSE body, calling `onData` with each `data:` payload (a named event's `event:` line is not needed: its data says its type). */
async function readEvents(body: ReadableStream<Uint8Array>, onData: (data: string) => void): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let boundary: number;
    while ((boundary = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, boundary);
      buffer = buffer.slice(boundary + 2);
      for (const line of block.split("\n")) if (line.startsWith("data: ")) onData(line.slice(6));
    }
  }
}

type ChatChunk = {
  error?: { message: string };
  choices?: Array<{ delta?: { content?: string }; finish_reason?: string | null }>;
  usage?: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens?: number } };
};

/** Reads a chat completions stream: content deltas, the finish reason, the `include_usage` chunk, an `error` chunk. */
async function readChatStream(body: ReadableStream<Uint8Array>, handlers: StreamHandlers): Promise<void> {
  let finish: string | null = null;
  await readEvents(body, (data) => {
    if (data === "[DONE]") return;
    const chunk = JSON.parse(data) as ChatChunk;
    if (chunk.error) throw new Error(chunk.error.message);
    const choice = chunk.choices?.[0];
    if (choice?.delta?.content) handlers.onText(choice.delta.content);
    if (choice?.finish_reason) finish = choice.finish_reason;
    if (chunk.usage) {
      const usage = chunk.usage;
      handlers.onUsage({ input: usage.prompt_tokens, output: usage.completion_tokens, cached: usage.prompt_tokens_details?.cached_tokens ?? 0, finish });
    }
  });
}

/**
 * The Responses stream events the playground reads (`src/protocol/responses/events.ts` has them
 * all; importing it would bring the server's Node.js types into the browser build).
 */
type ResponsesEvent =
  | { type: "response.output_text.delta"; delta: string }
  | { type: "error"; error: { message: string } }
  | {
      type: "response.completed" | "response.incomplete" | "response.failed";
      response: {
        status: string;
        incomplete_details: { reason: string } | null;
        error: { message: string } | null;
        usage: { input_tokens: number; input_tokens_details: { cached_tokens: number }; output_tokens: number } | null;
      };
    }
  | { type: "other" };

/**
 * Reads a Responses stream: `response.output_text.delta` events, then `response.completed` or
 * `response.incomplete` with the usage (an incomplete one says why), or an `error` event
 * followed by `response.failed`.
 */
async function readResponsesStream(body: ReadableStream<Uint8Array>, handlers: StreamHandlers): Promise<void> {
  await readEvents(body, (data) => {
    if (data === "[DONE]") return;
    const event = JSON.parse(data) as ResponsesEvent;
    switch (event.type) {
      case "response.output_text.delta":
        handlers.onText(event.delta);
        return;
      case "error":
        throw new Error(event.error.message);
      case "response.failed":
        throw new Error(event.response.error?.message ?? "The response failed.");
      case "response.completed":
      case "response.incomplete": {
        const { usage, status, incomplete_details: incomplete } = event.response;
        if (usage === null) return;
        const finish = incomplete === null ? status : `${status} (${incomplete.reason})`;
        handlers.onUsage({ input: usage.input_tokens, output: usage.output_tokens, cached: usage.input_tokens_details.cached_tokens, finish });
        return;
      }
      default:
        return;
    }
  });
}

/** Reads the stream of `dialect` from `body`. */
export function readStream(dialect: Dialect, body: ReadableStream<Uint8Array>, handlers: StreamHandlers): Promise<void> {
  return dialect === "chat" ? readChatStream(body, handlers) : readResponsesStream(body, handlers);
}
