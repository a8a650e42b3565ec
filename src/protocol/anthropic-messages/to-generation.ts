/**
 * Anthropic's Messages API → the generation request: the Messages dialect's half of the generation
 * core. Linear in the body (which the schema's caps bound); no template, grammar or tokenizer runs
 * here. Throws typed API errors naming the block (`messages[3].content[1]`).
 *
 * - `system` (a string or text blocks) is the first message, a system message;
 * - a user message's `tool_result` blocks are tool messages answering the assistant's `tool_use`
 *   blocks (which must come earlier), its text and images a user message, in the order sent;
 * - an assistant message's `tool_use` blocks are its tool calls (`input` as JSON text); its
 *   `thinking` and `redacted_thinking` blocks are accepted and left out of the prompt (the engines
 *   take no reasoning back);
 * - images (base64 or URL) are image parts, for models that read images (a 400 naming the block otherwise);
 * - `tool_choice` `any` is `required`, `tool` names the tool, `disable_parallel_tool_use` turns
 *   parallel calls off; `stop_sequences` are stop strings; `top_k` the `top_k` vendor field and
 *   `thinking` the `reasoning_effort` one, where the model's entry allows them (see `vendorOf`).
 */
import type { EngineContentPart, EngineImage, EngineMessage, GenerationRequest, ImageUrlPart, ToolCall, ToolChoice, ToolDefinition } from "../generation.ts";
import { InvalidRequestError, UnsupportedParameterError } from "../errors.ts";
import { imageUrlProblem, modelReadsNoImages } from "../image-url.ts";
import type { ContentBlockParam, CountTokensRequest, ImageSource, MessagesRequest, ToolResultContentBlock } from "./request.ts";

/** What the model can read and take besides text: images, and the vendor fields its entry allows. */
export type ModelInputs = { images: boolean; vendorFields: readonly string[] };

/** The fields of a request that shape the prompt: a creation's, or a token count's. */
type PromptFields = Pick<CountTokensRequest, "messages" | "system" | "tools" | "tool_choice" | "thinking">;

/** The image URL of a block's source: a `data:` URL for base64, the URL as sent otherwise. */
export function imageUrlOf(source: ImageSource): string {
  return source.type === "base64" ? `data:${source.media_type};base64,${source.data}` : source.url;
}

/** An image block as an engine image, refused (naming it) for a model that reads no images or when malformed. */
function engineImage(source: ImageSource, param: string, inputs: ModelInputs): EngineImage {
  if (!inputs.images) throw modelReadsNoImages(param, "image blocks");
  const url = imageUrlOf(source);
  const problem = imageUrlProblem(url);
  if (problem !== undefined) throw new InvalidRequestError(`Invalid image in '${param}': ${problem}.`, param, "invalid_image_url");
  return { url };
}

/** A tool result's content as text; an image in it is refused (naming it): the engines take tool results as text. */
function toolResultText(content: string | ToolResultContentBlock[] | undefined, param: string, inputs: ModelInputs): string {
  if (content === undefined) return "";
  if (typeof content === "string") return content;
  return content
    .map((block, index) => {
      if (block.type === "text") return block.text;
      const where = `${param}.content[${index}]`;
      if (!inputs.images) throw modelReadsNoImages(where, "image blocks");
      throw new UnsupportedParameterError(`Images inside a 'tool_result' are not supported yet ('${where}'); send the image in a user message's own image block.`, where);
    })
    .join("");
}

/** A user or assistant turn being built from its blocks. */
type Pending = { text: string; images: EngineImage[]; parts: EngineContentPart[]; calls: ToolCall[] };

const emptyPending = (): Pending => ({ text: "", images: [], parts: [], calls: [] });

/** The user message of `pending`'s text and images (undefined when it has none). */
function userMessage(pending: Pending): EngineMessage | undefined {
  if (pending.parts.length === 0) return undefined;
  // The parts as sent matter only where an image stands among them (an upstream forwards them).
  return pending.images.length > 0 ? { role: "user", content: pending.text, images: pending.images, parts: pending.parts } : { role: "user", content: pending.text };
}

/**
 * Maps the conversation to the engine's messages. Every `tool_result` must answer a `tool_use` of
 * an earlier assistant message (as Anthropic requires), else a 400 naming the block.
 */
