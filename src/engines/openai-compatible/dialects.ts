/**
 * What each kind of upstream server honours of the chat completion request, and how it wants a
 * few fields spelled. Conservative on purpose: a parameter a kind would silently ignore is left
 * out, so Turnpike answers a clear 400 naming it instead of a reply that quietly differs from
 * what was asked (and billed).
 *
 * Sources (read in their code and documentation, 2026-11):
 * - vLLM: every OpenAI sampling field, `n`, `logit_bias`, logprobs, tools with named, `required`
 *   and `none` choices, `parallel_tool_calls: false` (it keeps the first call), structured output;
 *   extra sampling fields `top_k`, `min_p`, `repetition_penalty`, `chat_template_kwargs`,
 *   `reasoning_effort`; `stream_options.continuous_usage_stats` (usage on every chunk).
 * - SGLang: the same fields and extras; whether it honours `parallel_tool_calls: false` depends
 *   on the tool parser, so that value is refused.
 * - llama-server: OpenAI fields with logprobs and `logit_bias`, tools (with `--jinja`) whose
 *   `tool_choice` is `auto`, `none` or `required` (a named choice is refused, but for one naming
 *   the only tool, sent as `required`), one choice only
 *   (`n` > 1 is refused); extras `top_k`, `min_p`, `chat_template_kwargs`, and `repeat_penalty`
 *   (Turnpike's `repetition_penalty`, renamed on the way).
 * - Ollama (`/v1`): temperature, top_p, penalties, seed, stop, response_format, tools; it
 *   documents `tool_choice`, `logit_bias` and `n` as unsupported (ignored), logprobs only in
 *   recent releases (refused here: older ones ignore them); `reasoning_effort` turns thinking on
 *   or off.
 * - OpenAI: everything; `reasoning_effort` for reasoning models.
 *
 * Which stop sequence ended a choice (`stopSequenceField`; Anthropic's `stop_sequence` needs it),
 * read on the choice's finishing chunk and kept only when it is one of the request's `stop`
 * strings (anything else, a token id above all, leaves the finish without one):
 * - vLLM: `stop_reason` on each choice, streamed and not: the stop string met, a stop token's id
 *   (a number), or null for the model's own end of text (its protocol: "The stop string or token
 *   id that caused the completion to stop, None if the completion finished for some other reason
 *   including encountering the EOS token").
 * - SGLang: `matched_stop` on each choice, streamed and not: the stop string met, or the token id
 *   that ended it (its end-of-text token too: `matched_stop: 151645` in `sglang-text.sse`).
 * - llama-server: nothing. Its chat completions' finish chunk is `{"finish_reason":"stop",
 *   "index":0,"delta":{}}` whether a stop string or end of text ended the reply
 *   (`llama-server-stop-sequence.sse`; in its source `stopping_word` goes only into the native
 *   `/completion` answer and its Anthropic `/v1/messages` one).
 * - Ollama and OpenAI: nothing (`finish_reason: "stop"` either way).
 *
 * Grammars (for custom tools' formats, see `custom-tool-plan.ts`): llama-server takes GBNF in
 * `grammar`; vLLM in `structured_outputs.grammar` (its xgrammar backend reads GBNF; older
 * releases spelled it `guided_grammar`, which later ones dropped: those are not served grammars
 * here); SGLang in `ebnf` (xgrammar, GBNF). Ollama and OpenAI's chat completions take none.
 */
import type { UpstreamKind, VendorField } from "./config-schema.ts";
import type { GenerationRequest } from "../engine.ts";
import { CHAT_PARAMETERS, parametersInUse, type ChatParameter } from "../parameters.ts";

export { parametersInUse };
import { UnsupportedParameterError } from "../../protocol/errors.ts";

/** The request parameters Turnpike knows (the embedded engine honours them all). */
const ALL_PARAMETERS = CHAT_PARAMETERS;

export type RequestParameter = ChatParameter;

