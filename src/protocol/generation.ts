/**
 * The one internal generation request and its result: what every wire dialect (chat completions,
 * responses, Anthropic messages, legacy completions) maps to and from, and the only request shape
 * engines, admission, metering and limits see. Free of any wire format and of every other folder.
 */

export type EngineMessage = {
  role: "system" | "user" | "assistant" | "tool";
  /** Plain text; text content parts are flattened by the caller. */
  content: string;
  /**
   * Images in this message, for engines whose model reads them (the caller refuses images for
   * text-only models). Where they stood among the text parts: see `parts`.
   */
  images?: EngineImage[];
  /**
   * The content parts in the order they were sent (text and images), when the message had
   * content parts; an engine that forwards messages (an upstream) sends these as they were.
   */
  parts?: EngineContentPart[];
  name?: string;
  /** For `tool` messages: the call this result answers. */
  toolCallId?: string;
  /** For `assistant` messages: the tool calls the model made in this turn. */
  toolCalls?: ToolCall[];
};

/**
 * A call the model made: `arguments` is the JSON text of the call's arguments (for a custom tool,
 * see `ToolDefinition.custom`, the call's free-text input).
 */
export type ToolCall = { id: string; name: string; arguments: string };

/** A JSON Schema as the client sent it (validated and translated by the engine that uses it). */
export type JsonSchema = Record<string, unknown>;

/** A function the model may call. */
export type ToolDefinition = {
  name: string;
  description?: string;
  /** A JSON Schema of type `object`; undefined means the function takes no arguments. */
  parameters?: JsonSchema;
  /** OpenAI's strict mode: the arguments must follow the schema exactly. */
  strict?: boolean;
  /**
   * Set for a custom (freeform) tool, the Responses API's `{type: "custom"}`: the call's input is
   * free text, not JSON, and `parameters`/`strict` do not apply. The call's `arguments` carry that
   * text as the model wrote it. With a `grammar` format the text must match the grammar (Lark or a
   * regular expression): an engine that cannot enforce the grammar refuses the request rather than
   * let an unconstrained call through.
   */
  custom?: { format: CustomToolFormat };
};

/** The input format of a custom tool: any text, or text matching a Lark grammar or a regular expression. */
export type CustomToolFormat = { type: "text" } | { type: "grammar"; syntax: "lark" | "regex"; definition: string };

/**
 * Which tools the model may or must call: `auto` lets it choose between text and calls,
 * `required` makes it call at least one, `{name}` makes it call exactly that one.
 */
export type ToolChoice = "auto" | "none" | "required" | { name: string };

/** The shape of the reply's text: free text, any JSON object, or JSON valid against a schema. */
export type ResponseFormat =
  | { type: "text" }
  | { type: "json_object" }
  | { type: "json_schema"; name: string; schema: JsonSchema; strict?: boolean };

/** One content part of a message, as sent: text, or an image. */
export type EngineContentPart = { type: "text"; text: string } | { type: "image"; image: EngineImage };

/** An image as the client sent it: a `data:` URL (checked to be base64 of a known image type) or an http(s) URL. */
export type EngineImage = { url: string; detail?: "auto" | "low" | "high" };

export type SamplingOptions = {
  /** 0 is greedy. */
  temperature: number;
  topP: number;
  /** Undefined: a fresh random seed per request. */
  seed?: number;
  frequencyPenalty: number;
  presencePenalty: number;
  /** Strings that end generation; they are not part of the output. */
  stop: string[];
  /**
   * Added to the logits of these token ids before sampling (OpenAI's `logit_bias`, -100..100;
   * -100 bans the token). Ids are the engine's own; it refuses ids outside its vocabulary.
   */
  logitBias?: ReadonlyMap<number, number>;
};

/**
 * The engine-specific sampling fields a request may carry (`GenerationRequest.vendor`): the one
 * list, read by each dialect (where its wire format puts them) and by the upstream engine (which
 * kinds take which, and the model entries' `vendor_fields`).
 */
export const VENDOR_FIELDS = ["top_k", "min_p", "repetition_penalty", "reasoning_effort", "chat_template_kwargs"] as const;
export type VendorField = (typeof VENDOR_FIELDS)[number];

/** A legacy completion's prompt: text, or token ids of the model's vocabulary. */
export type CompletionPrompt = { text: string } | { tokens: number[] };

