/**
 * The request body of `POST /v1/embeddings`, in the OpenAI spec's field order, Turnpike's
 * extension (`truncate`) after. Unknown fields are accepted and dropped, as OpenAI's clients
 * expect. `input` is read by hand (one pass, no union retried per branch) so that a refusal names
 * the exact item: `input[3]` for an empty string, `input[1][7]` for a token id that is not one.
 */
import { z } from "zod";

/** Caps on an embeddings request, checked before anything looks at its inputs (the README lists them). */
export const EMBEDDING_LIMITS = {
  /** Inputs in one request (OpenAI's: 2048). */
  inputs: 2048,
  /** Tokens in one request, all inputs summed (OpenAI's: 300,000). */
  tokensPerRequest: 300_000,
  /** Characters of `model` and `user`. */
  name: 256,
} as const;

/** One input as the engines take it (the engines' `EmbeddingInput`): text, or token ids. */
export type EmbeddingItem = { text: string } | { tokens: number[] };

/** What `input` may be: a string, strings, token ids, or arrays of token ids. */
export type EmbeddingsInput = string | string[] | number[] | number[][];

type Issue = { path: PropertyKey[]; message: string };

/** A token id: a non-negative integer (the engine checks it is in the model's vocabulary). */
function isTokenId(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= 0;
}

/** The first thing wrong with a token array (`path` is its place), or undefined. */
function tokenArrayIssue(tokens: readonly unknown[], path: PropertyKey[]): Issue | undefined {
  if (tokens.length === 0) return { path, message: "must not be empty: an input needs at least one token." };
  for (let index = 0; index < tokens.length; index++) {
    if (!isTokenId(tokens[index])) return { path: [...path, index], message: "expected a token id (an integer of at least 0)." };
  }
  return undefined;
}

/** The first thing wrong with `input`, or undefined. Linear in its size; counts are checked before items are read. */
function inputIssue(input: unknown): Issue | undefined {
  const shapes = "expected a string, an array of strings, an array of token ids or an array of token-id arrays.";
  if (typeof input === "string") return input === "" ? { path: [], message: "must not be empty." } : undefined;
  if (!Array.isArray(input)) return { path: [], message: input === undefined ? "this field is required." : shapes };
  if (input.length === 0) return { path: [], message: "must not be empty: send at least one input." };
  if (input.length > EMBEDDING_LIMITS.inputs && !input.every(isTokenId)) {
    return { path: [], message: `must have at most ${EMBEDDING_LIMITS.inputs} inputs, got ${input.length}.` };
  }
  const first = input[0];
  if (typeof first === "string") {
    for (let index = 0; index < input.length; index++) {
      const item: unknown = input[index];
      if (typeof item !== "string") return { path: [index], message: "expected a string: an array of strings holds only strings." };
      if (item === "") return { path: [index], message: "must not be empty." };
    }
    return undefined;
  }
  if (typeof first === "number") return tokenArrayIssue(input, []);
  if (Array.isArray(first)) {
    for (let index = 0; index < input.length; index++) {
      const item: unknown = input[index];
      if (!Array.isArray(item)) return { path: [index], message: "expected an array of token ids: an array of token arrays holds only arrays." };
      const issue = tokenArrayIssue(item, [index]);
      if (issue !== undefined) return issue;
    }
    return undefined;
  }
  return { path: [0], message: shapes };
}

const embeddingsInput = z.custom<EmbeddingsInput>(() => true).check((context) => {
  const issue = inputIssue(context.value);
  if (issue !== undefined) context.issues.push({ code: "custom", path: issue.path, message: issue.message, input: context.value });
});

export const embeddingsRequestSchema = z.object({
  input: embeddingsInput.describe(
    `The text to embed: a string, an array of strings, an array of token ids, or an array of token-id arrays; at most ${EMBEDDING_LIMITS.inputs} inputs, none empty, each within the model's context (see \`truncate\`), ${EMBEDDING_LIMITS.tokensPerRequest.toLocaleString("en-US")} tokens in all.`,
  ),
  model: z.string().max(EMBEDDING_LIMITS.name),
  encoding_format: z
    .enum(["float", "base64"])
    .nullish()
    .describe("`float` (default): arrays of numbers; `base64`: each vector's little-endian float32 bytes, base64-encoded (what the `openai` SDKs ask for and decode)."),
  dimensions: z
    .number()
    .int()
    .min(1)
    .nullish()
    .describe("The vector's length: the model's own, or less for a model whose entry declares it Matryoshka-trained (the vector is cut and normalised again)."),
  user: z.string().max(EMBEDDING_LIMITS.name).nullish(),
  // Turnpike's extension.
  truncate: z
    .boolean()
    .nullish()
    .describe("Turnpike's extension: an input longer than the model's context is cut to fit (its end is dropped) instead of refused with a 400 naming it. Default false."),
});
export type EmbeddingsRequest = z.infer<typeof embeddingsRequestSchema>;

/** The request's inputs, one per vector, in the order their vectors come back. */
export function embeddingInputsOf(input: EmbeddingsInput): EmbeddingItem[] {
  if (typeof input === "string") return [{ text: input }];
  if (input.length === 0) return [];
  const first = input[0];
  if (typeof first === "string") return (input as string[]).map((text) => ({ text }));
  if (typeof first === "number") return [{ tokens: input as number[] }];
  return (input as number[][]).map((tokens) => ({ tokens }));
}

/** Where input `index` is, as `param` names it: `input` for a lone input, `input[3]` in an array. */
export function inputParam(input: EmbeddingsInput, index: number): string {
  return typeof input === "string" || typeof input[0] === "number" ? "input" : `input[${index}]`;
}