/** How one kind of upstream speaks the chat completion API. */
export type Dialect = {
  readonly kind: UpstreamKind;
  /** Parameters it honours (`/v1/models` lists them; a request using another gets a 400 naming it). */
  readonly supportedParameters: readonly RequestParameter[];
  /** Vendor sampling fields it understands (the default of an entry's `vendor_fields`). */
  readonly vendorFields: readonly VendorField[];
  /** Whether `tool_choice` may name a function (else only `auto`, `none`, `required`). */
  readonly namedToolChoice: boolean;
  /** The field carrying the completion limit (OpenAI: `max_completion_tokens`, which counts reasoning tokens too). */
  readonly maxTokensField: "max_tokens" | "max_completion_tokens";
  /** Whether it reports usage on every chunk when asked (`stream_options.continuous_usage_stats`). */
  readonly continuousUsage: boolean;
  /**
   * Whether it reports its counts on every chunk when asked (llama-server's `timings_per_token`:
   * `timings` with `prompt_n`, `cache_n`, `predicted_n`), so a stream cut short is billed its real
   * prompt instead of the upper bound.
   */
  readonly timingsPerToken: boolean;
  /**
   * Whether sampling fields at OpenAI's defaults (temperature 1, top_p 1) are left out: OpenAI's
   * reasoning models refuse them even at those values. Other kinds get them always (their own
   * defaults differ: llama-server and Ollama sample at 0.8).
   */
  readonly omitDefaultSampling: boolean;
  /** Vendor fields it spells otherwise (Turnpike's name → the upstream's). */
  readonly vendorFieldNames: Readonly<Partial<Record<VendorField, string>>>;
  /**
   * Where it takes a GBNF grammar constraining the whole reply (`structured_outputs` meaning
   * `structured_outputs.grammar`); undefined: it takes none, so a custom tool's grammar cannot be enforced.
   */
  readonly grammarField: "grammar" | "structured_outputs" | "ebnf" | undefined;
  /**
   * The field of a finishing choice that names the stop string that ended it (see the file's
   * comment); undefined: the kind does not say, so no finish names one.
   */
  readonly stopSequenceField: "stop_reason" | "matched_stop" | undefined;
};

const without = (...excluded: RequestParameter[]): RequestParameter[] => ALL_PARAMETERS.filter((parameter) => !excluded.includes(parameter));

export const DIALECTS: Readonly<Record<UpstreamKind, Dialect>> = {
  vllm: {
    kind: "vllm",
    supportedParameters: [...ALL_PARAMETERS],
    vendorFields: ["top_k", "min_p", "repetition_penalty", "reasoning_effort", "chat_template_kwargs"],
    namedToolChoice: true,
    maxTokensField: "max_tokens",
    continuousUsage: true,
    timingsPerToken: false,
    omitDefaultSampling: false,
    vendorFieldNames: {},
    grammarField: "structured_outputs",
    stopSequenceField: "stop_reason",
  },
  sglang: {
    kind: "sglang",
    supportedParameters: without("parallel_tool_calls"),
    vendorFields: ["top_k", "min_p", "repetition_penalty", "reasoning_effort", "chat_template_kwargs"],
    namedToolChoice: true,
    maxTokensField: "max_tokens",
    continuousUsage: false,
    timingsPerToken: false,
    omitDefaultSampling: false,
    vendorFieldNames: {},
    grammarField: "ebnf",
    stopSequenceField: "matched_stop",
  },
  "llama-server": {
    kind: "llama-server",
    supportedParameters: without("n"),
    vendorFields: ["top_k", "min_p", "repetition_penalty", "chat_template_kwargs"],
    namedToolChoice: false,
    maxTokensField: "max_tokens",
    continuousUsage: false,
    timingsPerToken: true,
    omitDefaultSampling: false,
    vendorFieldNames: { repetition_penalty: "repeat_penalty" },
    grammarField: "grammar",
    stopSequenceField: undefined,
  },
  ollama: {
    kind: "ollama",
    supportedParameters: without("logit_bias", "logprobs", "top_logprobs", "n", "tool_choice", "parallel_tool_calls"),
    vendorFields: ["reasoning_effort"],
    namedToolChoice: false,
    maxTokensField: "max_tokens",
    continuousUsage: false,
    timingsPerToken: false,
    omitDefaultSampling: false,
    vendorFieldNames: {},
    grammarField: undefined,
    stopSequenceField: undefined,
  },
  openai: {
    kind: "openai",
    supportedParameters: [...ALL_PARAMETERS],
    vendorFields: ["reasoning_effort"],
    namedToolChoice: true,
    maxTokensField: "max_completion_tokens",
    continuousUsage: false,
    timingsPerToken: false,
    omitDefaultSampling: true,
    vendorFieldNames: {},
    grammarField: undefined,
    stopSequenceField: undefined,
  },
};

