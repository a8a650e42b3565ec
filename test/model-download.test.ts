/**
 * Remote models as an operator meets them: `--model id=<url>` downloads the GGUF once into
 * `<data-dir>/models` with progress, serves it, and uses the downloaded file on the next start
 * without touching the network. The "remote" is a real HTTP server on this machine serving a
 * real GGUF, since the tests have no internet.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import { runCli, startServeProcess, type ServeProcess } from "./helpers/process.ts";
import { storiesModel, temporaryDirectory } from "./helpers/server.ts";

type Hit = { method: string; url: string };

/** Serves the stories GGUF in small, paced writes so the download reports progress on its way. */
function startFileServer(file: string): Promise<{ url: string; hits: Hit[]; close: () => Promise<void> }> {
  const body = fs.readFileSync(file);
  const hits: Hit[] = [];
  const server = http.createServer((request, response) => {
    hits.push({ method: request.method ?? "", url: request.url ?? "" });
    if (request.url !== "/models/stories.gguf") {
      response.writeHead(404, { "content-type": "text/plain" }).end("not found");
      return;
    }
    response.writeHead(200, { "content-type": "application/octet-stream", "content-length": body.length, "accept-ranges": "none" });
    if (request.method === "HEAD") {
      response.end();
      return;
    }
    const piece = Math.ceil(body.length / 20);
    let offset = 0;
    const next = () => {
      if (response.destroyed) return;
      if (offset >= body.length) {
        response.end();
        return;
      }
      response.write(body.subarray(offset, offset + piece));
      offset += piece;
      setTimeout(next, 60);
    };
    next();
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      resolve({
        url: `http://127.0.0.1:${port}`,
        hits,
        close: () => new Promise((done) => server.close(() => done())),
      });
    });
  });
}

async function waitForState(client: OpenAI, id: string, states: string[]): Promise<Record<string, any>> {
  let model: Record<string, any> = {};
  for (let attempt = 0; attempt < 300; attempt++) {
    model = (await client.models.retrieve(id)) as unknown as Record<string, any>;
    if (states.includes(model.status.state)) return model;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.fail(`model ${id} never reached ${states.join("/")}: ${JSON.stringify(model.status)}`);
}

describe("remote models", () => {
  let files: Awaited<ReturnType<typeof startFileServer>>;
  before(async () => {
    files = await startFileServer(storiesModel);
  });
  after(async () => {
    await files.close();
  });

  it("downloads a GGUF once into the data dir with progress, serves it, and reuses the file on the next start", async () => {
    const dataDir = temporaryDirectory();
    const key = JSON.parse((await runCli(["keys", "create", "--json", "--data-dir", dataDir])).stdout).key as string;
    const source = `${files.url}/models/stories.gguf`;
    let server: ServeProcess | undefined = await startServeProcess(["--data-dir", dataDir, "--model", `remote=${source}`]);
    try {
      const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
      const model = await waitForState(client, "remote", ["ready", "unavailable"]);
      assert.equal(model.status.state, "ready", JSON.stringify(model.status));

      const downloaded = path.join(dataDir, "models", "stories.gguf");
      assert.deepEqual(fs.readFileSync(downloaded), fs.readFileSync(storiesModel), "the downloaded file is the served one, byte for byte");
      const progress = server
        .stdout()
        .split("\n")
        .filter((line) => line.includes('"msg":"downloading remote:'))
        .map((line) => JSON.parse(line) as { downloaded_bytes: number; total_bytes: number });
      assert.ok(progress.length >= 3, `progress is reported on the way (${progress.length} lines)`);
      assert.ok(progress.every((line) => line.total_bytes === fs.statSync(storiesModel).size));
      assert.ok(progress.some((line) => line.downloaded_bytes < line.total_bytes), "progress shows a partial download");
      assert.equal(progress.at(-1)!.downloaded_bytes, progress.at(-1)!.total_bytes, "and ends at 100%");
      assert.ok(files.hits.some((hit) => hit.method === "GET"), "the file was fetched");

      const completion = await client.chat.completions.create({
        model: "remote",
        messages: [{ role: "user", content: "Once upon a time" }],
        max_tokens: 8,
        temperature: 0,
      });
      assert.equal(completion.usage?.completion_tokens, 8);
      assert.ok((completion.choices[0]!.message.content ?? "").length > 0);
      assert.equal(await server.stop(), 0);

      const hitsBefore = files.hits.length;
      server = await startServeProcess(["--data-dir", dataDir, "--model", `remote=${source}`]);
      const again = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
      assert.equal((await waitForState(again, "remote", ["ready", "unavailable"])).status.state, "ready");
      assert.equal(files.hits.length, hitsBefore, "the second start used the downloaded file without the network");
      assert.ok(!server.stdout().includes('"msg":"downloading remote:'));
    } finally {
      assert.equal(await server?.stop(), 0);
    }
  });

  it("keeps serving and explains why when the remote file does not exist", async () => {
    const dataDir = temporaryDirectory();
    const key = JSON.parse((await runCli(["keys", "create", "--json", "--data-dir", dataDir])).stdout).key as string;
    const server = await startServeProcess([
      "--data-dir",
      dataDir,
      "--model",
      `missing=${files.url}/models/missing.gguf`,
      "--model",
      `local=${storiesModel}`,
    ]);
    try {
      const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
      const missing = await waitForState(client, "missing", ["ready", "unavailable"]);
      assert.equal(missing.status.state, "unavailable");
      assert.match(missing.status.detail, /does not exist \(127\.0\.0\.1:\d+ answered 404\)/);
      await assert.rejects(
        client.chat.completions.create({ model: "missing", messages: [{ role: "user", content: "Hi" }] }),
        (error: unknown) => error instanceof OpenAI.APIError && error.status === 503 && /does not exist/.test(error.message),
      );
      assert.ok(!fs.existsSync(path.join(dataDir, "models", "missing.gguf")), "nothing is left where a download would go");
      await waitForState(client, "local", ["ready"]);
      const completion = await client.chat.completions.create({ model: "local", messages: [{ role: "user", content: "Hi" }], max_tokens: 4 });
      assert.equal(completion.usage?.completion_tokens, 4, "the other model serves as usual");
    } finally {
      assert.equal(await server.stop(), 0);
    }
  });
});
