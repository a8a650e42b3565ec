/**
 * `turnpike check` as an operator runs it (the real command, real SQLite, PostgreSQL, Redis, GGUF
 * files and HTTP upstreams): exit 0 only when everything serves, 1 naming what does not, 2 for
 * invalid settings; no password or key printed.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import { createServer, type Server } from "node:http";
import net, { type AddressInfo } from "node:net";
import path from "node:path";
import { after, describe, it } from "node:test";
import { runCli } from "./helpers/process.ts";
import { freshPostgresSchema } from "./helpers/databases.ts";
import { sharedModelsDir, skipWithoutLlamaServer, startLlamaServer } from "./helpers/llama-server.ts";
import { storiesModel, temporaryDirectory } from "./helpers/server.ts";
import { patchedBindingInstalled } from "../src/engines/llamacpp/runtime.ts";

const WRONG_KEY = "sk-wrong-key-never-printed";
const servers: Server[] = [];
after(() => Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve)))));

/** A config file in a fresh data dir; returns the args that name both. */
function configArgs(config: Record<string, unknown>): string[] {
  const dataDir = temporaryDirectory();
  const file = path.join(dataDir, "turnpike.json");
  fs.writeFileSync(file, JSON.stringify(config));
  return ["--config", file, "--data-dir", dataDir];
}

async function closedPortUrl(): Promise<string> {
  const closed = net.createServer();
  await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
  const port = (closed.address() as AddressInfo).port;
  await new Promise<void>((resolve) => closed.close(() => resolve()));
  return `http://127.0.0.1:${port}/v1`;
}

describe("turnpike check", () => {
  it("exits 0 for SQLite and a readable embedded model, one line each", async () => {
    const result = await runCli(["check", "--data-dir", temporaryDirectory(), "--model", `stories=${storiesModel}`]);
    assert.equal(result.code, 0, result.stdout + result.stderr);
    const lines = result.stdout.trim().split("\n");
    assert.equal(lines.length, 4, result.stdout);
    assert.match(lines[0]!, /^ok {3}configuration: valid: 1 model\(s\)/);
    assert.match(lines[1]!, /^ok {3}database: SQLite .*turnpike\.sqlite: not created yet/);
    assert.match(lines[2]!, patchedBindingInstalled() ? /^ok {3}runtime llama\.cpp: Turnpike's patched node-llama-cpp binding/ : /^ok {3}runtime llama\.cpp: node-llama-cpp's prebuilt binding .*npm run build:binding/);
    assert.match(lines[3]!, /^ok {3}model stories: .*stories260K\.gguf: readable, llama, context \d+ tokens per sequence/);
  });

  it("exits 1 naming a model file that is missing, and an upstream on a closed port", async () => {
    const dead = await closedPortUrl();
    const result = await runCli(["check", "--data-dir", temporaryDirectory(), "--model", "gone=/nonexistent/gone.gguf", "--upstream", `dead=${dead}`]);
    assert.equal(result.code, 1, result.stdout + result.stderr);
    assert.match(result.stdout, /^FAIL model gone: \/nonexistent\/gone\.gguf: no such file/m);
    assert.match(result.stdout, /^FAIL upstream dead#0: http:\/\/127\.0\.0\.1:\d+\/v1: unreachable/m);
  });

  it("exits 1 when an upstream refuses the credentials, naming the variable and never printing the key", async () => {
    const server = createServer((_request, response) => response.writeHead(401, { "content-type": "application/json" }).end('{"error":{"message":"Invalid API Key"}}'));
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
    const args = configArgs({ models: [{ id: "guarded", upstream: { urls: [url], api_key_env: "GUARDED_UPSTREAM_KEY" } }] });
    const result = await runCli(["check", ...args], { env: { GUARDED_UPSTREAM_KEY: WRONG_KEY } });
    assert.equal(result.code, 1, result.stdout + result.stderr);
    assert.match(result.stdout, /^FAIL upstream guarded#0: http:\/\/127\.0\.0\.1:\d+\/v1: 401 Unauthorized: the server refused the credentials; the key comes from the environment variable GUARDED_UPSTREAM_KEY/m);
    assert.ok(!result.stdout.includes(WRONG_KEY) && !result.stderr.includes(WRONG_KEY));

    const json = await runCli(["check", "--json", ...args], { env: { GUARDED_UPSTREAM_KEY: WRONG_KEY } });
    assert.equal(json.code, 1);
    const report = JSON.parse(json.stdout) as { ok: boolean; checks: Array<Record<string, unknown>> };
    assert.equal(report.ok, false);
    const member = report.checks.find((check) => check.check === "upstream");
    assert.equal(member?.credentials, "refused");
    assert.equal(member?.status, 401);
  });

  it("reaches PostgreSQL and Redis and prints neither password", async () => {
    const { url, drop } = await freshPostgresSchema();
    try {
      const databaseUrl = url.replace("postgres://postgres@", "postgres://postgres:fake-db-password@");
      const result = await runCli(["check", "--data-dir", temporaryDirectory(), "--model", `stories=${storiesModel}`, "--database-url", databaseUrl, "--redis-url", "redis://:fake-redis-password@127.0.0.1:6379"]);
      assert.equal(result.code, 0, result.stdout + result.stderr);
      assert.match(result.stdout, /^ok {3}database: PostgreSQL postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:5432\/test\?\*\*\*: reachable/m);
      assert.match(result.stdout, /^ok {3}redis: redis:\/\/:\*\*\*@127\.0\.0\.1:6379: answers PING$/m);
      assert.ok(!/fake-(db|redis)-password/.test(result.stdout + result.stderr));
    } finally {
      await drop();
    }
  });

  it("exits 2 with the message for invalid settings", async () => {
    const result = await runCli(["check", "--port", "not-a-port"]);
    assert.equal(result.code, 2);
    assert.match(result.stderr, /^turnpike: Invalid --port/);
  });

  describe("over a real llama-server", { skip: skipWithoutLlamaServer() }, () => {
    it("finds kind llama-server and its context length", async () => {
      const llama = await startLlamaServer({ model: path.join(sharedModelsDir, "stories260K.gguf"), contextSize: 1024 });
      try {
        const result = await runCli(["check", "--json", "--data-dir", temporaryDirectory(), "--upstream", `stories=${llama.url}/v1`]);
        assert.equal(result.code, 0, result.stdout + result.stderr);
        const member = (JSON.parse(result.stdout) as { checks: Array<Record<string, unknown>> }).checks.find((check) => check.check === "upstream");
        assert.equal(member?.kind, "llama-server");
        assert.equal(member?.context_length, 1024);
        assert.equal(member?.credentials, "none sent");
      } finally {
        await llama.close();
      }
    });
  });
});