/**
 * What every kind honours: the dialect of a pool whose kind is not known yet (it is detected when
 * the engine opens). Plain `max_tokens`, no continuous usage, no vendor fields.
 */
export const COMMON_DIALECT: Dialect = {
  kind: "openai",
  supportedParameters: ALL_PARAMETERS.filter((parameter) => Object.values(DIALECTS).every((dialect) => dialect.supportedParameters.includes(parameter))),
  vendorFields: [],
  namedToolChoice: false,
  maxTokensField: "max_tokens",
  continuousUsage: false,
  timingsPerToken: false,
  omitDefaultSampling: false,
  vendorFieldNames: {},
  grammarField: undefined,
  stopSequenceField: undefined,
};

/** The dialect of a kind; the common one while the kind is unknown. */
export function dialectFor(kind: UpstreamKind | undefined): Dialect {
  return kind === undefined ? COMMON_DIALECT : DIALECTS[kind];
}

/** The upstream servers of a dialect, as refusals name them. */
export function upstreamsOf(dialect: Dialect): string {
  return dialect === COMMON_DIALECT ? "this model's upstream servers" : `this model's upstream servers (${dialect.kind})`;
}

/**
 * Whether `tool_choice` names the request's only tool: then `required` asks the same (call it),
 * which kinds without a named choice (llama-server) understand. The Messages API's `tool_choice:
 * {type: "tool"}` with one tool, the usual way to force a call, is this.
 */
export function namesTheOnlyTool(request: Pick<GenerationRequest, "tools" | "toolChoice">): boolean {
  return typeof request.toolChoice === "object" && request.tools?.length === 1 && request.tools[0]!.name === request.toolChoice.name;
}

/**
 * Refuses what the upstream's kind cannot honour, naming the parameter (400
 * `unsupported_parameter`): a parameter outside its capability map, a named `tool_choice` where
 * only `auto`/`none`/`required` are understood (unless `toolChoiceByGrammar`: a forced custom
 * tool goes as a grammar, no `tool_choice` sent; or it names the only tool, sent as `required`),
 * or a vendor field it does not take.
 */
export function checkRequestForDialect(request: GenerationRequest, dialect: Dialect, vendorFields: readonly string[], toolChoiceByGrammar = false): void {
  const where = upstreamsOf(dialect);
  for (const parameter of parametersInUse(request)) {
    if (!dialect.supportedParameters.includes(parameter)) {
      throw new UnsupportedParameterError(`'${parameter}' is not supported by ${where}: they would ignore it. GET /v1/models lists each model's supported parameters.`, parameter);
    }
  }
  if (typeof request.toolChoice === "object" && !dialect.namedToolChoice && !toolChoiceByGrammar && !namesTheOnlyTool(request)) {
    throw new UnsupportedParameterError(
      `A 'tool_choice' naming a function is not supported by ${where}; use 'required' (with only that tool in 'tools') instead.`,
      "tool_choice",
    );
  }
  for (const field of Object.keys(request.vendor ?? {})) {
    if (!vendorFields.includes(field)) {
      throw new UnsupportedParameterError(`'${field}' is not supported by ${where}.`, field);
    }
  }
}
