/**
 * The table of `turnpike serve` options: flag, environment variable, default, meaning.
 * The CLI, the loader and the README reference are all read from here.
 */
import os from "node:os";

export type OptionKind = "string" | "integer" | "number" | "models" | "upstreams";

export type OptionSpec = {
  /** Key in the settings and in the JSON config file. */
  key: string;
  flag: string;
  env: string;
  kind: OptionKind;
  /** Shown in `--help` and the README. */
  description: string;
  /** The default as the README shows it. */
  defaultText: string;
};

export const serveOptions: readonly OptionSpec[] = [
  { key: "host", flag: "--host <host>", env: "TURNPIKE_HOST", kind: "string", defaultText: "127.0.0.1", description: "address to listen on" },
  { key: "port", flag: "--port <port>", env: "TURNPIKE_PORT", kind: "integer", defaultText: "8080", description: "port to listen on (0 picks a free one)" },
  { key: "data_dir", flag: "--data-dir <dir>", env: "TURNPIKE_DATA_DIR", kind: "string", defaultText: "./data", description: "the SQLite database and downloaded models" },
  { key: "database_url", flag: "--database-url <url>", env: "TURNPIKE_DATABASE_URL", kind: "string", defaultText: "SQLite in the data dir", description: "postgres://… to share state between several nodes" },
  { key: "redis_url", flag: "--redis-url <url>", env: "TURNPIKE_REDIS_URL", kind: "string", defaultText: "limits kept in memory", description: "redis://… to share rate limits and sign-in throttling between several nodes" },
  {
    key: "models",
    flag: "--model <[id=]source>",
    env: "TURNPIKE_MODELS",
    kind: "models",
    defaultText: "the default model",
    description: "a model to serve: a .gguf path, or hf:owner/repo/file.gguf or an https:// URL downloaded once into <data-dir>/models; repeatable (comma-separated in the variable)",
  },
  {
    key: "upstreams",
    flag: "--upstream <id=url[,url…]>",
    env: "TURNPIKE_UPSTREAMS",
    kind: "upstreams",
    defaultText: "none",
    description:
      "a model served by OpenAI-compatible servers (vLLM, SGLang, llama-server, Ollama, OpenAI), detected by probing: id=http://host:8000/v1, several URLs for a pool; repeatable (';'-separated in the variable)",
  },
  { key: "parallel", flag: "--parallel <n>", env: "TURNPIKE_PARALLEL", kind: "integer", defaultText: "4", description: "sequences generated at once per model" },
  { key: "threads", flag: "--threads <n>", env: "TURNPIKE_THREADS", kind: "integer", defaultText: "cores - 1 (at least 1)", description: "llama.cpp threads; 0 picks from the cores available" },
  { key: "context_size", flag: "--context-size <tokens>", env: "TURNPIKE_CONTEXT_SIZE", kind: "integer", defaultText: "4096", description: "largest context per sequence (capped at the model's training context)" },
  { key: "gpu", flag: "--gpu <backend>", env: "TURNPIKE_GPU", kind: "string", defaultText: "auto", description: "auto, cpu, cuda, vulkan or metal" },
  { key: "queue_size", flag: "--queue-size <n>", env: "TURNPIKE_QUEUE_SIZE", kind: "integer", defaultText: "64", description: "requests that may wait for a slot per model; more get 503" },
  { key: "shutdown_timeout", flag: "--shutdown-timeout <seconds>", env: "TURNPIKE_SHUTDOWN_TIMEOUT", kind: "number", defaultText: "30", description: "how long running requests may finish after SIGINT/SIGTERM" },
  { key: "keep_alive_interval", flag: "--keep-alive-interval <seconds>", env: "TURNPIKE_KEEP_ALIVE_INTERVAL", kind: "number", defaultText: "5", description: "a stream quiet this long gets an SSE comment (waiting for a slot, a long prompt evaluation)" },
  { key: "log_level", flag: "--log-level <level>", env: "TURNPIKE_LOG_LEVEL", kind: "string", defaultText: "info", description: "fatal, error, warn, info, debug, trace or silent" },
  { key: "body_limit", flag: "--body-limit <bytes>", env: "TURNPIKE_BODY_LIMIT", kind: "integer", defaultText: "10485760", description: "largest request body" },
  { key: "request_timeout", flag: "--request-timeout <seconds>", env: "TURNPIKE_REQUEST_TIMEOUT", kind: "number", defaultText: "60", description: "a request's headers and body must arrive whole within this (a streamed response is not limited by it)" },
  { key: "idle_timeout", flag: "--idle-timeout <seconds>", env: "TURNPIKE_IDLE_TIMEOUT", kind: "number", defaultText: "5", description: "an idle keep-alive connection is closed after this" },
  { key: "max_connections", flag: "--max-connections <n>", env: "TURNPIKE_MAX_CONNECTIONS", kind: "integer", defaultText: "1024", description: "open connections at most; more are refused (0: no cap)" },
  { key: "stall_timeout", flag: "--stall-timeout <seconds>", env: "TURNPIKE_STALL_TIMEOUT", kind: "number", defaultText: "30", description: "a stream whose client stopped reading is paused, then cut after this (billed for what was generated)" },
  { key: "public_url", flag: "--public-url <url>", env: "TURNPIKE_PUBLIC_URL", kind: "string", defaultText: "http://host:port", description: "the address people use to reach this server: payment return links, the console's allowed origin and host" },
  { key: "allowed_hosts", flag: "--allowed-hosts <hosts>", env: "TURNPIKE_ALLOWED_HOSTS", kind: "string", defaultText: "none", description: "more Host names accepted besides the public URL's, the listen address, localhost and IP addresses (comma-separated; .example.com for a domain and its names; others get 421)" },
  { key: "trust_proxy", flag: "--trust-proxy <proxies>", env: "TURNPIKE_TRUST_PROXY", kind: "string", defaultText: "none", description: "believe X-Forwarded-* from reverse proxies: a hop count (1 for one proxy) or the proxies' addresses/subnets, comma-separated" },
  { key: "signup", flag: "--signup <mode>", env: "TURNPIKE_SIGNUP", kind: "string", defaultText: "open", description: "open: anyone may sign up in the console; closed: accounts are made by admins or the CLI (and the first admin with the setup code)" },
  { key: "database_timeout", flag: "--database-timeout <seconds>", env: "TURNPIKE_DATABASE_TIMEOUT", kind: "number", defaultText: "10", description: "PostgreSQL: a query that has not answered in this long fails (503 database_unavailable)" },
  { key: "sweep_interval", flag: "--sweep-interval <seconds>", env: "TURNPIKE_SWEEP_INTERVAL", kind: "number", defaultText: "10", description: "how often each node writes its heartbeat and sweeps dead nodes' holds and expired credit" },
  { key: "dead_node_after", flag: "--dead-node-after <seconds>", env: "TURNPIKE_DEAD_NODE_AFTER", kind: "number", defaultText: "60", description: "a node whose heartbeat is this old is dead: its holds are released" },
  { key: "hold_ttl", flag: "--hold-ttl <seconds>", env: "TURNPIKE_HOLD_TTL", kind: "number", defaultText: "1800", description: "a hold older than this is released by the sweeper (longer than any generation may run)" },
  { key: "lease_above", flag: "--lease-above <requests/s>", env: "TURNPIKE_LEASE_ABOVE", kind: "number", defaultText: "20", description: "a key sending this many requests a second is metered from credit leases, its usage written in group commits (0: always)" },
  { key: "checkpoint_interval", flag: "--checkpoint-interval <seconds>", env: "TURNPIKE_CHECKPOINT_INTERVAL", kind: "number", defaultText: "1", description: "a running request's usage is checkpointed this often (and every 64 tokens): what a killed node's streams are billed" },
];

/** llama.cpp slows down sharply when its threads outnumber free cores: leave one for Node. */
export function defaultThreads(): number {
  return Math.max(1, Math.min(os.availableParallelism() - 1, 32));
}

export const defaultSettings = {
  host: "127.0.0.1",
  port: 8080,
  data_dir: "./data",
  database_url: "",
  redis_url: "",
  models: [],
  upstreams: [],
  parallel: 4,
  threads: 0,
  context_size: 4096,
  gpu: "auto",
  queue_size: 64,
  shutdown_timeout: 30,
  keep_alive_interval: 5,
  log_level: "info",
  body_limit: 10 * 1024 * 1024,
  request_timeout: 60,
  idle_timeout: 5,
  max_connections: 1024,
  stall_timeout: 30,
  public_url: "",
  allowed_hosts: "",
  trust_proxy: "",
  signup: "open",
  database_timeout: 10,
  sweep_interval: 10,
  dead_node_after: 60,
  hold_ttl: 1800,
  lease_above: 20,
  checkpoint_interval: 1,
} as const;
