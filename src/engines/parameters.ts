/**
 * The request parameters an engine may honour, and the one list of which of them a request uses:
 * read against an engine's `capabilities().supportedParameters` by every dialect (a 400 naming
 * the parameter, in the dialect's own spelling) and by the upstream engine against its kind.
 * Parameters carry their chat completions names; a dialect that spells one otherwise
 * (`max_output_tokens`, `text.format`) names it so in its refusals.
 */
import type { GenerationRequest } from "../protocol/generation.ts";
import { UnsupportedParameterError } from "../protocol/errors.ts";

/** Every request parameter an engine may honour (the embedded engine honours them all; upstream kinds some). */
export const CHAT_PARAMETERS = [
  "max_tokens",
  "max_completion_tokens",
  "temperature",
  "top_p",
  "frequency_penalty",
  "presence_penalty",
  "logit_bias",
  "logprobs",
  "top_logprobs",
  "n",
  "stop",
  "seed",
  "response_format",
  "tools",
  "tool_choice",
  "parallel_tool_calls",
  "stream",
  "stream_options",
  "user",
] as const;

export type ChatParameter = (typeof CHAT_PARAMETERS)[number];

/**
 * The parameters a request really uses: those whose value changes the reply. A default value
 * (`n` 1, `parallel_tool_calls` true, `tool_choice` auto) asks nothing of the engine, so one
 * that ignores the field still answers as asked.
 */
export function parametersInUse(request: GenerationRequest): ChatParameter[] {
  const used: ChatParameter[] = [];
  const sampling = request.sampling;
  if (sampling.temperature !== 1) used.push("temperature");
  if (sampling.topP !== 1) used.push("top_p");
  if (sampling.frequencyPenalty !== 0) used.push("frequency_penalty");
  if (sampling.presencePenalty !== 0) used.push("presence_penalty");
  if (sampling.logitBias !== undefined && sampling.logitBias.size > 0) used.push("logit_bias");
  if (request.logprobs !== undefined) used.push("logprobs");
  if (request.logprobs !== undefined && request.logprobs.top > 0) used.push("top_logprobs");
  // A text completion's choices are its prompts × `n`: several prompts ask nothing of `n`.
  if ((request.completion?.n ?? request.choices) > 1) used.push("n");
  if (sampling.stop.length > 0) used.push("stop");
  if (sampling.seed !== undefined) used.push("seed");
  if (request.responseFormat !== undefined && request.responseFormat.type !== "text") used.push("response_format");
  if (request.tools !== undefined && request.tools.length > 0) used.push("tools");
  if (request.toolChoice !== undefined && request.toolChoice !== "auto") used.push("tool_choice");
  if (request.parallelToolCalls === false) used.push("parallel_tool_calls");
  return used;
}

/** What a model's engine says it honours (`Engine.capabilities()`), as far as the checks need it. */
export type SupportedFeatures = { supportedParameters: readonly string[]; vendorFields: readonly string[] };

/**
 * Refuses (400 `unsupported_parameter`) a request that uses a parameter or a vendor field the
 * model's engine does not honour (an upstream that would silently ignore it, say), naming it as
 * the client's dialect spells it (`nameOf`; chat's names by default).
 */
export function checkSupported(modelId: string, features: SupportedFeatures, request: GenerationRequest, nameOf: (parameter: string) => string = (parameter) => parameter): void {
  for (const parameter of parametersInUse(request)) {
    if (features.supportedParameters.includes(parameter)) continue;
    const name = nameOf(parameter);
    throw new UnsupportedParameterError(`Model '${modelId}' does not support '${name}'. GET /v1/models lists each model's supported_parameters.`, name);
  }
  for (const field of Object.keys(request.vendor ?? {})) {
    if (features.vendorFields.includes(field)) continue;
    const name = nameOf(field);
    throw new UnsupportedParameterError(
      `Model '${modelId}' does not take '${name}': vendor sampling fields pass only to models whose entry allows them. GET /v1/models lists each model's supported_parameters.`,
      name,
    );
  }
}
