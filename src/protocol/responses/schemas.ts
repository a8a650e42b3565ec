/**
 * The Responses API's answers as zod schemas, for `/openapi.json`: the response resource, its
 * output items, a stream event, the input items list, a deletion and an input token count. The
 * types the server builds them with are in `resource.ts` and `events.ts`; tests check real
 * answers against schemas of their own, written from the specification (`test/helpers/responses-schemas.ts`).
 */
import { z } from "zod";
import { SERVICE_TIERS } from "../service-tiers.ts";

const integer = z.number().int();

const topLogprob = z.object({ token: z.string(), logprob: z.number(), bytes: z.array(integer) });
const logprob = topLogprob.extend({ top_logprobs: z.array(topLogprob) });
const itemStatus = z.enum(["in_progress", "completed", "incomplete"]);
const outputText = z.object({ type: z.literal("output_text"), text: z.string(), annotations: z.array(z.unknown()), logprobs: z.array(logprob) });
const refusal = z.object({ type: z.literal("refusal"), refusal: z.string() });

export const responseOutputItemSchema = z
  .discriminatedUnion("type", [
    z.object({ type: z.literal("message"), id: z.string(), status: itemStatus, role: z.literal("assistant"), content: z.array(z.discriminatedUnion("type", [outputText, refusal])) }),
    z.object({ type: z.literal("function_call"), id: z.string(), call_id: z.string(), name: z.string(), arguments: z.string().describe("JSON text."), status: itemStatus }),
    z.object({ type: z.literal("custom_tool_call"), id: z.string(), call_id: z.string(), name: z.string(), input: z.string().describe("The text the model wrote, matching the tool's grammar when it has one."), status: itemStatus }),
    z.object({
      type: z.literal("reasoning"),
      id: z.string(),
      summary: z.array(z.object({ type: z.literal("summary_text"), text: z.string() })),
      content: z.array(z.object({ type: z.literal("reasoning_text"), text: z.string() })),
      status: itemStatus,
    }),
  ])
  .describe("An item the model produced.");

const format = z.discriminatedUnion("type", [
  z.object({ type: z.literal("text") }),
  z.object({ type: z.literal("json_object") }),
  z.object({ type: z.literal("json_schema"), name: z.string(), description: z.string().nullable(), schema: z.record(z.string(), z.unknown()).nullable(), strict: z.boolean() }),
]);
const namedTool = z.object({ type: z.enum(["function", "custom"]), name: z.string() });
const toolChoiceMode = z.enum(["none", "auto", "required"]);

export const responseUsageSchema = z.object({
  input_tokens: integer,
  input_tokens_details: z.object({ cached_tokens: integer.describe("Prompt tokens served from the prefix cache (billed at the cached price).") }),
  output_tokens: integer,
  output_tokens_details: z.object({ reasoning_tokens: integer }),
  total_tokens: integer,
});

/** The Open Responses `ResponseResource`, as Turnpike answers it. */
export const responseResourceSchema = z.object({
  id: z.string(),
  object: z.literal("response"),
  created_at: integer,
  completed_at: integer.nullable(),
  status: z.enum(["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]),
  incomplete_details: z.object({ reason: z.enum(["max_output_tokens", "content_filter"]) }).nullable(),
  model: z.string(),
  previous_response_id: z.string().nullable(),
  instructions: z.string().nullable(),
  output: z.array(responseOutputItemSchema),
  error: z.object({ code: z.string(), message: z.string() }).nullable(),
  tools: z.array(
    z.discriminatedUnion("type", [
      z.object({ type: z.literal("function"), name: z.string(), description: z.string().nullable(), parameters: z.record(z.string(), z.unknown()).nullable(), strict: z.boolean().nullable() }),
      z.object({
        type: z.literal("custom"),
        name: z.string(),
        description: z.string().nullable(),
        format: z.discriminatedUnion("type", [z.object({ type: z.literal("text") }), z.object({ type: z.literal("grammar"), syntax: z.enum(["lark", "regex"]), definition: z.string() })]),
      }),
    ]),
  ),
  tool_choice: z.union([toolChoiceMode, namedTool, z.object({ type: z.literal("allowed_tools"), mode: toolChoiceMode, tools: z.array(namedTool) })]),
  truncation: z.enum(["auto", "disabled"]),
  parallel_tool_calls: z.boolean(),
  text: z.object({ format, verbosity: z.enum(["low", "medium", "high"]) }),
  top_p: z.number(),
  presence_penalty: z.number(),
  frequency_penalty: z.number(),
  top_logprobs: integer,
  temperature: z.number(),
  reasoning: z.object({ effort: z.string().nullable(), summary: z.string().nullable() }),
  usage: responseUsageSchema.nullable(),
  max_output_tokens: integer.nullable(),
  max_tool_calls: integer.nullable(),
  store: z.boolean(),
  background: z.boolean(),
  /** The tier that served it. */
  service_tier: z.enum(SERVICE_TIERS),
  metadata: z.record(z.string(), z.string()),
  safety_identifier: z.string().nullable(),
  prompt_cache_key: z.string().nullable(),
  user: z.string().nullable(),
});

/** One event of a response stream: its `type`, its `sequence_number`, and the fields of that type (see the README's list). */
export const responseStreamEventSchema = z.looseObject({ type: z.string(), sequence_number: integer }).describe("A stream event, named by its `event:` line and its `type`; numbered from 0.");

export const responseInputItemListSchema = z.object({
  object: z.literal("list"),
  data: z.array(z.looseObject({ type: z.string(), id: z.string() })),
  first_id: z.string().nullable(),
  last_id: z.string().nullable(),
  has_more: z.boolean(),
});

export const responseDeletedSchema = z.object({ id: z.string(), object: z.literal("response"), deleted: z.literal(true) });

export const inputTokenCountSchema = z.object({ object: z.literal("response.input_tokens"), input_tokens: integer });
