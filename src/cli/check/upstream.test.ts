/**
 * One upstream member checked against real HTTP servers: one refusing the key (401, 403), one
 * shaped like llama-server (`/health` and `/v1/models` public, `/props` behind the key), a closed
 * port, one that never answers, and a real llama-server when it is built.
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import net, { type AddressInfo } from "node:net";
import path from "node:path";
import { after, describe, it } from "node:test";
import { upstreamSchema } from "../../engines/openai-compatible/config-schema.ts";
import { sharedModelsDir, skipWithoutLlamaServer, startLlamaServer } from "../../../test/helpers/llama-server.ts";
import { checkUpstreamMember } from "./upstream.ts";

const GOOD_KEY = "sk-good-upstream-key";
const WRONG_KEY = "sk-wrong-upstream-key";

const servers: Server[] = [];
after(() =>
  Promise.all(
    servers.map((server) => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    }),
  ),
);

async function serve(answer: (path: string, authorization: string | undefined) => [number, unknown] | undefined): Promise<string> {
  const server = createServer((request, response) => {
    const answered = answer(request.url ?? "/", request.headers.authorization);
    // undefined: never answer (a server that hangs).
    if (answered !== undefined) response.writeHead(answered[0], { "content-type": "application/json" }).end(JSON.stringify(answered[1]));
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

function llamaServerShaped(path: string, authorization: string | undefined): [number, unknown] {
  if (path === "/health") return [200, { status: "ok" }];
  if (path === "/v1/models") return [200, { object: "list", data: [{ id: "stories260K.gguf", object: "model", owned_by: "llamacpp" }] }];
  if (authorization !== `Bearer ${GOOD_KEY}`) return [401, { error: { message: "Invalid API Key" } }];
  if (path === "/props") return [200, { default_generation_settings: { n_ctx: 1024 }, total_slots: 1 }];
  return [404, { error: { message: "not found" } }];
}

const model = (url: string, extra: Record<string, unknown> = {}) => ({ id: "stories", upstream: upstreamSchema.parse({ urls: [url], ...extra }) });

describe("checking an upstream member", () => {
  it("says a 401 refuses the credentials and names the variable, never the key", async () => {
    const url = await serve(() => [401, { error: { message: "Invalid API Key" } }]);
    const result = await checkUpstreamMember(model(url, { api_key_env: "STORIES_KEY" }), url, 0, WRONG_KEY, 2000);
    assert.equal(result.ok, false);
    assert.equal(result.name, "stories#0");
    assert.match(result.detail, /: 401 Unauthorized: the server refused the credentials; the key comes from the environment variable STORIES_KEY/);
    assert.equal(result.facts?.credentials, "refused");
    assert.ok(!JSON.stringify(result).includes(WRONG_KEY));
  });

  it("says a 403 refuses them too, and advises a key when none is sent", async () => {
    const url = await serve(() => [403, { error: { message: "Forbidden" } }]);
    const result = await checkUpstreamMember(model(url), url, 0, undefined, 2000);
    assert.equal(result.ok, false);
    assert.match(result.detail, /403 Forbidden: the server refused the credentials; no key is sent: set the model entry's upstream.api_key_env/);
  });

  it("finds a llama-server's kind and context with the right key, and the refusal behind its public endpoints with a wrong one", async () => {
    const url = await serve(llamaServerShaped);
    const served = await checkUpstreamMember(model(url, { api_key_env: "STORIES_KEY" }), url, 0, GOOD_KEY, 2000);
    assert.equal(served.ok, true, served.detail);
    assert.equal(served.facts?.kind, "llama-server");
    assert.equal(served.facts?.context_length, 1024);
    assert.deepEqual(served.facts?.models, ["stories260K.gguf"]);
    assert.equal(served.facts?.credentials, "accepted");
    assert.match(served.detail, /llama-server, serves stories260K.gguf, context 1024 tokens, credentials accepted$/);

    const refused = await checkUpstreamMember(model(url, { api_key_env: "STORIES_KEY" }), url, 0, WRONG_KEY, 2000);
    assert.equal(refused.ok, false);
    assert.match(refused.detail, /401 Unauthorized: the server refused the credentials/);
    assert.doesNotMatch(refused.detail, /context length/);
  });

  it("refuses a model the upstream does not list, naming upstream.model", async () => {
    const url = await serve((path) => (path === "/v1/models" ? [200, { object: "list", data: [{ id: "other", max_model_len: 4096, owned_by: "vllm" }] }] : path === "/version" ? [200, { version: "0.9" }] : [404, {}]));
    const result = await checkUpstreamMember(model(url, { kind: "openai" }), url, 0, undefined, 2000);
    assert.equal(result.ok, false);
    assert.match(result.detail, /does not list the model stories \(it lists other\): set the entry's upstream.model/);
  });

  it("says a closed port is unreachable, a silent server did not answer in time, and a missing key variable is not set", async () => {
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const closedUrl = `http://127.0.0.1:${(closed.address() as AddressInfo).port}/v1`;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const unreachable = await checkUpstreamMember(model(closedUrl), closedUrl, 0, undefined, 2000);
    assert.equal(unreachable.ok, false);
    assert.match(unreachable.detail, /unreachable \(the connection failed\)$/);

    const silentUrl = await serve(() => undefined);
    const silent = await checkUpstreamMember(model(silentUrl, { kind: "vllm" }), silentUrl, 0, undefined, 200);
    assert.equal(silent.ok, false);
    assert.match(silent.detail, /no answer within 0.2 s$/);

    const unset = await checkUpstreamMember(model(closedUrl, { api_key_env: "STORIES_KEY" }), closedUrl, 0, undefined, 2000);
    assert.match(unset.detail, /the environment variable STORIES_KEY \(the model entry's upstream.api_key_env: its API key\) is not set/);
  });

  describe("a real llama-server", { skip: skipWithoutLlamaServer() }, () => {
    it("is llama-server with its context length, and refuses a wrong key when started with --api-key", async () => {
      const llama = await startLlamaServer({ model: path.join(sharedModelsDir, "stories260K.gguf"), contextSize: 1024, extraArgs: ["--api-key", GOOD_KEY] });
      try {
        const url = `${llama.url}/v1`;
        const served = await checkUpstreamMember(model(url, { api_key_env: "STORIES_KEY" }), url, 0, GOOD_KEY, 5000);
        assert.equal(served.ok, true, served.detail);
        assert.equal(served.facts?.kind, "llama-server");
        assert.equal(served.facts?.context_length, 1024);
        const refused = await checkUpstreamMember(model(url, { api_key_env: "STORIES_KEY" }), url, 0, WRONG_KEY, 5000);
        assert.equal(refused.ok, false);
        assert.match(refused.detail, /401 Unauthorized: the server refused the credentials; the key comes from the environment variable STORIES_KEY/);
      } finally {
        await llama.close();
      }
    });
  });
});
