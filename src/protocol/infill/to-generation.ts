/**
 * llama-server's `/infill` request → the generation request: a fill-in-the-middle text completion
 * (`input_prefix` the prompt, `input_suffix` the suffix, `input_extra` the extra files, `prompt`
 * the middle's start), one choice, llama-server's sampling defaults for what the body leaves out.
 * Linear in the body; nothing is tokenized here.
 */
import type { GenerationRequest } from "../generation.ts";
import { INFILL_DEFAULTS, type InfillRequest } from "./request.ts";

/** llama-server's default name of an extra file that has none. */
const DEFAULT_FILENAME = "tmp";

/** The engine request for a validated infill request. */
export function toInfillGeneration(request: InfillRequest): GenerationRequest {
  const stop = request.stop == null ? [] : typeof request.stop === "string" ? [request.stop] : request.stop;
  const vendor: Record<string, unknown> = {};
  // 0 and -1 ask for no top-k cut: nothing to pass.
  if (request.top_k != null && request.top_k > 0) vendor.top_k = request.top_k;
  if (request.min_p != null) vendor.min_p = request.min_p;
  const extra = (request.input_extra ?? []).map((chunk) => ({ filename: chunk.filename ?? DEFAULT_FILENAME, text: chunk.text }));
  return {
    messages: [],
    completion: {
      prompts: [{ text: request.input_prefix }],
      n: 1,
      suffix: request.input_suffix,
      ...(extra.length > 0 ? { extra } : {}),
      ...(request.prompt != null && request.prompt !== "" ? { middle: request.prompt } : {}),
    },
    sampling: {
      temperature: request.temperature ?? INFILL_DEFAULTS.temperature,
      topP: request.top_p ?? INFILL_DEFAULTS.topP,
      // llama-server's -1: a random seed.
      seed: request.seed == null || request.seed < 0 ? undefined : request.seed,
      frequencyPenalty: 0,
      presencePenalty: 0,
      stop: stop.filter((sequence) => sequence.length > 0),
    },
    // -1 (llama-server's default): as many as the context leaves.
    maxTokens: request.n_predict == null || request.n_predict < 0 ? undefined : request.n_predict,
    choices: 1,
    ...(Object.keys(vendor).length > 0 ? { vendor } : {}),
  };
}
