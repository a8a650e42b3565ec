/**
 * An upstream that refuses Turnpike's credentials (401/403) is said to refuse them, naming the
 * setting the key comes from, and is not reported as missing a context length: against real HTTP
 * servers (one that refuses everything; one shaped like llama-server, whose `/health` and
 * `/v1/models` answer anyone while `/props` needs the key), and a real llama-server started with
 * `--api-key` when it is built.
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { after, describe, it } from "node:test";
import { modelEntrySchema } from "../../config/schema.ts";
import type { EngineEnvironment } from "../environment.ts";
import type { EngineStatus } from "../engine.ts";
import { createUpstreamEngine } from "./create.ts";
import { credentialsSource, refusalDetail } from "./credentials.ts";
import { detectKind } from "./detect.ts";
import { HealthChecker } from "./health.ts";
import { PoolMember } from "./member.ts";
import { sharedModelsDir, skipWithoutLlamaServer, startLlamaServer } from "../../../test/helpers/llama-server.ts";

const GOOD_KEY = "sk-good-upstream-key";
const WRONG_KEY = "sk-wrong-upstream-key";

/** A server on 127.0.0.1 answering each request with `answer(path, authorization)`: [status, body]. */
async function serve(answer: (path: string, authorization: string | undefined) => [number, unknown]): Promise<{ url: string; server: Server }> {
  const server = createServer((request, response) => {
    const [status, body] = answer(request.url ?? "/", request.headers.authorization);
    response.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

const unauthorized = { error: { message: "Invalid API Key", type: "authentication_error" } };

/** Like llama-server with `--api-key GOOD_KEY`: `/health` and `/v1/models` public, the rest behind the key. */
function llamaServerShaped(path: string, authorization: string | undefined): [number, unknown] {
  if (path === "/health") return [200, { status: "ok" }];
  if (path === "/v1/models") return [200, { object: "list", data: [{ id: "stories", object: "model", owned_by: "llamacpp" }] }];
  if (authorization !== `Bearer ${GOOD_KEY}`) return [401, unauthorized];
  if (path === "/props") return [200, { default_generation_settings: { n_ctx: 1024 }, total_slots: 1 }];
  return [404, { error: { message: "not found" } }];
}

function environmentWith(keys: Record<string, string>, events: string[], statuses: EngineStatus[]): EngineEnvironment {
  return {
    dataDir: "unused",
    llama: () => Promise.reject(new Error("no llama.cpp for an upstream model")),
    contextSize: 2048,
    parallel: 1,
    queueSize: 4,
    threads: 1,
    upstreamApiKeys: keys,
    hub: { endpoint: "https://huggingface.invalid" },
    onProgress: () => {},
    onStatus: (_model, status) => statuses.push(status),
    onUpstreamEvent: (_model, level, message) => events.push(`${level}: ${message}`),
    onUpstreamOutcome: () => {},
  };
}

function engineFor(url: string, keyVariable: string | undefined, keys: Record<string, string>, events: string[], statuses: EngineStatus[], kind?: string) {
  const entry = modelEntrySchema.parse({ id: "stories", upstream: { urls: [url], ...(kind !== undefined ? { kind } : {}), ...(keyVariable !== undefined ? { api_key_env: keyVariable } : {}) } });
  return createUpstreamEngine(entry as typeof entry & { upstream: NonNullable<typeof entry.upstream> }, environmentWith(keys, events, statuses));
}

describe("an upstream refusing the credentials", () => {
  const servers: Server[] = [];
  after(() => Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve)))));

  it("names the setting the key comes from, or how to send one", () => {
    assert.equal(credentialsSource({ api_key_env: "VLLM_KEY" }), "the key comes from the environment variable VLLM_KEY (the model entry's upstream.api_key_env)");
    assert.match(credentialsSource({}, "http://user:pass@host/v1"), /user:password in the member's URL/);
    assert.match(credentialsSource({}, "http://host/v1"), /no key is sent: set the model entry's upstream.api_key_env/);
    assert.equal(refusalDetail("upstream m#0", 403, "x"), "upstream m#0: 403 Forbidden: the server refused the credentials; x");
  });

  it("is unavailable because of the credentials, not a missing context length, logged once, without the key", async () => {
    const { url, server } = await serve(() => [401, unauthorized]);
    servers.push(server);
    const events: string[] = [];
    const statuses: EngineStatus[] = [];
    const engine = engineFor(`${url}/v1`, "STORIES_UPSTREAM_KEY", { STORIES_UPSTREAM_KEY: WRONG_KEY }, events, statuses);
    await engine.open();
    const status = engine.status();
    assert.equal(status.state, "unavailable");
    assert.ok("detail" in status);
    assert.match(status.detail, /upstream stories#0: 401 Unauthorized: the server refused the credentials; the key comes from the environment variable STORIES_UPSTREAM_KEY/);
    assert.doesNotMatch(status.detail, /context length/);
    const refusals = events.filter((event) => event.includes("refused the credentials"));
    assert.equal(refusals.length, 1, events.join("\n"));
    assert.match(refusals[0]!, /^warn: upstream stories#0 \(http:\/\/127\.0\.0\.1:\d+\/v1\): 401 Unauthorized/);
    assert.ok(!events.some((event) => event.includes(WRONG_KEY)) && !JSON.stringify(statuses).includes(WRONG_KEY), "the key is never said");
    assert.ok(!statuses.some((each) => "detail" in each && /context length/.test(each.detail ?? "")), JSON.stringify(statuses));
    await engine.close();
  });

  it("catches a llama-server whose public endpoints answer anyone, and does not let /health bring it back", async () => {
    const { url, server } = await serve(llamaServerShaped);
    servers.push(server);
    let refused: number | undefined;
    assert.equal(await detectKind(`${url}/v1`, WRONG_KEY, { onRefused: (status) => (refused = status) }), undefined, "no kind from the public endpoints alone");
    assert.equal(refused, 401);
    assert.equal(await detectKind(`${url}/v1`, GOOD_KEY), "llama-server");

    let now = 0;
    const member = new PoolMember(`${url}/v1`, 1, { cooldownMs: 1000, now: () => now });
    member.probed(false, 401);
    const checker = new HealthChecker({ kind: "llama-server", members: [member], intervalMs: 60_000, apiKey: WRONG_KEY });
    now += 5000;
    await checker.probeAll();
    assert.equal(member.refusal, 401, "probed at /props, which refuses the key, not at /health");
    assert.notEqual(member.health, "healthy");

    const events: string[] = [];
    const engine = engineFor(`${url}/v1`, undefined, {}, events, []);
    await engine.open();
    const status = engine.status();
    assert.equal(status.state, "unavailable");
    assert.ok("detail" in status);
    assert.match(status.detail, /401 Unauthorized: the server refused the credentials; no key is sent: set the model entry's upstream.api_key_env/);
    await engine.close();

    const configured = engineFor(`${url}/v1`, "STORIES_UPSTREAM_KEY", { STORIES_UPSTREAM_KEY: WRONG_KEY }, [], [], "llama-server");
    await configured.open();
    const configuredStatus = configured.status();
    assert.equal(configuredStatus.state, "unavailable", "a configured kind skips detection: the key is still checked");
    assert.ok("detail" in configuredStatus);
    assert.match(configuredStatus.detail, /401 Unauthorized: the server refused the credentials; the key comes from the environment variable STORIES_UPSTREAM_KEY/);
    await configured.close();

    const accepted = engineFor(`${url}/v1`, "STORIES_UPSTREAM_KEY", { STORIES_UPSTREAM_KEY: GOOD_KEY }, [], []);
    await accepted.open();
    assert.equal(accepted.status().state, "ready");
    assert.equal(accepted.info()?.contextLength, 1024);
    await accepted.close();
  });

  it("does not take a gateway refusing a path it does not have for a refusal of the key", async () => {
    const { url, server } = await serve((path) => (path === "/v1/models" ? [200, { object: "list", data: [{ id: "gpt-x", object: "model", owned_by: "someone" }] }] : [401, unauthorized]));
    servers.push(server);
    let refused: number | undefined;
    assert.equal(await detectKind(`${url}/v1`, GOOD_KEY, { onRefused: (status) => (refused = status) }), "openai");
    assert.equal(refused, undefined);
  });

  describe("a real llama-server started with --api-key", { skip: skipWithoutLlamaServer() }, () => {
    it("is said to refuse a wrong key and serves with the right one", async () => {
      const llama = await startLlamaServer({ model: path.join(sharedModelsDir, "stories260K.gguf"), contextSize: 1024, extraArgs: ["--api-key", GOOD_KEY] });
      try {
        const events: string[] = [];
        const refusedEngine = engineFor(`${llama.url}/v1`, "STORIES_UPSTREAM_KEY", { STORIES_UPSTREAM_KEY: WRONG_KEY }, events, []);
        await refusedEngine.open();
        const status = refusedEngine.status();
        assert.equal(status.state, "unavailable");
        assert.ok("detail" in status);
        assert.match(status.detail, /401 Unauthorized: the server refused the credentials; the key comes from the environment variable STORIES_UPSTREAM_KEY/);
        assert.doesNotMatch(status.detail, /context length/);
        await refusedEngine.close();

        const engine = engineFor(`${llama.url}/v1`, "STORIES_UPSTREAM_KEY", { STORIES_UPSTREAM_KEY: GOOD_KEY }, [], []);
        await engine.open();
        assert.equal(engine.status().state, "ready");
        assert.equal(engine.info()?.contextLength, 1024);
        await engine.close();
      } finally {
        await llama.close();
      }
    });
  });
});
