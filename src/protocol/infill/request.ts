/**
 * The request body of `POST /infill`: llama-server's native fill-in-the-middle endpoint, which
 * editor plugins (llama.vim, llama.vscode) call. Its field names and defaults are llama-server's
 * (`tools/server/server-context.cpp`'s infill handler, `format_prompt_infill`), with `model`
 * added (optional: see the route). Unknown fields are accepted and dropped, as llama-server does.
 *
 * Read and honoured: `input_prefix`, `input_suffix`, `input_extra`, `prompt`, `n_predict`,
 * `temperature`, `top_k`, `top_p`, `min_p`, `seed`, `stop`, `stream`, `n_indent`,
 * `t_max_predict_ms`, `response_fields`. Accepted and ignored, as they change no text:
 * `cache_prompt` (Turnpike reuses prompt prefixes by itself), `id_slot` (slots are Turnpike's to
 * choose), `t_max_prompt_ms` (llama-server reads it no more either), `samplers` (the sampler
 * order: Turnpike's is fixed; llama.vscode's `["top_k", "top_p", "infill"]` samples as top-k then
 * top-p here, without llama.cpp's infill sampler). Refused: a non-empty `lora` (no adapters here).
 * Every array is counted, and every string bounded, before its items are read (the request caps).
 */
import { z } from "zod";
import { REQUEST_LIMITS } from "../chat-completions/request.ts";

/** Caps on an infill request, besides those it shares with chat (`REQUEST_LIMITS`). */
export const INFILL_LIMITS = {
  /** Files in `input_extra` (llama.vim's ring buffer holds 16 by default). */
  extraChunks: 256,
  /** Characters of one file name in `input_extra`. */
  filename: 4096,
  /** Entries of `response_fields` and of `samplers`. */
  fieldList: 64,
  /** Characters of one entry of `response_fields` or `samplers`. */
  fieldName: 256,
} as const;

/** llama-server's defaults for the sampling fields a request leaves out (`common_params_sampling`). */
export const INFILL_DEFAULTS = { temperature: 0.8, topP: 0.95 } as const;

/** An array whose length is checked before zod reads any item. */
function countedArray<Item extends z.ZodType>(item: Item, max: number, what: string) {
  return z
    .custom<unknown[]>((input) => Array.isArray(input), { error: `Expected an array of ${what}.` })
    .check((context) => {
      if (context.value.length > max) context.issues.push({ code: "custom", message: `must hold at most ${max} ${what}, got ${context.value.length}.`, input: undefined });
    })
    .pipe(z.array(item));
}

/** One file of `input_extra`: its text and (llama-server's default `tmp`) its name; other fields (llama.vim's `time`) dropped. */
const extraChunk = z.object({
  filename: z.string().max(INFILL_LIMITS.filename).nullish(),
  text: z.string({ error: "Each 'input_extra' item must have a string 'text'." }),
});

const stop = z.union([z.string().max(REQUEST_LIMITS.stopLength), z.array(z.string().max(REQUEST_LIMITS.stopLength)).max(REQUEST_LIMITS.stopSequences)], {
  error: `Expected a string or an array of up to ${REQUEST_LIMITS.stopSequences} strings, each of at most ${REQUEST_LIMITS.stopLength} characters.`,
});

const fieldName = z.string().max(INFILL_LIMITS.fieldName);

export const infillRequestSchema = z
  .object({
    /** Turnpike's own: the model; absent (or blank), the one model on offer that fills in the middle. */
    model: z.string().max(REQUEST_LIMITS.name).nullish(),
    /** The text before the gap. */
    input_prefix: z.string({ error: "'input_prefix' is required: the text before the gap (a string)." }),
    /** The text after the gap (may be empty). */
    input_suffix: z.string({ error: "'input_suffix' is required: the text after the gap (a string, may be empty)." }),
    /** Other files of the project, as context before the prefix: `[{filename, text}]`. */
    input_extra: countedArray(extraChunk, INFILL_LIMITS.extraChunks, "files").nullish(),
    /** Text the middle starts with (after the prefix; special tokens in it are parsed). */
    prompt: z.string({ error: "'prompt' must be a string." }).nullish(),
    /** Tokens to generate at most; -1 (the default): as many as the context leaves; 0: none (the prompt alone, as a cache warm-up). */
    n_predict: z.number().int().min(-1).max(REQUEST_LIMITS.completionTokens).nullish(),
    /** llama-server's default 0.8; 0 is greedy. */
    temperature: z.number().min(0).max(2).nullish(),
    /** Sample from the k likeliest tokens (0 or -1: all). */
    top_k: z.number().int().min(-1).max(1_000_000).nullish(),
    /** llama-server's default 0.95. */
    top_p: z.number().min(0).max(1).nullish(),
    /** Drop tokens less likely than this fraction of the likeliest (models whose engine takes `min_p`). */
    min_p: z.number().min(0).max(1).nullish(),
    /** A seed for sampling; -1 (llama-server's "random"): none. */
    seed: z.number().int().nullish(),
    stop: stop.nullish(),
    stream: z.boolean().nullish(),
    /** Once a line was generated, stop at a line indented less than this many spaces or tabs (the line is cut). */
    n_indent: z.number().int().min(0).max(1_000_000).nullish(),
    /** Once a line was generated, stop at the next line break after this many milliseconds of generation (0: never). */
    t_max_predict_ms: z.number().int().min(0).nullish(),
    /** Only these fields of the reply, each a path (`timings/prompt_n`), as flat keys. */
    response_fields: countedArray(fieldName, INFILL_LIMITS.fieldList, "field names").nullish(),
    // Accepted and ignored (see the file's comment).
    cache_prompt: z.boolean().nullish(),
    id_slot: z.number().int().nullish(),
    t_max_prompt_ms: z.number().int().nullish(),
    samplers: z.union([fieldName, countedArray(fieldName, INFILL_LIMITS.fieldList, "sampler names")]).nullish(),
    /** LoRA adapters: Turnpike serves none, so only an empty list (or none) is taken. */
    lora: z.array(z.unknown()).max(0, "Turnpike serves no LoRA adapters: leave 'lora' out.").nullish(),
  });

export type InfillRequest = z.infer<typeof infillRequestSchema>;