function toEngineMessages(request: PromptFields, inputs: ModelInputs): EngineMessage[] {
  const messages: EngineMessage[] = [];
  const system = request.system;
  if (system !== undefined) {
    const content = typeof system === "string" ? system : system.map((block) => block.text).join("\n\n");
    if (content !== "" || typeof system === "string") messages.push({ role: "system", content });
  }
  const calledIds = new Set<string>();
  request.messages.forEach((message, index) => {
    const blocks: ContentBlockParam[] = typeof message.content === "string" ? [{ type: "text", text: message.content }] : message.content;
    if (message.role === "system") {
      // Instructions in the conversation (the schema lets only text blocks through): a system message where it stands, as chat completions place one.
      messages.push({ role: "system", content: blocks.map((block) => (block.type === "text" ? block.text : "")).join("\n\n") });
      return;
    }
    let pending = emptyPending();
    const flushUser = () => {
      const user = userMessage(pending);
      if (user !== undefined) messages.push(user);
      pending = emptyPending();
    };
    blocks.forEach((block, blockIndex) => {
      const param = `messages[${index}].content[${blockIndex}]`;
      switch (block.type) {
        case "text":
          pending.text += block.text;
          pending.parts.push({ type: "text", text: block.text });
          return;
        case "image": {
          const image = engineImage(block.source, param, inputs);
          pending.images.push(image);
          pending.parts.push({ type: "image", image });
          return;
        }
        case "tool_result": {
          if (!calledIds.has(block.tool_use_id)) {
            throw new InvalidRequestError(`'${param}.tool_use_id' ('${block.tool_use_id}') answers no 'tool_use' block of an earlier assistant message.`, `${param}.tool_use_id`);
          }
          // Text sent before a tool result stays before it.
          flushUser();
          const text = toolResultText(block.content, param, inputs);
          messages.push({ role: "tool", content: block.is_error === true ? `Error: ${text}` : text, toolCallId: block.tool_use_id });
          return;
        }
        case "tool_use":
          calledIds.add(block.id);
          pending.calls.push({ id: block.id, name: block.name, arguments: JSON.stringify(block.input) });
          return;
        case "thinking":
        case "redacted_thinking":
          // Passed back from an earlier answer: accepted, not part of the prompt.
          return;
      }
    });
    if (message.role === "user") {
      flushUser();
      return;
    }
    messages.push({ role: "assistant", content: pending.text, ...(pending.calls.length > 0 ? { toolCalls: pending.calls } : {}) });
  });
  return messages;
}

/** The tools, the tool choice and whether calls may come in parallel. */
function toToolOptions(request: PromptFields): Pick<GenerationRequest, "tools" | "toolChoice" | "parallelToolCalls"> {
  const tools: ToolDefinition[] = (request.tools ?? []).map((tool) => ({
    name: tool.name,
    ...(tool.description != null ? { description: tool.description } : {}),
    parameters: tool.input_schema,
    ...(tool.strict != null ? { strict: tool.strict } : {}),
  }));
  const choice = request.tool_choice;
  let toolChoice: ToolChoice | undefined;
  if (choice == null || choice.type === "auto") toolChoice = undefined;
  else if (choice.type === "any") toolChoice = "required";
  else if (choice.type === "none") toolChoice = "none";
  else toolChoice = { name: choice.name };
  const disableParallel = choice != null && choice.type !== "none" && choice.disable_parallel_tool_use === true;
  return {
    ...(tools.length > 0 ? { tools } : {}),
    ...(toolChoice !== undefined && tools.length > 0 ? { toolChoice } : {}),
    ...(disableParallel && tools.length > 0 ? { parallelToolCalls: false } : {}),
  };
}

/**
 * The reasoning effort a thinking budget asks for: under 4,096 tokens `low`, under 16,384
 * `medium`, more `high` (Anthropic's budgets are at least 1,024; `adaptive` leaves it to the model: `medium`).
 */
export function effortOfBudget(budgetTokens: number | undefined): "low" | "medium" | "high" {
  if (budgetTokens === undefined) return "medium";
  if (budgetTokens < 4096) return "low";
  if (budgetTokens < 16_384) return "medium";
  return "high";
}

