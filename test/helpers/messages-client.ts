/**
 * The official `@anthropic-ai/sdk` client against a Turnpike, with every answer checked: a
 * message against the spec's schema (`messages-schemas.ts`), a stream read by the SDK
 * (`messages.stream(...).finalMessage()`) and, raw, by the grammar check (`checkMessageStream`)
 * over the same bytes, the SDK's final message equal to what the events replay to.
 */
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { checkMessageStream, messageSchema, type ReplayedStream } from "./messages-schemas.ts";
import { parseSse } from "./sse-events.ts";

export type Params = Anthropic.MessageCreateParamsNonStreaming;
export type Message = Anthropic.Message;

/** Greedy sampling (`temperature` 0): the Messages API takes it, though the newest SDK types no longer list it. */
export const GREEDY: object = { temperature: 0 };

export type CheckedMessagesClient = {
  client: Anthropic;
  /** `messages.create` (checked against the schema) or `messages.stream(...).finalMessage()` (and its raw events checked). */
  create(params: Params, stream: boolean): Promise<Message>;
  /** The raw events of the last stream `create` read, replayed. */
  lastStream(): ReplayedStream | undefined;
};

export function assertValidMessage(message: unknown): void {
  const parsed = messageSchema.safeParse(message);
  assert.ok(parsed.success, parsed.success ? "" : JSON.stringify(parsed.error.issues.slice(0, 3)));
}

/** The message as the server sent it (the SDK adds `parsed_output` to a stream's final message, and fields it did not get as undefined). */
function wire(message: Message): Record<string, unknown> {
  const { parsed_output: _parsed, ...rest } = JSON.parse(JSON.stringify(message)) as Message & { parsed_output?: unknown };
  return rest;
}

/** A client of `url` (the server's root, no `/v1`) with `apiKey`, whose answers are checked. */
export function checkedMessagesClient(url: string, apiKey: string): CheckedMessagesClient {
  const rawStreams: Array<Promise<string>> = [];
  let last: ReplayedStream | undefined;
  /** `fetch`, keeping a copy of each event stream's bytes. */
  const teeFetch: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    if (!response.headers.get("content-type")?.startsWith("text/event-stream") || response.body === null) return response;
    const [forClient, forTest] = response.body.tee();
    rawStreams.push(new Response(forTest).text());
    return new Response(forClient, { status: response.status, headers: response.headers });
  };
  const client = new Anthropic({ baseURL: url, apiKey, maxRetries: 0, timeout: 120_000, fetch: teeFetch });
  return {
    client,
    lastStream: () => last,
    async create(params, stream) {
      if (!stream) {
        const message = await client.messages.create(params);
        assertValidMessage(message);
        return message;
      }
      const before = rawStreams.length;
      const final = await client.messages.stream(params).finalMessage();
      assert.equal(rawStreams.length, before + 1, "one event stream was read");
      const raw = await rawStreams[before]!;
      assert.ok(!raw.includes("[DONE]"), "no [DONE]");
      const { problems, replayed } = checkMessageStream(parseSse(raw));
      assert.deepEqual(problems, []);
      assertValidMessage(replayed!.message);
      assert.deepEqual(wire(final), replayed!.message, "finalMessage() is what the events replay to");
      last = replayed;
      return final;
    },
  };
}

/** The text of a message's text blocks. */
export const textOf = (message: Message): string => message.content.flatMap((block) => (block.type === "text" ? [block.text] : [])).join("");

/** A message's whole prompt: input + cache read + cache creation, each token once. */
export const promptOf = (message: Message): number => message.usage.input_tokens + (message.usage.cache_read_input_tokens ?? 0) + (message.usage.cache_creation_input_tokens ?? 0);

/** `params` as `count_tokens` takes them (no `max_tokens`, `stop_sequences` or sampling). */
export function countParamsOf(params: Params): Anthropic.MessageCountTokensParams {
  const { max_tokens: _max, stop_sequences: _stop, ...prompt } = params as Params & { temperature?: number };
  delete prompt.temperature;
  return prompt as Anthropic.MessageCountTokensParams;
}

/** A tool with one short string argument (`maxLength` keeps a tiny model's constrained JSON short enough to close). */
export const weatherTool: Anthropic.Tool = {
  name: "get_weather",
  description: "The weather in a city",
  input_schema: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"] },
};
