/**
 * Generation parts → chat completions: the whole completion (one choice per `n`) or the streamed
 * chunks (a role chunk per choice, deltas interleaved across choices, a finish chunk per choice,
 * the usage chunk last when asked): the chat dialect's other half of the generation core. Free of
 * HTTP and billing: the shared run (`http/generation/run.ts`) drives it.
 */
import { overallFinishReason, partBatches, type GenerationOutcome, type GenerationOutput, type StreamPart, type TokenLogprob } from "../generation.ts";
import { JsonText } from "../json-text.ts";
import type { ServiceTier } from "../service-tiers.ts";
import { usageOf, type ChatCompletion, type ChatCompletionChunk, type ChoiceLogprobs, type FinishReason, type ToolCallObject } from "./response.ts";

/** What a chat reply says besides its generated content. */
export type ChatReplyShape = {
  id: string;
  /** Seconds since the epoch. */
  created: number;
  /** The model's id as the client named it. */
  model: string;
  /** How many choices were generated (`n`). */
  choices: number;
  /** A stream ends with a usage chunk (`stream_options.include_usage`). */
  includeUsage: boolean;
  /** The reply can only be tool calls (`tool_choice` required or named): its first delta's content is null. */
  toolCallsOnly: boolean;
  /** Whether choices carry `logprobs`. */
  logprobs: boolean;
  /** The tier that serves it (`servedTier` of the one asked for). */
  serviceTier: ServiceTier;
};

/** A streamed chunk: written out already (`JsonText`, a chunk of a choice), or as an object (the usage chunk). */
export type ChatStreamEvent = ChatCompletionChunk | JsonText;

/** The wire form of engine log probabilities. */
function toWireLogprobs(tokens: readonly TokenLogprob[]): ChoiceLogprobs {
  return {
    content: tokens.map((token) => ({
      token: token.token,
      logprob: token.logprob,
      bytes: token.bytes,
      top_logprobs: token.topLogprobs.map((alternative) => ({ token: alternative.token, logprob: alternative.logprob, bytes: alternative.bytes })),
    })),
    refusal: null,
  };
}

/** Runs a non-streamed request to its end and builds the response (one choice per `n`). */
export async function completeChatCompletion(
  job: ChatReplyShape,
  generation: GenerationOutput,
): Promise<{ completion: ChatCompletion; outcome: GenerationOutcome }> {
  const choices = job.choices;
  const contents = Array.from({ length: choices }, () => "");
  const reasonings = Array.from({ length: choices }, () => "");
  const logprobs = Array.from({ length: choices }, (): TokenLogprob[] => []);
  const toolCalls = Array.from({ length: choices }, (): ToolCallObject[] => []);
  const reasons = new Array<FinishReason | "cancelled" | undefined>(choices).fill(undefined);
  const read = (part: StreamPart): void => {
    switch (part.type) {
      case "text-delta":
        contents[part.choice] += part.text;
        if (part.logprobs !== undefined) logprobs[part.choice]!.push(...part.logprobs);
        break;
      case "reasoning-delta":
        reasonings[part.choice] += part.text;
        break;
      case "tool-call-start":
        toolCalls[part.choice]![part.index] = { id: part.id, type: "function", function: { name: part.name, arguments: "" } };
        break;
      case "tool-call-delta":
        toolCalls[part.choice]![part.index]!.function.arguments += part.argumentsDelta;
        break;
      case "finish":
        reasons[part.choice] = part.reason;
        break;
    }
  };
  for await (const batch of partBatches(generation)) {
    for (const part of batch) read(part);
  }
  const usage = generation.usage();
  const outcome: GenerationOutcome = { finishReason: overallFinishReason(reasons), usage };
  return {
    outcome,
    completion: {
      id: job.id,
      object: "chat.completion",
      created: job.created,
      model: job.model,
      service_tier: job.serviceTier,
      system_fingerprint: null,
      choices: contents.map((content, index) => {
        const reason = reasons[index];
        const calls = toolCalls[index]!;
        return {
          index,
          message: {
            role: "assistant" as const,
            // Only tool calls: no content, as OpenAI answers.
            content: calls.length > 0 && content === "" ? null : content,
            refusal: null,
            ...(reasonings[index] !== "" ? { reasoning_content: reasonings[index]! } : {}),
            ...(calls.length > 0 ? { tool_calls: calls } : {}),
          },
          logprobs: job.logprobs ? toWireLogprobs(logprobs[index]!) : null,
          finish_reason: reason === undefined || reason === "cancelled" ? "stop" : reason,
        };
      }),
      usage: usageOf(usage),
    },
  };
}