/**
 * The vendor fields the request sets: `top_k` as sent (refused later, naming `top_k`, for a model
 * whose entry does not allow it), and `thinking` as `reasoning_effort` where the model takes it.
 * Thinking is a hint elsewhere: a model without reasoning controls thinks as it always does (its
 * reasoning, if any, comes back as thinking blocks), so Claude Code's thinking requests work on
 * every model. `disabled` sends nothing.
 */
function vendorOf(request: PromptFields & { top_k?: number | null }, inputs: ModelInputs): Record<string, unknown> | undefined {
  let vendor: Record<string, unknown> | undefined;
  if (request.top_k != null) (vendor ??= {}).top_k = request.top_k;
  const thinking = request.thinking;
  if (thinking != null && thinking.type !== "disabled" && inputs.vendorFields.includes("reasoning_effort")) {
    (vendor ??= {}).reasoning_effort = effortOfBudget(thinking.type === "enabled" ? thinking.budget_tokens : undefined);
  }
  return vendor;
}

/**
 * The generation request for a validated Messages request. `max_tokens` is a ceiling the engine
 * fits to the context (`fitMaxTokens`); a token count (`count_tokens`) has none.
 */
export function toGenerationRequest(request: MessagesRequest | CountTokensRequest, inputs: ModelInputs): GenerationRequest {
  const full = request as Partial<MessagesRequest>;
  const vendor = vendorOf(full as PromptFields & { top_k?: number | null }, inputs);
  return {
    messages: toEngineMessages(request, inputs),
    sampling: {
      temperature: full.temperature ?? 1,
      topP: full.top_p ?? 1,
      frequencyPenalty: 0,
      presencePenalty: 0,
      stop: (full.stop_sequences ?? []).filter((sequence) => sequence.length > 0),
    },
    ...(request.max_tokens != null ? { maxTokens: request.max_tokens, fitMaxTokens: true } : {}),
    ...toToolOptions(request),
    choices: 1,
    ...(vendor !== undefined ? { vendor } : {}),
  };
}

/**
 * What the request asks to be cached first: its content, in Anthropic's cache order (tools, then
 * `system`, then the messages), up to and including the first block carrying `cache_control`;
 * undefined without a breakpoint. The first breakpoint is the prefix every turn of a
 * conversation repeats (later ones move as it grows), so requests sharing it are sent to the
 * upstream member that holds it (`GenerationRequest.affinityKey`).
 */
export function cachedPrefixOf(request: PromptFields & { tools?: MessagesRequest["tools"] }): unknown[] | undefined {
  const prefix: unknown[] = [];
  for (const tool of request.tools ?? []) {
    prefix.push(tool);
    if (tool.cache_control != null) return prefix;
  }
  if (request.system !== undefined && typeof request.system !== "string") {
    for (const block of request.system) {
      prefix.push(block.text);
      if (block.cache_control != null) return prefix;
    }
  } else prefix.push(request.system ?? null);
  for (const message of request.messages) {
    if (typeof message.content === "string") {
      prefix.push([message.role, message.content]);
      continue;
    }
    for (const block of message.content) {
      prefix.push([message.role, block]);
      if ("cache_control" in block && block.cache_control != null) return prefix;
    }
  }
  return undefined;
}

/** Every image block's URL (a data URL for base64), with its param (`messages[2].content[1].source`). */
export function imageUrlsOf(request: PromptFields): ImageUrlPart[] {
  const found: ImageUrlPart[] = [];
  request.messages.forEach((message, index) => {
    if (typeof message.content === "string") return;
    message.content.forEach((block, blockIndex) => {
      if (block.type === "image") found.push({ url: imageUrlOf(block.source), param: `messages[${index}].content[${blockIndex}].source` });
    });
  });
  return found;
}

/**
 * The Messages API's spelling of the parameters the generation core checks (chat completions'
 * names), for the refusals that name them.
 */
export const MESSAGES_PARAMETER_NAMES: Readonly<Record<string, string>> = {
  stop: "stop_sequences",
  tool_choice: "tool_choice",
  parallel_tool_calls: "tool_choice.disable_parallel_tool_use",
  reasoning_effort: "thinking",
  response_format: "output_format",
};
