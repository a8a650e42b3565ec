/**
 * The table of `turnpike serve` settings, the one place each is written: its key (in the
 * settings and the JSON config file), flag, environment variable, schema, default and meaning.
 * The settings schema (`schema.ts`), the loader, `--help` and the README reference all come from
 * here, so a default is written once.
 */
import os from "node:os";
import { z } from "zod";
import { creditValueSchema } from "../protocol/credit-value.ts";
import { modelEntrySchema } from "./model-entry.ts";
import { secretOrNull } from "./secret.ts";

/** How a flag's or variable's text becomes the setting's input: as is, a number, or a list of models. */
export type OptionKind = "string" | "integer" | "number" | "models" | "upstreams";

export type OptionSpec<Schema extends z.ZodType = z.ZodType> = {
  flag: string;
  env: string;
  kind: OptionKind;
  /** Validates (and converts) the value from any source; the default goes through it too. */
  schema: Schema;
  /** The value when no source gives one, as a config file would write it. */
  default: z.input<Schema>;
  /** The default as `--help` and the README show it; the default itself when absent. */
  defaultText?: string;
  /** Shown in `--help` and the README. */
  description: string;
  /** Never logged, and only from the environment, a flag or the file, never echoed back. */
  secret?: boolean;
  /** Only from a flag or the environment (the config file's own name). */
  notInFile?: boolean;
};

function option<Schema extends z.ZodType>(spec: OptionSpec<Schema>): OptionSpec<Schema> {
  return spec;
}

/** `--image-urls`: which image URLs vision upstreams may be sent (see `http/image-urls/image-url-guard.ts`). */
export const IMAGE_URL_POLICIES = ["public-https", "public", "any", "none"] as const;

const seconds = (max?: number) => (max === undefined ? z.number().positive() : z.number().positive().max(max));
const secret = z.string().transform(secretOrNull);

