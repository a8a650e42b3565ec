/**
 * The response bodies of `POST /infill`, in llama-server's shape (its `to_json_non_oaicompat`):
 * the whole result, and with `stream` its partial events (`stop: false`, a piece of `content`)
 * then the final one (`stop: true`, empty `content`, the totals and `timings`). No `[DONE]`
 * line ends the stream, as llama-server sends none on `/infill`. With `response_fields`, the
 * final object holds only those paths, each a flat key (`"timings/prompt_n": 12`).
 */
import { z } from "zod";

/** Why generation stopped, as llama-server says it: the model's end token, a stop string, a limit (`n_predict`, `n_indent`, `t_max_predict_ms`), or none (cut short). */
export const infillStopTypeSchema = z.enum(["eos", "word", "limit", "none"]);
export type InfillStopType = z.infer<typeof infillStopTypeSchema>;

export const infillTimingsSchema = z.object({
  /** Prompt tokens reused from the cache. */
  cache_n: z.number().int(),
  /** Prompt tokens evaluated (not from the cache). */
  prompt_n: z.number().int(),
  /** Milliseconds from the request's admission to its first generated text (a wait for a free slot included). */
  prompt_ms: z.number(),
  prompt_per_token_ms: z.number(),
  prompt_per_second: z.number(),
  /** Tokens generated. */
  predicted_n: z.number().int(),
  /** Milliseconds from the first generated text to the last. */
  predicted_ms: z.number(),
  predicted_per_token_ms: z.number(),
  predicted_per_second: z.number(),
});
export type InfillTimings = z.infer<typeof infillTimingsSchema>;

export const infillResultSchema = z.object({
  index: z.number().int(),
  /** The middle (empty in a stream's final event, whose pieces came before). */
  content: z.string(),
  /** Token ids (llama-server's `return_tokens`): always empty here. */
  tokens: z.array(z.number().int()),
  /** Turnpike exposes no slots: always -1. */
  id_slot: z.number().int(),
  stop: z.literal(true),
  /** The model's id. */
  model: z.string(),
  /** Completion tokens generated (billed). */
  tokens_predicted: z.number().int(),
  /** Prompt tokens (billed). */
  tokens_evaluated: z.number().int(),
  /** Whether the middle has a line break. */
  has_new_line: z.boolean(),
  /** Whether the context ran out (Turnpike refuses such a request instead: always false). */
  truncated: z.boolean(),
  stop_type: infillStopTypeSchema,
  /** The stop string that ended it (`stop_type` `word`), else empty. */
  stopping_word: z.string(),
  /** Tokens of the prompt and the middle held in the cache at the end. */
  tokens_cached: z.number().int(),
  timings: infillTimingsSchema,
});
export type InfillResult = z.infer<typeof infillResultSchema>;

/** A streamed piece of the middle. */
export const infillPartialSchema = z.object({
  index: z.number().int(),
  content: z.string(),
  tokens: z.array(z.number().int()),
  stop: z.literal(false),
  id_slot: z.number().int(),
  /** Completion tokens so far. */
  tokens_predicted: z.number().int(),
  tokens_evaluated: z.number().int(),
});
export type InfillPartial = z.infer<typeof infillPartialSchema>;

/** The `data` of each event of a streamed infill: pieces, then the final result. */
export const infillEventSchema = z.union([infillPartialSchema, infillResultSchema]);
/** A final result narrowed to `response_fields`: flat keys (paths) to values. */
export type InfillEvent = InfillPartial | InfillResult | Record<string, unknown>;
