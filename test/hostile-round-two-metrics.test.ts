/**
 * Issue 19, row 7: `/metrics` names upstream members, never their URLs (those are in the log
 * only), and can be put behind a bearer token (`--metrics-token`) or on an address of its own
 * (`--metrics-listen`), or both.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { loadSettings } from "../src/config/load.ts";
import { FaultUpstream } from "./helpers/fault-upstream.ts";
import { startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const TOKEN = "metrics-token-0123456789abcdef";

describe("/metrics names members and can be protected (issue 19, row 7)", () => {
  let first: FaultUpstream;
  let second: FaultUpstream;
  const configDir = temporaryDirectory("turnpike-metrics-");
  let configFile: string;
  const servers: TestServer[] = [];

  before(async () => {
    first = await FaultUpstream.start({ model: "pool", maxModelLen: 4096 });
    second = await FaultUpstream.start({ model: "pool", maxModelLen: 4096 });
    configFile = path.join(configDir, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({ models: [{ id: "pool", upstream: { kind: "vllm", urls: [{ url: first.baseUrl, name: "gpu-a" }, second.baseUrl], health_interval: 60 } }] }),
    );
  });

  after(async () => {
    for (const server of servers) await server.close();
    await first?.close();
    await second?.close();
    fs.rmSync(configDir, { recursive: true, force: true });
  });

  async function start(flags: Record<string, string> = {}, env: Record<string, string> = {}): Promise<TestServer> {
    const server = await startTestServer({ configFile, flags, env });
    servers.push(server);
    // One request through the pool, so that per-member counters have lines.
    await server.client.chat.completions.create({ model: "pool", messages: [{ role: "user", content: "Hi" }], max_tokens: 5 });
    return server;
  }

  const get = (url: string, authorization?: string) => fetch(url, { headers: authorization === undefined ? {} : { authorization } });

  it("labels members by name (or <model>#<index>), never by URL; the URLs are in the log", async () => {
    const gateway = await start();
    const response = await get(`${gateway.url}/metrics`);
    assert.equal(response.status, 200);
    const text = await response.text();
    assert.match(text, /turnpike_engine_member_healthy\{model="pool",member="gpu-a"\} 1/);
    assert.match(text, /turnpike_engine_member_healthy\{model="pool",member="pool#1"\} 1/);
    assert.match(text, /turnpike_upstream_requests_total\{model="pool",member="(gpu-a|pool#1)",outcome="ok"\} 1/);
    for (const upstream of [first, second]) {
      assert.ok(!text.includes(upstream.origin) && !text.includes(new URL(upstream.origin).host), `no URL of a member in /metrics`);
    }
    const started = gateway.logs().find((line) => Array.isArray(line.members));
    assert.deepEqual(started?.members, [
      { name: "gpu-a", url: first.baseUrl },
      { name: "pool#1", url: second.baseUrl },
    ]);
  });

  it("with --metrics-token, answers only requests carrying the token (401 otherwise), and never logs it", async () => {
    const gateway = await start({}, { TURNPIKE_METRICS_TOKEN: TOKEN });
    for (const authorization of [undefined, "Bearer wrong-token", `Bearer ${TOKEN}x`, `Basic ${TOKEN}`, "Bearer "]) {
      const response = await get(`${gateway.url}/metrics`, authorization);
      assert.equal(response.status, 401, String(authorization));
      const body = (await response.json()) as { error: { code: string; type: string } };
      assert.equal(body.error.code, "invalid_metrics_token");
      assert.ok(!JSON.stringify(body).includes(TOKEN));
    }
    const allowed = await get(`${gateway.url}/metrics`, `Bearer ${TOKEN}`);
    assert.equal(allowed.status, 200);
    assert.match(await allowed.text(), /turnpike_engine_member_healthy/);
    // The API itself is not behind the token.
    assert.equal((await get(`${gateway.url}/health`)).status, 200);
    assert.ok(!gateway.logText().includes(TOKEN), "the token is never logged");
    const settings = loadSettings({ flags: { metrics_token: TOKEN }, env: {} });
    assert.equal(JSON.stringify({ token: settings.metrics_token }), '{"token":"[secret]"}', "the setting prints as [secret]");
    assert.equal(`${settings.metrics_token}`, "[secret]");
  });

  it("with --metrics-listen, serves /metrics there only (with the token too, when set)", async () => {
    const gateway = await start({ metrics_listen: "127.0.0.1:0", metrics_token: TOKEN });
    const metricsUrl = gateway.server.metricsUrl;
    assert.ok(metricsUrl !== undefined && metricsUrl.endsWith("/metrics"));
    assert.notEqual(new URL(metricsUrl).port, new URL(gateway.url).port);
    const onApi = await get(`${gateway.url}/metrics`, `Bearer ${TOKEN}`);
    assert.equal(onApi.status, 404, "not on the API's port");
    assert.equal(((await onApi.json()) as { error: { code: string } }).error.code, "unknown_url");
    assert.equal((await get(metricsUrl)).status, 401);
    const allowed = await get(metricsUrl, `Bearer ${TOKEN}`);
    assert.equal(allowed.status, 200);
    assert.match(await allowed.text(), /turnpike_engine_member_healthy\{model="pool",member="gpu-a"\}/);
    assert.equal((await get(metricsUrl.replace(/\/metrics$/, "/v1/models"), `Bearer ${TOKEN}`)).status, 404, "nothing else there");
    assert.ok(!gateway.logText().includes(TOKEN), "the token is never logged");
  });
});