/**
 * A legacy text completion (`/v1/completions`): the prompts as sent, no chat template. Choice
 * `c` of the request continues prompt `floor(c / n)` (OpenAI's order: every prompt's `n` choices
 * together), so `GenerationRequest.choices` is `prompts.length × n`; each prompt's tokens count once.
 */
export type TextCompletion = {
  prompts: CompletionPrompt[];
  /** Choices per prompt (OpenAI's `n`). */
  n: number;
  /** Fill-in-the-middle: the text after the completion (the prompt is the text before). Only for a model with FIM tokens. */
  suffix?: string;
  /** The prompt's text comes back before the completion's (OpenAI's `echo`). */
  echo?: boolean;
  /**
   * Fill-in-the-middle only (llama-server's `/infill`): files of the project given as context,
   * laid out before the prefix (its `input_extra`), in order.
   */
  extra?: InfillChunk[];
  /**
   * Fill-in-the-middle only (llama-server's `/infill` `prompt`): text the middle starts with,
   * placed after the prefix (special tokens in it parsed).
   */
  middle?: string;
};

/** A file given as fill-in-the-middle context: its name (llama-server's default `tmp`) and text. */
export type InfillChunk = { filename: string; text: string };

export type GenerationRequest = {
  /** Empty for a text completion (`completion`). */
  messages: EngineMessage[];
  /** Set for a legacy text completion: its prompts are rendered as they are, in place of `messages`. */
  completion?: TextCompletion;
  sampling: SamplingOptions;
  /**
   * The most completion tokens the caller allows; undefined means "as many as fit the context".
   */
  maxTokens?: number;
  /**
   * `maxTokens` is a ceiling, not a demand: the engine lowers it to what the context leaves after
   * the prompt instead of refusing the request (Anthropic's `max_tokens`, which clients such as
   * Claude Code set far above a small model's context). A prompt that leaves no room is still refused.
   */
  fitMaxTokens?: boolean;
  /** Undefined: free text. */
  responseFormat?: ResponseFormat;
  /** Undefined or empty: no tools. */
  tools?: ToolDefinition[];
  /** Defaults to `auto` when tools are given. */
  toolChoice?: ToolChoice;
  /** Whether one turn may hold several calls (OpenAI's default: true). */
  parallelToolCalls?: boolean;
  /** Independent completions to generate (OpenAI's `n`); each may use `maxTokens`. */
  choices: number;
  /**
   * Report the log probability of each generated token and of the `top` likeliest alternatives
   * (0..20); undefined: no log probabilities.
   */
  logprobs?: { top: number };
  /**
   * Engine-specific sampling fields passed through as sent (`top_k`, `min_p`, `repetition_penalty`,
   * `reasoning_effort`, `chat_template_kwargs`), only those the model's entry allows (the caller
   * refuses the others). Engines that cannot honour one refuse the request.
   */
  vendor?: Readonly<Record<string, unknown>>;
  /**
   * The caller sends the client nothing until the reply is whole (a non-streamed request): an
   * engine may then retry on another member even after generation began, discarding what the
   * failed attempt made. Otherwise retries end with the first part yielded.
   */
  buffered?: boolean;
  /**
   * The client's own key for prefix-cache routing (the Responses API's `prompt_cache_key`):
   * requests sharing it go to the member that served the last of them, whatever their prompts.
   * Undefined: the engine derives one from the prompt's beginning.
   */
  affinityKey?: string;
};

/**
 * `cancelled`: the caller aborted; usage still counts what was generated before.
 * `content_filter`: an upstream withheld the rest.
 */
export type EngineFinishReason = "stop" | "length" | "tool_calls" | "content_filter" | "cancelled";

/** One alternative token and its log probability (natural log). */
export type TokenLogprobAlternative = {
  token: string;
  logprob: number;
  /** The UTF-8 bytes of the token (a token may hold part of a character). */
  bytes: number[];
};

/**
 * A generated token with its log probability and, when asked, the likeliest alternatives.
 * `unconditioned`: an echoed prompt's first token, which has no log probability (nothing comes
 * before it): its `logprob` is 0 and `topLogprobs` empty, and the legacy shape says null.
 */