/**
 * Turns engine parts into chunks: a first chunk with the role for each choice, content deltas
 * (choices interleaved, each chunk naming its `index`), a chunk with each choice's finish reason,
 * and (when asked) a last chunk with `choices: []` and the usage of all choices.
 * `outcome` is filled in when every choice has finished. A cancelled choice gets no finish chunk.
 * The chunks of a batch of parts (`partBatches`: an upstream's read) are yielded as one array.
 */
export async function* streamChatCompletion(
  job: ChatReplyShape,
  generation: GenerationOutput,
  outcome: { value?: GenerationOutcome },
): AsyncGenerator<ChatStreamEvent | readonly ChatStreamEvent[]> {
  // A chunk is `ChatCompletionChunk` written out: the reply's constant fields framed once, only
  // the choice written per chunk (the same text as stringifying the whole chunk, in its key order).
  const head = `{"id":${JSON.stringify(job.id)},"object":"chat.completion.chunk","created":${job.created},"model":${JSON.stringify(job.model)},"service_tier":${JSON.stringify(job.serviceTier)},"system_fingerprint":null,"choices":[{"index":`;
  const tail = job.includeUsage ? `}],"usage":null}` : `}]}`;
  const chunk = (index: number, delta: string, finishReason: FinishReason | null, logprobs: ChoiceLogprobs | null = null): JsonText =>
    new JsonText(`${head}${index},"delta":${delta},"logprobs":${logprobs === null ? "null" : JSON.stringify(logprobs)},"finish_reason":${finishReason === null ? "null" : JSON.stringify(finishReason)}${tail}`);
  const choices = job.choices;
  const roleDelta = job.toolCallsOnly ? `{"role":"assistant","content":null,"refusal":null}` : `{"role":"assistant","content":"","refusal":null}`;
  for (let index = 0; index < choices; index++) yield chunk(index, roleDelta, null);
  const reasons = new Array<FinishReason | "cancelled" | undefined>(choices).fill(undefined);
  /** A part's chunk; none for a cancelled choice's finish. */
  const chunkOf = (part: StreamPart): JsonText | undefined => {
    switch (part.type) {
      case "text-delta":
        return chunk(part.choice, `{"content":${JSON.stringify(part.text)}}`, null, part.logprobs === undefined ? null : toWireLogprobs(part.logprobs));
      case "reasoning-delta":
        return chunk(part.choice, `{"reasoning_content":${JSON.stringify(part.text)}}`, null);
      case "tool-call-start":
        return chunk(part.choice, JSON.stringify({ tool_calls: [{ index: part.index, id: part.id, type: "function", function: { name: part.name, arguments: "" } }] }), null);
      case "tool-call-delta":
        return chunk(part.choice, JSON.stringify({ tool_calls: [{ index: part.index, function: { arguments: part.argumentsDelta } }] }), null);
      case "finish":
        reasons[part.choice] = part.reason;
        return part.reason === "cancelled" ? undefined : chunk(part.choice, "{}", part.reason);
    }
  };
  // The chunks of one batch of parts leave together (one step here and in the run, not one a part).
  for await (const batch of partBatches(generation)) {
    const chunks: JsonText[] = [];
    for (const part of batch) {
      const made = chunkOf(part);
      if (made !== undefined) chunks.push(made);
    }
    if (chunks.length === 1) yield chunks[0]!;
    else if (chunks.length > 1) yield chunks;
  }
  const usage = generation.usage();
  const finishReason = overallFinishReason(reasons);
  outcome.value = { finishReason, usage };
  if (finishReason === "cancelled") return;
  if (job.includeUsage) {
    yield {
      id: job.id,
      object: "chat.completion.chunk",
      created: job.created,
      model: job.model,
      service_tier: job.serviceTier,
      system_fingerprint: null,
      choices: [],
      usage: usageOf(usage),
    };
  }
}
