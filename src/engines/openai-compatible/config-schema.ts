/**
 * The options of a model entry the upstream engine reads: its pool of OpenAI-compatible servers
 * (`upstream`), the context length it may declare, and what requests may pass through to it.
 * The engine owns them; the settings (`config/model-entry.ts`) compose them into a model entry
 * with the embedded engine's.
 */
import { z } from "zod";
import { VENDOR_FIELDS, type VendorField } from "../../protocol/generation.ts";

/** The kinds of upstream server Turnpike speaks to; each has its own dialect (see `dialects.ts`). */
export const UPSTREAM_KINDS = ["vllm", "sglang", "llama-server", "ollama", "openai"] as const;
export type UpstreamKind = (typeof UPSTREAM_KINDS)[number];

/** Vendor sampling fields a model entry may let requests pass through to its engine: one list, beside the generation request that carries them. */
export { VENDOR_FIELDS, type VendorField };

const upstreamUrlSchema = z.string().regex(/^https?:\/\/[^\s]+$/, "must be an http:// or https:// URL");

/**
 * One member of a pool: its base URL, or `{url, name}`. The name labels it in `/metrics` and the
 * logs (default `<model id>#<index>`); the URL appears only in the log.
 */
export const upstreamMemberSchema = z.union([
  upstreamUrlSchema,
  z.object({
    url: upstreamUrlSchema,
    name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, "must be 1 to 64 letters, digits and . _ - (starting with a letter or digit)"),
  }),
]);
export type UpstreamMember = z.infer<typeof upstreamMemberSchema>;

/** The JSON types a model entry may declare for a `chat_template_kwargs` key. */
export const TEMPLATE_KWARG_TYPES = ["boolean", "string", "number", "integer"] as const;
export type TemplateKwargType = (typeof TEMPLATE_KWARG_TYPES)[number];

/** A pool of OpenAI-compatible servers serving one model. */
export const upstreamSchema = z.object({
  /** Detected by probing when absent. */
  kind: z.enum(UPSTREAM_KINDS).optional(),
  /** Base URLs ending in `/v1` (a missing `/v1` is added), or `{url, name}`; one per member of the pool. */
  urls: z
    .array(upstreamMemberSchema)
    .min(1)
    .max(256)
    .refine((members) => {
      const names = members.flatMap((member) => (typeof member === "string" ? [] : [member.name]));
      return new Set(names).size === names.length;
    }, "member names must be unique"),
  /** The model's name upstream; default: the entry's id. */
  model: z.string().min(1).optional(),
  /** The environment variable holding the upstreams' API key (sent as a bearer token; never logged). */
  api_key_env: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name").optional(),
  /** Requests one member runs at once; more wait in the model's queue. */
  max_in_flight: z.number().int().min(1).max(100_000).default(64),
  /** Seconds to open a connection to a member before trying the next. */
  connect_timeout: z.number().positive().max(600).default(5),
  /** Seconds to wait for the first token before trying the next member (nothing was sent yet). */
  first_token_timeout: z.number().positive().max(3600).default(60),
  /** Seconds a stream may go without a chunk once it began before it is ended with an error. */
  idle_timeout: z.number().positive().max(3600).default(60),
  /** Members tried for one request at most (the first included). */
  max_attempts: z.number().int().min(1).max(16).default(3),
  /** Seconds between health probes of each member. */
  health_interval: z.number().positive().max(3600).default(5),
  /**
   * The members were started with priority scheduling (vLLM `--scheduling-policy priority`, SGLang
   * `--enable-priority-scheduling`): each request carries its service tier's band as the `priority`
   * field, so the upstream's own queue orders them too. Off by default: vLLM refuses a `priority`
   * other than 0 when it was started without it.
   */
  priority_scheduling: z.boolean().default(false),
});

export type UpstreamEntry = z.infer<typeof upstreamSchema>;

export const upstreamModelOptionsSchema = z.object({
  /** Served by a pool of OpenAI-compatible servers instead of in this process. */
  upstream: upstreamSchema.optional(),
  /** For upstream models: tokens per request (prompt + completion); default: what the upstream reports. */
  context_length: z.number().int().min(64).optional(),
  /** Vendor sampling fields requests may pass through; default: those the upstream's kind understands (none for embedded models). */
  vendor_fields: z.array(z.enum(VENDOR_FIELDS)).optional(),
  /**
   * The `chat_template_kwargs` keys requests may pass, each with its JSON type (e.g.
   * `{ enable_thinking: "boolean" }`); others are refused. Absent: any key (within the request's bounds).
   */
  chat_template_kwargs: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be a template variable name"), z.enum(TEMPLATE_KWARG_TYPES)).optional(),
});

export type UpstreamModelOptions = z.infer<typeof upstreamModelOptionsSchema>;

/** A model entry served upstream, as this engine reads it: the settings' model entries with an `upstream` are these. */
export type UpstreamModelEntry = Omit<UpstreamModelOptions, "upstream"> & {
  id: string;
  upstream: UpstreamEntry;
  /** What the model reads; default text only. */
  input_modalities?: readonly ("text" | "image")[];
  /** The fill-in-the-middle token texts, for kinds that build no FIM prompt (vLLM, SGLang). */
  fim?: { prefix: string; suffix: string; middle: string };
  /** The entry's embeddings options: the vectors' length, until the first answer says it. */
  embeddings?: { dimensions?: number };
};