export type TokenLogprob = TokenLogprobAlternative & { topLogprobs: TokenLogprobAlternative[]; unconditioned?: true };

/**
 * What a running generation yields. `choice` is the completion's index (0..choices-1); the parts
 * of different choices may interleave, and each choice ends with its own `finish`.
 */
export type StreamPart =
  /** `logprobs`: the tokens whose text this delta carries (when log probabilities were asked for). */
  | { type: "text-delta"; choice: number; text: string; logprobs?: TokenLogprob[] }
  /** The model's reasoning (a thinking model's text before its answer), sent as `reasoning_content`. */
  | { type: "reasoning-delta"; choice: number; text: string }
  /** A tool call begins: `index` counts the calls of this choice's reply from 0. */
  | { type: "tool-call-start"; choice: number; index: number; id: string; name: string }
  /** More of the call's arguments (JSON text); the deltas of one call concatenate to its arguments. */
  | { type: "tool-call-delta"; choice: number; index: number; argumentsDelta: string }
  /**
   * `usage`: this choice's tokens (the prompt counted once per request: see `RunningGeneration.usage`).
   * `stopSequence`: the stop sequence (one of the request's `sampling.stop`, as sent) that ended
   * this choice; only with reason `stop`, and absent when the choice ended on the model's own
   * end-of-generation token or for another reason, or when the engine cannot tell (an upstream
   * whose kind does not say: see `DIALECTS` in `engines/openai-compatible/dialects.ts`).
   */
  | { type: "finish"; choice: number; reason: EngineFinishReason; usage: TokenUsage; stopSequence?: string };

export type TokenUsage = {
  promptTokens: number;
  /** Prompt tokens whose state was reused from a previous request (prefix cache). */
  cachedPromptTokens: number;
  /** Completion tokens, reasoning included. */
  completionTokens: number;
  /** The part of `completionTokens` spent on reasoning (0 or absent when the model did not reason). */
  reasoningTokens?: number;
};

/**
 * Where usage came from: `counted` by this process (the embedded engine), `upstream` as the
 * upstream reported it, `estimated` from what was seen (a stream cut before the upstream said).
 */
export type UsageSource = "counted" | "upstream" | "estimated";

/** A request's usage and where it came from. */
export type GenerationUsage = TokenUsage & { source: UsageSource };

/** What a dialect reads of a running generation: its parts, and its exact usage so far. */
export type GenerationOutput = {
  /** Ends after one `finish` part per choice, or throws. */
  readonly parts: AsyncIterable<StreamPart>;
  /**
   * The same parts in the groups the engine made them (an upstream's read: every event of one
   * piece), where it makes groups; a reader of groups pays one step of each async layer per
   * group, not per part. Read through `partBatches`; a generation is read once, by `parts` or by this.
   */
  readonly batches?: AsyncIterable<readonly StreamPart[]>;
  /** Final once `parts` has ended (also when the consumer stopped early). */
  usage(): GenerationUsage;
};

/** A generation's parts in groups: the engine's own (`batches`), else each part alone. */
export function partBatches(generation: GenerationOutput): AsyncIterable<readonly StreamPart[]> {
  const batches = generation.batches;
  if (batches !== undefined) return batches;
  return {
    async *[Symbol.asyncIterator]() {
      for await (const part of generation.parts) yield [part];
    },
  };
}

/**
 * How a generation ended, for billing and logs: `cancelled` if any choice was cut short, else
 * the first choice's reason; and its usage with the usage's source. `stopSequence`: the first
 * choice's `finish` part's, where the dialect's answer names it (Anthropic's `stop_sequence`);
 * only with `finishReason` `stop`.
 */
export type GenerationOutcome = { finishReason: EngineFinishReason; usage: GenerationUsage; stopSequence?: string };

/** The request's finish reason: `cancelled` if any choice was cut short (or never finished), else the first choice's. */
export function overallFinishReason(reasons: ReadonlyArray<EngineFinishReason | undefined>): EngineFinishReason {
  if (reasons.some((reason) => reason === undefined || reason === "cancelled")) return "cancelled";
  return reasons[0]!;
}

/** An image URL the request carries (a data URL too), with its place (`messages[2].content[1].image_url.url`): admission checks it against the image URL policy before anything goes upstream. */
export type ImageUrlPart = { url: string; param: string };
