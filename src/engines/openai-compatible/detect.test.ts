/**
 * Kind detection and context lengths, against upstreams that answer the routes each server
 * documents (shapes from vLLM's, SGLang's and llama.cpp's servers and Ollama's API docs).
 */
import assert from "node:assert/strict";
import net from "node:net";
import { after, describe, it } from "node:test";
import { FaultUpstream, sendJson, type RouteHandler } from "../../../test/helpers/fault-upstream.ts";
import { detectKind } from "./detect.ts";

const json = (body: unknown): RouteHandler => (_body, response) => sendJson(response, 200, body);

const started: FaultUpstream[] = [];
async function server(routes: Record<string, RouteHandler>, maxModelLen?: number): Promise<FaultUpstream> {
  const upstream = await FaultUpstream.start({ routes, maxModelLen, model: "served-model" });
  started.push(upstream);
  return upstream;
}

after(() => Promise.all(started.map((upstream) => upstream.close())));

describe("detectKind", () => {
  it("tells llama-server by /props", async () => {
    const upstream = await server({ "GET /props": json({ default_generation_settings: { n_ctx: 8192 }, total_slots: 4 }), "GET /api/version": json({ version: "shim" }) });
    assert.equal(await detectKind(upstream.baseUrl), "llama-server");
  });

  it("tells SGLang by /get_model_info", async () => {
    const upstream = await server({ "GET /get_model_info": json({ model_path: "qwen/qwen2.5-0.5b-instruct", is_generation: true }) });
    assert.equal(await detectKind(upstream.origin), "sglang");
  });

  it("tells vLLM by /version", async () => {
    const upstream = await server({ "GET /version": json({ version: "0.11.0" }) });
    assert.equal(await detectKind(upstream.baseUrl), "vllm");
  });

  it("tells vLLM by its models' owner when /version is not there", async () => {
    const upstream = await server({ "GET /v1/models": json({ object: "list", data: [{ id: "m", object: "model", owned_by: "vllm", max_model_len: 8192 }] }) });
    assert.equal(await detectKind(upstream.baseUrl), "vllm");
  });

  it("tells Ollama by /api/version at the root", async () => {
    const upstream = await server({ "GET /api/version": json({ version: "0.12.6" }) });
    assert.equal(await detectKind(upstream.baseUrl), "ollama");
  });

  it("takes a server with /v1/models alone for plain OpenAI, sending the key", async () => {
    const upstream = await server({});
    assert.equal(await detectKind(upstream.baseUrl, "sk-detect"), "openai");
    assert.ok(upstream.probeAuthorizations.includes("Bearer sk-detect"));
  });

  it("says nothing for a server that does not answer", async () => {
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    assert.equal(await detectKind(`http://127.0.0.1:${port}/v1`, undefined, { timeoutMs: 300 }), undefined);
  });
});
