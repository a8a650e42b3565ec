/**
 * What kind of server a base URL leads to, and how long a context it serves, found by asking the
 * server's own endpoints (each with a short timeout; nothing here throws for the upstream's
 * failures). The endpoints, as the servers document them:
 *
 * - llama-server: `GET /props` (`default_generation_settings.n_ctx`: the context of one slot,
 *   which is what one request gets; `total_slots`, `build_info`).
 * - SGLang: `GET /get_model_info` (`model_path`, `is_generation`), `GET /get_server_info` (its
 *   server args and `version`); `GET /v1/models` lists `max_model_len`.
 * - vLLM: `GET /version` (`{"version": ...}`); `GET /v1/models` lists `max_model_len` and
 *   `owned_by: "vllm"`.
 * - Ollama: `GET /api/version` at the root (not under `/v1`); `POST /api/show {"model"}` gives
 *   `parameters` (text, with `num_ctx N` when the model file sets it) and `model_info`
 *   (`<architecture>.context_length`: the model's training context).
 * - OpenAI and other OpenAI-compatible servers: `GET /v1/models` alone.
 */
import type { UpstreamKind } from "./config-schema.ts";
import { refusalOf } from "./credentials.ts";
import type { RefusalStatus } from "./pool-types.ts";
import { callJson } from "./upstream-json.ts";
import { serverRoot } from "./upstream-url.ts";

export type DetectOptions = {
  /** Milliseconds each probe may take (default 2000). */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** A probe was answered 401 or 403: the server refused the credentials (the kind is then unknown). */
  onRefused?: (status: RefusalStatus, url: string) => void;
};

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * The kind of server at `baseUrl`, or undefined when none of the probes is answered as a known
 * server answers (unreachable, or not OpenAI-compatible). The probes run at once; the most
 * specific match wins (llama-server, SGLang, vLLM, Ollama, then plain OpenAI-compatible). A
 * server that refused the credentials is of no kind yet (its public endpoints alone would pass
 * llama-server for a plain OpenAI server): `onRefused` hears of it (see `refusalAmong`).
 */
export async function detectKind(baseUrl: string, apiKey?: string, options: DetectOptions = {}): Promise<UpstreamKind | undefined> {
  const root = serverRoot(baseUrl);
  const refusals = new Map<string, RefusalStatus>();
  let answered = false;
  const get = async (url: string): Promise<Json | undefined> => {
    const answer = await callJson(url, { apiKey, timeoutMs: options.timeoutMs ?? 2000, signal: options.signal, maxBytes: 1024 * 1024 });
    const refusal = refusalOf(answer);
    if (refusal !== undefined) refusals.set(url, refusal);
    if (answer.ok) answered = true;
    return answer.ok && isObject(answer.body) ? answer.body : undefined;
  };
  const models = get(`${root}/v1/models`).then((list) => (Array.isArray(list?.data) ? list.data.filter(isObject) : undefined));
  const checks: Array<[UpstreamKind, () => Promise<boolean>]> = [
    ["llama-server", async () => {
      const props = await get(`${root}/props`);
      return props !== undefined && ("default_generation_settings" in props || "total_slots" in props || "build_info" in props);
    }],
    ["sglang", async () => {
      const modelInfo = await get(`${root}/get_model_info`);
      if (modelInfo !== undefined && "model_path" in modelInfo) return true;
      return (await get(`${root}/get_server_info`)) !== undefined;
    }],
    // vLLM lists its models as `owned_by: "vllm"`; `/version` alone is common to many servers.
    ["vllm", async () => typeof (await get(`${root}/version`))?.version === "string" || ((await models)?.some((model) => model.owned_by === "vllm") ?? false)],
    ["ollama", async () => typeof (await get(`${root}/api/version`))?.version === "string"],
    ["openai", async () => (await models) !== undefined],
  ];
  const matches = await Promise.all(checks.map(([, check]) => check()));
  if (options.signal?.aborted) throw options.signal.reason;
  const refused = refusalAmong(refusals, root, await models, answered);
  if (refused !== undefined) {
    options.onRefused?.(refused[1], refused[0]);
    return undefined;
  }
  return checks.find((_, index) => matches[index])?.[0];
}

/**
 * The refusal that says the key is wrong, as [url, status]: one at `/v1/models`; one at `/props`
 * from a llama-server (its `/v1/models`, public, lists `owned_by: "llamacpp"`, or is refused too);
 * any one when nothing answered at all. A gateway refusing a path it does not have, while its
 * `/v1/models` accepts the key, is no refusal of the key.
 */
function refusalAmong(refusals: ReadonlyMap<string, RefusalStatus>, root: string, models: Json[] | undefined, answered: boolean): [string, RefusalStatus] | undefined {
  const at = (url: string): [string, RefusalStatus] | undefined => (refusals.has(url) ? [url, refusals.get(url)!] : undefined);
  const fromModels = at(`${root}/v1/models`);
  if (fromModels !== undefined) return fromModels;
  const fromProps = at(`${root}/props`);
  if (fromProps !== undefined && (models === undefined || models.some((model) => model.owned_by === "llamacpp"))) return fromProps;
  return answered ? undefined : refusals.entries().next().value;
}
