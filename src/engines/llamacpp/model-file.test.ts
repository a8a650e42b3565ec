import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { downloadedModelPath, ModelFileError, probeHeaders, probeUrl, remoteFileName, resolveModelFile } from "./model-file.ts";

const storiesModel = path.resolve(import.meta.dirname, "../../../../shared/models/stories260K.gguf");

/** Serves a real GGUF slowly: 100 kB every 100 ms. */
async function slowServer(): Promise<{ url: string; close: () => void }> {
  const body = fs.readFileSync(storiesModel);
  const server = http.createServer((request, response) => {
    response.writeHead(200, { "content-length": body.length, "content-type": "application/octet-stream" });
    if (request.method === "HEAD") return void response.end();
    let offset = 0;
    const next = () => {
      if (response.destroyed) return;
      if (offset >= body.length) return void response.end();
      response.write(body.subarray(offset, (offset += 100_000)));
      setTimeout(next, 100);
    };
    next();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

describe("model files", () => {
  it("names downloads after the remote file", () => {
    assert.equal(remoteFileName("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf"), "qwen2.5-0.5b-instruct-q4_k_m.gguf");
    assert.equal(remoteFileName("hf:owner/repo/model.gguf#dev"), "model.gguf");
    assert.equal(remoteFileName("https://example.com/files/model.gguf?download=1"), "model.gguf");
    assert.equal(remoteFileName("https://example.com/files/model"), "model.gguf");
    assert.equal(downloadedModelPath("/data", "hf:o/r/m.gguf"), path.join("/data", "models", "m.gguf"));
  });

  it("probes the file's Hugging Face address, branch included", () => {
    assert.equal(probeUrl("hf:o/r/dir/m.gguf"), "https://huggingface.co/o/r/resolve/main/dir/m.gguf");
    assert.equal(probeUrl("hf:o/r/m.gguf#v2"), "https://huggingface.co/o/r/resolve/v2/m.gguf");
    assert.equal(probeUrl("https://example.com/m.gguf"), "https://example.com/m.gguf");
    assert.equal(probeUrl("hf:o/r/m.gguf", { endpoint: "https://hf-mirror.example/" }), "https://hf-mirror.example/o/r/resolve/main/m.gguf", "a mirror, as the downloader uses it");
  });

  it("probes gated Hugging Face files with the hub token (HF_TOKEN), as the downloader fetches them, and nothing else", () => {
    assert.deepEqual(probeHeaders("hf:o/r/m.gguf", { endpoint: "https://huggingface.co", token: "hf_secret" }), { authorization: "Bearer hf_secret" });
    assert.deepEqual(probeHeaders("hf:o/r/m.gguf", { endpoint: "https://huggingface.co" }), {});
    assert.deepEqual(probeHeaders("https://example.com/m.gguf", { endpoint: "https://huggingface.co", token: "hf_secret" }), {}, "the token never goes to other hosts");
  });

  it("refuses a local path that is not there", async () => {
    await assert.rejects(resolveModelFile({ path: "/nowhere/model.gguf" }, os.tmpdir()), (error: unknown) => error instanceof ModelFileError && /model file not found/.test(error.message));
  });

  it("rejects a cancelled download and leaves no file where the model would be", async () => {
    const server = await slowServer();
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-download-"));
    try {
      const controller = new AbortController();
      let seen = 0;
      const download = resolveModelFile({ remote: `${server.url}/m.gguf` }, dataDir, {
        signal: controller.signal,
        onProgress: ({ downloadedBytes }) => {
          seen = downloadedBytes;
          if (downloadedBytes > 0) controller.abort();
        },
      });
      await assert.rejects(download, (error: unknown) => error instanceof ModelFileError && /download of .* failed/.test(error.message));
      assert.ok(seen > 0 && seen < fs.statSync(storiesModel).size, "it was cancelled part-way");
      assert.ok(!fs.existsSync(downloadedModelPath(dataDir, `${server.url}/m.gguf`)), "a later start does not mistake a partial file for the model");
    } finally {
      server.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
