/**
 * The response bodies of `POST /v1/chat/completions`: the whole completion and the streamed chunk.
 */

export type FinishReason = "stop" | "length" | "tool_calls" | "content_filter";

export type Usage = {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
  completion_tokens_details: { reasoning_tokens: number };
};

/** A tool call in a whole completion: `arguments` is JSON text. */
export type ToolCallObject = { id: string; type: "function"; function: { name: string; arguments: string } };

/** A streamed piece of a tool call: the first carries id, type and name; later ones argument text. */
export type ToolCallDelta = {
  index: number;
  id?: string;
  type?: "function";
  function: { name?: string; arguments: string };
};

/** One token's log probability; `bytes` are its UTF-8 bytes (null when it has none). */
export type TopLogprob = { token: string; logprob: number; bytes: number[] | null };
export type TokenLogprobEntry = TopLogprob & { top_logprobs: TopLogprob[] };
/** `choices[].logprobs`: set when the request asked for `logprobs`, else null. */
export type ChoiceLogprobs = { content: TokenLogprobEntry[] | null; refusal: null };

export type ChatCompletion = {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  system_fingerprint: string | null;
  choices: Array<{
    index: number;
    /** `reasoning_content`: a reasoning model's thinking, as vLLM, SGLang and DeepSeek send it. */
    message: { role: "assistant"; content: string | null; refusal: null; reasoning_content?: string; tool_calls?: ToolCallObject[] };
    logprobs: ChoiceLogprobs | null;
    finish_reason: FinishReason;
  }>;
  usage: Usage;
};

export type ChatCompletionChunk = {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  system_fingerprint: string | null;
  choices: Array<{
    index: number;
    delta: { role?: "assistant"; content?: string | null; reasoning_content?: string; refusal?: null; tool_calls?: ToolCallDelta[] };
    logprobs: ChoiceLogprobs | null;
    finish_reason: FinishReason | null;
  }>;
  /** Present (as `null`) on every chunk when usage was asked for; the last chunk carries it. */
  usage?: Usage | null;
};

/** Builds the usage object from exact token counts. */
export function makeUsage(promptTokens: number, completionTokens: number, cachedPromptTokens = 0, reasoningTokens = 0): Usage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: cachedPromptTokens },
    completion_tokens_details: { reasoning_tokens: reasoningTokens },
  };
}

/** The wire usage of engine token counts. */
export function usageOf(usage: { promptTokens: number; completionTokens: number; cachedPromptTokens: number; reasoningTokens?: number }): Usage {
  return makeUsage(usage.promptTokens, usage.completionTokens, usage.cachedPromptTokens, usage.reasoningTokens ?? 0);
}
