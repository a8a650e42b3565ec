/**
 * The request body of `POST /v1/chat/completions`, in the OpenAI spec's field order.
 * Unknown fields are accepted and dropped (zod's default), as OpenAI's clients expect.
 * Fields are `nullish` where the official SDKs may send `null` for "not set".
 */
import { z } from "zod";

const textPart = z.object({ type: z.literal("text"), text: z.string() });
const imagePart = z.object({
  type: z.literal("image_url"),
  image_url: z.object({ url: z.string(), detail: z.enum(["auto", "low", "high"]).nullish() }),
});
const audioPart = z.object({
  type: z.literal("input_audio"),
  input_audio: z.object({ data: z.string(), format: z.string() }),
});
const filePart = z.object({ type: z.literal("file"), file: z.record(z.string(), z.unknown()) });
const refusalPart = z.object({ type: z.literal("refusal"), refusal: z.string() });

const userContentPart = z.discriminatedUnion("type", [textPart, imagePart, audioPart, filePart], {
  error: "Each content part needs a 'type' of 'text', 'image_url', 'input_audio' or 'file'.",
});
const textContent = z.union([z.string(), z.array(textPart)], {
  error: "Expected a string or an array of text content parts.",
});

const toolCall = z.object({
  id: z.string(),
  type: z.literal("function"),
  function: z.object({ name: z.string(), arguments: z.string() }),
});

const systemMessage = z.object({ role: z.literal("system"), content: textContent, name: z.string().nullish() });
const developerMessage = z.object({ role: z.literal("developer"), content: textContent, name: z.string().nullish() });
const userMessage = z.object({
  role: z.literal("user"),
  content: z.union([z.string(), z.array(userContentPart)], {
    error: "Expected a string or an array of content parts.",
  }),
  name: z.string().nullish(),
});
const assistantMessage = z.object({
  role: z.literal("assistant"),
  content: z.union([z.string(), z.array(z.discriminatedUnion("type", [textPart, refusalPart]))]).nullish(),
  refusal: z.string().nullish(),
  name: z.string().nullish(),
  tool_calls: z.array(toolCall).nullish(),
});
const toolMessage = z.object({
  role: z.literal("tool"),
  content: textContent,
  tool_call_id: z.string(),
});

export const chatMessageSchema = z.discriminatedUnion(
  "role",
  [systemMessage, developerMessage, userMessage, assistantMessage, toolMessage],
  { error: "Each message needs a 'role' of 'system', 'developer', 'user', 'assistant' or 'tool'." },
);

/** OpenAI's rule for function and schema names. */
const functionName = z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, {
  error: "Expected a name of 1 to 64 letters, digits, underscores or dashes.",
});
const jsonSchema = z.record(z.string(), z.unknown(), { error: "Expected a JSON Schema object." });

const responseFormat = z.discriminatedUnion(
  "type",
  [
    z.object({ type: z.literal("text") }),
    z.object({ type: z.literal("json_object") }),
    z.object({
      type: z.literal("json_schema"),
      json_schema: z.object({
        name: functionName,
        description: z.string().nullish(),
        schema: jsonSchema.nullish(),
        strict: z.boolean().nullish(),
      }),
    }),
  ],
  { error: "Expected a 'type' of 'text', 'json_object' or 'json_schema'." },
);

const functionTool = z.object({
  type: z.literal("function", { error: "Only tools of type 'function' are supported." }),
  function: z.object({
    name: functionName,
    description: z.string().nullish(),
    parameters: jsonSchema.nullish(),
    strict: z.boolean().nullish(),
  }),
});

const toolChoice = z.union(
  [
    z.enum(["none", "auto", "required"]),
    z.object({ type: z.literal("function"), function: z.object({ name: z.string() }) }),
  ],
  { error: "Expected 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}." },
);

const probability = (min: number, max: number) => z.number().min(min).max(max).nullish();

export const chatCompletionRequestSchema = z.object({
  messages: z.array(chatMessageSchema).min(1),
  model: z.string().min(1),
  frequency_penalty: probability(-2, 2),
  /** Token id (a decimal string) → bias added to its logit, -100..100 (-100 bans the token); keys and range are checked by the serving layer, the vocabulary by the engine. */
  logit_bias: z.record(z.string(), z.number()).nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  max_completion_tokens: z.number().int().min(1).nullish(),
  /** Deprecated by OpenAI in favour of `max_completion_tokens`; both are honoured, the smaller wins. */
  max_tokens: z.number().int().min(1).nullish(),
  /** Choices to generate, each billed. */
  n: z.number().int().min(1).max(8).nullish(),
  presence_penalty: probability(-2, 2),
  response_format: responseFormat.nullish(),
  seed: z.number().int().nullish(),
  stop: z
    .union([z.string(), z.array(z.string()).max(4)], { error: "Expected a string or an array of up to 4 strings." })
    .nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
  temperature: probability(0, 2),
  top_p: probability(0, 1),
  tools: z.array(functionTool).nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  user: z.string().nullish(),
  // Deprecated function-calling fields, recognised only to refuse them clearly.
  functions: z.array(z.unknown()).nullish(),
  function_call: z.unknown().optional(),
  audio: z.unknown().optional(),
  modalities: z.array(z.string()).nullish(),
});

export type ChatCompletionRequest = z.infer<typeof chatCompletionRequestSchema>;
export type ChatMessage = z.infer<typeof chatMessageSchema>;
export type UserContentPart = z.infer<typeof userContentPart>;
export type ResponseFormatParam = z.infer<typeof responseFormat>;