/** Every `turnpike serve` setting, in the order `--help` and the README list them. */
export const serveOptions = {
  config: option({
    flag: "--config <file>",
    env: "TURNPIKE_CONFIG",
    kind: "string",
    schema: z.string(),
    default: "",
    defaultText: "none",
    notInFile: true,
    description: "a JSON file with these settings by key (and plans, and models in full); variables and flags override it",
  }),
  host: option({ flag: "--host <host>", env: "TURNPIKE_HOST", kind: "string", schema: z.string().min(1), default: "127.0.0.1", description: "address to listen on" }),
  port: option({ flag: "--port <port>", env: "TURNPIKE_PORT", kind: "integer", schema: z.number().int().min(0).max(65535), default: 8080, description: "port to listen on (0 picks a free one)" }),
  data_dir: option({ flag: "--data-dir <dir>", env: "TURNPIKE_DATA_DIR", kind: "string", schema: z.string().min(1), default: "./data", description: "the SQLite database and downloaded models" }),
  database_url: option({
    flag: "--database-url <url>",
    env: "TURNPIKE_DATABASE_URL",
    kind: "string",
    schema: z.string().regex(/^(postgres(ql)?:\/\/.+)?$/, "must be a postgres:// URL (or empty for SQLite)"),
    default: "",
    defaultText: "SQLite in the data dir",
    description: "postgres://… to share state between several nodes",
  }),
  auto_migrate: option({
    flag: "--auto-migrate <bool>",
    env: "TURNPIKE_AUTO_MIGRATE",
    kind: "string",
    schema: z.union([z.boolean(), z.enum(["true", "false"]).transform((text) => text === "true")]),
    default: true,
    description: "apply pending database migrations at start (under a lock, so nodes starting together are safe); false: refuse to start on a database that needs them, for `turnpike migrate` to apply first",
  }),
  redis_url: option({
    flag: "--redis-url <url>",
    env: "TURNPIKE_REDIS_URL",
    kind: "string",
    schema: z.string().regex(/^(rediss?:\/\/.+)?$/, "must be a redis:// URL (or empty for in-memory limits)"),
    default: "",
    defaultText: "limits kept in memory",
    description: "redis://… to share rate limits and sign-in throttling between several nodes",
  }),
  models: option({
    flag: "--model <[id=]source>",
    env: "TURNPIKE_MODELS",
    kind: "models",
    schema: z.array(modelEntrySchema),
    default: [],
    defaultText: "the default model",
    description: "a model to serve: a .gguf path, or hf:owner/repo/file.gguf or an https:// URL downloaded once into <data-dir>/models; repeatable (comma-separated in the variable)",
  }),
  upstreams: option({
    flag: "--upstream <id=url[,url…]>",
    env: "TURNPIKE_UPSTREAMS",
    kind: "upstreams",
    // Appended to `models` once validated.
    schema: z.array(modelEntrySchema),
    default: [],
    defaultText: "none",
    description:
      "a model served by OpenAI-compatible servers (vLLM, SGLang, llama-server, Ollama, OpenAI), detected by probing: id=http://host:8000/v1, several URLs for a pool; repeatable (';'-separated in the variable)",
  }),
  metrics_listen: option({
    flag: "--metrics-listen <host:port>",
    env: "TURNPIKE_METRICS_LISTEN",
    kind: "string",
    schema: z.string().regex(/^$|^(?:\[[0-9A-Fa-f:.]+\]|[^\s:[\]]+):\d{1,5}$/, "must be host:port (or [ipv6]:port)"),
    default: "",
    defaultText: "the API's address",
    description: "serve GET /metrics on this address only (e.g. 10.0.0.2:9464, a private interface), not on the API's port",
  }),
  metrics_token: option({
    flag: "--metrics-token <token>",
    env: "TURNPIKE_METRICS_TOKEN",
    kind: "string",
    schema: secret,
    default: "",
    defaultText: "none: /metrics needs no token",
    secret: true,
    description: "GET /metrics then needs 'Authorization: Bearer <token>' (401 otherwise); never logged",
  }),
  parallel: option({ flag: "--parallel <n>", env: "TURNPIKE_PARALLEL", kind: "integer", schema: z.number().int().min(1).max(64), default: 4, description: "sequences generated at once per model" }),
  threads: option({
    flag: "--threads <n>",
    env: "TURNPIKE_THREADS",
    kind: "integer",
    // 0: pick from the cores available (`defaultThreads`).
    schema: z.number().int().min(0).max(1024),
    default: 0,
    defaultText: "cores - 1 (at least 1)",
    description: "llama.cpp threads; 0 picks from the cores available",
  }),
  context_size: option({
    flag: "--context-size <tokens>",
    env: "TURNPIKE_CONTEXT_SIZE",
    kind: "integer",
    schema: z.number().int().min(64),
    default: 4096,
    description: "largest context per sequence (capped at the model's training context)",
  }),
  gpu: option({ flag: "--gpu <backend>", env: "TURNPIKE_GPU", kind: "string", schema: z.enum(["auto", "cpu", "cuda", "vulkan", "metal"]), default: "auto", description: "auto, cpu, cuda, vulkan or metal" }),
  queue_size: option({ flag: "--queue-size <n>", env: "TURNPIKE_QUEUE_SIZE", kind: "integer", schema: z.number().int().min(0), default: 64, description: "requests that may wait for a slot per model; more get 503" }),
  queue_per_account: option({
    flag: "--queue-per-account <n>",
    env: "TURNPIKE_QUEUE_PER_ACCOUNT",
    kind: "integer",
    schema: z.number().int().min(0),
    default: 0,
    description: "requests one account may have waiting per model (more get 429 queue_share_exceeded); 0: half the queue",
  }),
  queue_policy: option({
    flag: "--queue-policy <policy>",
    env: "TURNPIKE_QUEUE_POLICY",
    kind: "string",
    schema: z.enum(["fair", "fifo"]),
    default: "fair",
    description: "who gets a free slot: fair (service tier, then the account served least, weighted by its plan) or fifo (service tier, then arrival)",
  }),
  flex_max_wait: option({
    flag: "--flex-max-wait <seconds>",
    env: "TURNPIKE_FLEX_MAX_WAIT",
    kind: "number",
    schema: seconds(3600),
    default: 30,
    description: "how long a service_tier flex request may wait for spare capacity before it gets 429 resource_unavailable",
  }),
  shutdown_timeout: option({
    flag: "--shutdown-timeout <seconds>",
    env: "TURNPIKE_SHUTDOWN_TIMEOUT",
    kind: "number",
    schema: z.number().min(0),
    default: 30,
    description: "how long running requests may finish once the server stops accepting (after the drain delay on SIGTERM, at once on SIGINT); then they are cut, billed for what they generated",
  }),
  drain_delay: option({
    flag: "--drain-delay <seconds>",
    env: "TURNPIKE_DRAIN_DELAY",
    kind: "number",
    schema: z.number().min(0).max(3600),
    default: 5,
    description:
      "on SIGTERM, /ready answers 503 at once but new requests are still served this long (for a load balancer's health check to notice) before the server stops accepting; SIGINT (Ctrl-C) skips it; a second signal cuts running requests and exits at once",
  }),
  keep_alive_interval: option({
    flag: "--keep-alive-interval <seconds>",
    env: "TURNPIKE_KEEP_ALIVE_INTERVAL",
    kind: "number",
    schema: seconds(),
    default: 5,
    description: "a stream quiet this long gets an SSE comment (waiting for a slot, a long prompt evaluation)",
  }),
  log_level: option({
    flag: "--log-level <level>",
    env: "TURNPIKE_LOG_LEVEL",
    kind: "string",
    schema: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]),
    default: "info",
    description: "fatal, error, warn, info, debug, trace or silent",
  }),
  log_format: option({
    flag: "--log-format <format>",
    env: "TURNPIKE_LOG_FORMAT",
    kind: "string",
    schema: z.enum(["auto", "pretty", "json"]),
    default: "auto",
    description: "auto (pretty on a terminal, JSON lines otherwise), pretty (a start banner and one readable line per record) or json",
  }),
  body_limit: option({ flag: "--body-limit <bytes>", env: "TURNPIKE_BODY_LIMIT", kind: "integer", schema: z.number().int().min(1024), default: 10 * 1024 * 1024, description: "largest request body" }),
  request_timeout: option({
    flag: "--request-timeout <seconds>",
    env: "TURNPIKE_REQUEST_TIMEOUT",
    kind: "number",
    schema: seconds(3600),
    default: 60,
    description: "a request's headers and body must arrive whole within this (a streamed response is not limited by it)",
  }),
  idle_timeout: option({ flag: "--idle-timeout <seconds>", env: "TURNPIKE_IDLE_TIMEOUT", kind: "number", schema: seconds(3600), default: 5, description: "an idle keep-alive connection is closed after this" }),
  max_connections: option({
    flag: "--max-connections <n>",
    env: "TURNPIKE_MAX_CONNECTIONS",
    kind: "integer",
    schema: z.number().int().min(0),
    default: 1024,
    description: "open connections at most; more are refused (0: no cap)",
  }),
  stall_timeout: option({
    flag: "--stall-timeout <seconds>",
    env: "TURNPIKE_STALL_TIMEOUT",
    kind: "number",
    schema: seconds(),
    default: 30,
    description: "a stream whose client stopped reading is paused, then cut after this (billed for what was generated)",
  }),
  public_url: option({
    flag: "--public-url <url>",
    env: "TURNPIKE_PUBLIC_URL",
    kind: "string",
    schema: z.string().regex(/^(https?:\/\/[^\s/]+\/?)?$/, "must be an http:// or https:// origin (or empty)"),
    default: "",
    defaultText: "http://host:port",
    description: "the address people use to reach this server: payment return links, the console's allowed origin and host",
  }),
  allowed_hosts: option({
    flag: "--allowed-hosts <hosts>",
    env: "TURNPIKE_ALLOWED_HOSTS",
    kind: "string",
    schema: z.string(),
    default: "",
    defaultText: "none",
    description: "more Host names accepted besides the public URL's, the listen address, localhost and IP addresses (comma-separated; .example.com for a domain and its names; others get 421)",
  }),
  image_urls: option({
    flag: "--image-urls <policy>",
    env: "TURNPIKE_IMAGE_URLS",
    kind: "string",
    schema: z.enum(IMAGE_URL_POLICIES),
    default: "public-https",
    description:
      "image URLs a vision upstream may be sent to fetch: public-https (data: URLs and https URLs whose host resolves to public addresses only), public (http too), none (data: URLs only) or any (unchecked: only behind an upstream firewalled on its own)",
  }),
  image_url_hosts: option({
    flag: "--image-url-hosts <hosts>",
    env: "TURNPIKE_IMAGE_URL_HOSTS",
    kind: "string",
    schema: z.string(),
    default: "",
    defaultText: "none",
    description: "image hosts that pass whatever --image-urls says and whatever they resolve to, over http or https (comma-separated; .example.com for a domain and its names)",
  }),
  trust_proxy: option({
    flag: "--trust-proxy <proxies>",
    env: "TURNPIKE_TRUST_PROXY",
    kind: "string",
    schema: z.string(),
    default: "",
    defaultText: "none",
    description: "believe X-Forwarded-* from reverse proxies: a hop count (1 for one proxy) or the proxies' addresses/subnets, comma-separated",
  }),
  signup: option({
    flag: "--signup <mode>",
    env: "TURNPIKE_SIGNUP",
    kind: "string",
    schema: z.enum(["open", "closed"]),
    default: "open",
    description: "open: anyone may sign up in the console; closed: accounts are made by admins or the CLI (and the first admin with the setup code)",
  }),
  max_keys_per_account: option({
    flag: "--max-keys-per-account <n>",
    env: "TURNPIKE_MAX_KEYS_PER_ACCOUNT",
    kind: "integer",
    schema: z.number().int().min(1).max(1_000_000),
    default: 500,
    description: "working keys (neither revoked nor expired) an account may hold; creating one more over /api is refused (409 too_many_keys). The CLI is not capped",
  }),
  change_feed: option({
    flag: "--change-feed <bool>",
    env: "TURNPIKE_CHANGE_FEED",
    kind: "string",
    schema: z.union([z.boolean(), z.enum(["true", "false"]).transform((text) => text === "true")]),
    default: true,
    description: "PostgreSQL: listen for the database's notifications of changed keys and accounts on a connection of this node's own, so a quiet key (and its account's plan) is checked from memory for up to a minute and a revocation anywhere is refused here as soon as it commits; false (or a pooler that drops LISTEN): keys are read again after 1 s",
  }),
  database_timeout: option({
    flag: "--database-timeout <seconds>",
    env: "TURNPIKE_DATABASE_TIMEOUT",
    kind: "number",
    schema: seconds(3600),
    default: 10,
    description: "PostgreSQL: a query that has not answered in this long fails (503 database_unavailable)",
  }),
  sweep_interval: option({
    flag: "--sweep-interval <seconds>",
    env: "TURNPIKE_SWEEP_INTERVAL",
    kind: "number",
    schema: seconds(3600),
    default: 10,
    description: "how often each node writes its heartbeat and sweeps dead nodes' holds, expired credit and expired stored responses",
  }),
  dead_node_after: option({
    flag: "--dead-node-after <seconds>",
    env: "TURNPIKE_DEAD_NODE_AFTER",
    kind: "number",
    schema: seconds(),
    default: 60,
    description: "a node whose heartbeat is this old is dead: its holds are released",
  }),
  hold_ttl: option({
    flag: "--hold-ttl <seconds>",
    env: "TURNPIKE_HOLD_TTL",
    kind: "number",
    schema: seconds(),
    default: 1800,
    description: "a hold older than this is released by the sweeper (longer than any generation may run)",
  }),
  lease_above: option({
    flag: "--lease-above <requests/s>",
    env: "TURNPIKE_LEASE_ABOVE",
    kind: "number",
    schema: z.number().min(0),
    default: 20,
    description: "a key sending this many requests a second is metered from credit leases, its usage written in group commits (0: always)",
  }),
  standing_lease_idle: option({
    flag: "--standing-lease-idle <seconds>",
    env: "TURNPIKE_STANDING_LEASE_IDLE",
    kind: "number",
    schema: z.number().min(0).max(3600),
    default: 10,
    description: "a quieter key that sends again within this long is served from a standing credit lease, kept while it keeps coming back (0: a hold of its own per request)",
  }),
  checkpoint_interval: option({
    flag: "--checkpoint-interval <seconds>",
    env: "TURNPIKE_CHECKPOINT_INTERVAL",
    kind: "number",
    schema: seconds(3600),
    default: 1,
    description: "a running request's usage is checkpointed this often (and every 64 tokens): what a killed node's streams are billed",
  }),
  responses_retention_days: option({
    flag: "--responses-retention-days <days>",
    env: "TURNPIKE_RESPONSES_RETENTION_DAYS",
    kind: "integer",
    schema: z.number().int().min(1).max(3650),
    default: 30,
    description: "stored Responses API responses (store: true) are kept this many days from their creation, then the sweeper deletes them (at least 1); each is at most 8 MiB",
  }),
  responses_commit_window: option({
    flag: "--responses-commit-window <ms>",
    env: "TURNPIKE_RESPONSES_COMMIT_WINDOW",
    kind: "integer",
    schema: z.number().int().min(0).max(1000),
    default: 10,
    description: "a finished response is stored in a group commit shared with the saves of this many milliseconds, off the response path (0: at once); another node may find it that much later",
  }),
  credit_value: option({
    flag: "--credit-value <currency:amount>",
    env: "TURNPIKE_CREDIT_VALUE",
    kind: "string",
    schema: creditValueSchema,
    default: null,
    defaultText: "unset: credits only",
    description:
      'what 1,000,000 credits cost, shown beside credit prices and costs (billing stays in credits): usd:1 means 1,000,000 credits cost 1 USD; in the file also {"currency": "usd", "per_million_credits": "1"}',
  }),
  stripe_secret_key: option({
    flag: "--stripe-secret-key <key>",
    env: "STRIPE_SECRET_KEY",
    kind: "string",
    schema: secret,
    default: "",
    defaultText: "none: no card payments",
    secret: true,
    description: "Stripe's secret API key (sk_…), to sell plans by card; never logged (prefer the variable over the flag, which other users may see)",
  }),
  stripe_webhook_secret: option({
    flag: "--stripe-webhook-secret <secret>",
    env: "STRIPE_WEBHOOK_SECRET",
    kind: "string",
    schema: secret,
    default: "",
    defaultText: "none: webhooks refused",
    secret: true,
    description: "the signing secret (whsec_…) of the Stripe webhook endpoint /api/billing/stripe/webhook; never logged",
  }),
  hf_token: option({
    flag: "--hf-token <token>",
    env: "HF_TOKEN",
    kind: "string",
    schema: secret,
    default: "",
    defaultText: "none",
    secret: true,
    description: "a Hugging Face token, sent with hf: downloads only (gated models); never logged",
  }),
  hf_endpoint: option({
    flag: "--hf-endpoint <url>",
    env: "HF_ENDPOINT",
    kind: "string",
    schema: z.string().regex(/^https?:\/\/[^\s]+$/, "must be an http:// or https:// URL").transform((url) => url.replace(/\/+$/, "")),
    default: "https://huggingface.co",
    description: "where hf: sources are downloaded from (a Hugging Face mirror)",
  }),
} as const;

export type ServeOptions = typeof serveOptions;
export type SettingKey = keyof ServeOptions;

/** The table as a list, each option with its key. */
export const serveOptionList: ReadonlyArray<OptionSpec & { key: SettingKey }> = Object.entries(serveOptions).map(([key, spec]) => ({
  ...(spec as OptionSpec),
  key: key as SettingKey,
}));

/** The default as `--help` and the README show it. */
export function defaultTextOf(spec: Pick<OptionSpec, "default" | "defaultText">): string {
  return spec.defaultText ?? String(spec.default);
}

/** llama.cpp slows down sharply when its threads outnumber free cores: leave one for Node. */
export function defaultThreads(): number {
  return Math.max(1, Math.min(os.availableParallelism() - 1, 32));
}
