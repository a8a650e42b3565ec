/**
 * The `turnpike` command as an operator runs it: keys, settings errors, graceful shutdown,
 * and the default model when there is no network.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import OpenAI from "openai";
import { runCli, startServeProcess } from "./helpers/process.ts";
import { storiesModel, temporaryDirectory } from "./helpers/server.ts";

describe("turnpike keys", () => {
  it("creates a key, prints it once as the last line, lists without it, and revokes", async () => {
    const dataDir = temporaryDirectory();
    const plain = await runCli(["keys", "create", "--name", "laptop", "--data-dir", dataDir]);
    assert.equal(plain.code, 0, plain.stderr);
    const key = plain.stdout.trim().split("\n").at(-1)!;
    assert.match(key, /^tp-[A-Za-z0-9_-]{43}$/);
    assert.match(plain.stderr, /shown only this once/);

    const json = await runCli(["keys", "create", "--json", "--data-dir", dataDir]);
    assert.equal(json.code, 0, json.stderr);
    const created = JSON.parse(json.stdout) as Record<string, unknown>;
    assert.deepEqual(Object.keys(created).sort(), ["created", "id", "key", "name", "scope"]);
    assert.equal(created.scope, "admin", "an operator key keeps admin power");
    assert.notEqual(created.key, key);

    const listed = await runCli(["keys", "list", "--json", "--data-dir", dataDir]);
    assert.equal(listed.code, 0, listed.stderr);
    const rows = JSON.parse(listed.stdout) as Array<Record<string, unknown>>;
    assert.equal(rows.length, 2);
    assert.ok(!listed.stdout.includes(key) && !listed.stdout.includes(String(created.key)), "list never shows a key");
    assert.ok(rows.every((row) => row.status === "active"));
    const table = await runCli(["keys", "list", "--data-dir", dataDir]);
    assert.match(table.stdout, /laptop/);
    assert.ok(!table.stdout.includes(key));

    const revoked = await runCli(["keys", "revoke", String(created.id), "--data-dir", dataDir]);
    assert.equal(revoked.code, 0);
    const after = JSON.parse((await runCli(["keys", "list", "--json", "--data-dir", dataDir])).stdout) as Array<Record<string, unknown>>;
    assert.equal(after.find((row) => row.id === created.id)?.status, "revoked");

    const unknown = await runCli(["keys", "revoke", "key_nope", "--data-dir", dataDir]);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /no API key with id 'key_nope'/);

    const database = fs.readFileSync(path.join(dataDir, "turnpike.sqlite"));
    assert.ok(!database.includes(key), "the database file does not contain the key");
  });

  it("gives an account's key scope 'account' by default, and admin scope only to an admin's key", async () => {
    const dataDir = temporaryDirectory();
    const json = async (args: string[]) => {
      const result = await runCli([...args, "--json", "--data-dir", dataDir]);
      assert.equal(result.code, 0, result.stderr);
      return JSON.parse(result.stdout) as Record<string, unknown>;
    };
    await json(["accounts", "create", "--email", "boss@example.com", "--admin"]);
    await json(["accounts", "create", "--email", "user@example.com"]);
    assert.equal((await json(["keys", "create", "--account", "boss@example.com"])).scope, "account");
    assert.equal((await json(["keys", "create", "--account", "boss@example.com", "--admin"])).scope, "admin");
    assert.equal((await json(["keys", "create", "--account", "user@example.com", "--scope", "inference"])).scope, "inference");
    const refused = await runCli(["keys", "create", "--account", "user@example.com", "--admin", "--data-dir", dataDir]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /user@example\.com is not an admin/);
    const bad = await runCli(["keys", "create", "--scope", "root", "--data-dir", dataDir]);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /--scope must be one of inference, account, admin/);
    const table = await runCli(["keys", "list", "--data-dir", dataDir]);
    assert.match(table.stdout, /SCOPE/);
  });

  it("reads the data dir from TURNPIKE_DATA_DIR", async () => {
    const dataDir = temporaryDirectory();
    const created = await runCli(["keys", "create", "--json"], { env: { TURNPIKE_DATA_DIR: dataDir } });
    assert.equal(created.code, 0, created.stderr);
    assert.ok(fs.existsSync(path.join(dataDir, "turnpike.sqlite")));
  });

  it("reads the data dir from the --config file as serve does, a flag or variable overriding it", async () => {
    const fromFile = temporaryDirectory();
    const fromEnv = temporaryDirectory();
    const configFile = path.join(temporaryDirectory(), "turnpike.json");
    fs.writeFileSync(configFile, JSON.stringify({ data_dir: fromFile }));
    const created = await runCli(["keys", "create", "--json", "--config", configFile]);
    assert.equal(created.code, 0, created.stderr);
    assert.ok(fs.existsSync(path.join(fromFile, "turnpike.sqlite")), "the file's data dir");
    const overridden = await runCli(["keys", "list", "--json"], { env: { TURNPIKE_CONFIG: configFile, TURNPIKE_DATA_DIR: fromEnv } });
    assert.equal(overridden.code, 0, overridden.stderr);
    assert.deepEqual(JSON.parse(overridden.stdout), [], "the variable's data dir, with no keys yet");
    assert.ok(fs.existsSync(path.join(fromEnv, "turnpike.sqlite")));
  });
});

describe("turnpike serve settings", () => {
  const cases: Array<[string, string[], Record<string, string>, RegExp]> = [
    ["a port that is not a number", ["--port", "abc"], {}, /--port/],
    ["a port out of range", ["--port", "70000"], {}, /'port'.*--port/],
    ["parallel 0", ["--parallel", "0"], {}, /'parallel'/],
    ["an unknown log level", ["--log-level", "loud"], {}, /'log_level'/],
    ["a bad environment variable", [], { TURNPIKE_PORT: "eighty" }, /TURNPIKE_PORT/],
    ["a missing config file", ["--config", "/nonexistent/turnpike.json"], {}, /config file/],
    ["an unknown gpu backend", ["--gpu", "tpu"], {}, /'gpu'/],
  ];
  for (const [what, args, env, pattern] of cases) {
    it(`stops start-up with one clear line for ${what}`, async () => {
      const result = await runCli(["serve", "--data-dir", temporaryDirectory(), "--model", storiesModel, ...args], { env });
      assert.equal(result.code, 2, result.stderr);
      const lines = result.stderr.trim().split("\n");
      assert.equal(lines.length, 1, result.stderr);
      assert.match(lines[0]!, pattern);
      assert.match(lines[0]!, /^turnpike: /);
    });
  }

  it("stops start-up with one clear line, and exit code 1, when the database is unreachable, never showing its password", async () => {
    const result = await runCli(["serve", "--data-dir", temporaryDirectory(), "--model", storiesModel, "--database-url", "postgres://turnpike:s3cret-pw@127.0.0.1:1/turnpike"]);
    assert.equal(result.code, 1, result.stderr);
    const lines = result.stderr.trim().split("\n");
    assert.equal(lines.length, 1, result.stderr);
    assert.match(lines[0]!, /^turnpike: could not start: the database is unreachable; check --database-url \(TURNPIKE_DATABASE_URL\)/);
    assert.ok(!result.stderr.includes("s3cret-pw") && !result.stdout.includes("s3cret-pw"), "the password is never shown");
  });

  it("reads models and pricing from a --config file", async () => {
    const dataDir = temporaryDirectory();
    const configFile = path.join(dataDir, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({ parallel: 2, models: [{ id: "tiny", path: storiesModel, pricing: { prompt: 100, cached_prompt: 10, completion: 300 } }] }),
    );
    const key = JSON.parse((await runCli(["keys", "create", "--json", "--data-dir", dataDir])).stdout).key as string;
    const server = await startServeProcess(["--config", configFile, "--data-dir", dataDir]);
    try {
      const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
      const model = (await client.models.retrieve("tiny")) as unknown as Record<string, any>;
      assert.deepEqual(model.pricing, { prompt: 100, cached_prompt: 10, completion: 300 });
    } finally {
      assert.equal(await server.stop(), 0);
    }
  });
});

describe("turnpike serve lifecycle", () => {
  it("finishes a running stream on SIGTERM, refuses new work, and exits 0", async () => {
    const dataDir = temporaryDirectory();
    const key = JSON.parse((await runCli(["keys", "create", "--json", "--data-dir", dataDir])).stdout).key as string;
    const randomModel = path.join(path.dirname(storiesModel), "llama-2-tiny-random.gguf");
    // No drain delay: the refusal of new work is what this test is about (test/drain.test.ts drains).
    const server = await startServeProcess(["--data-dir", dataDir, "--model", `random=${randomModel}`, "--drain-delay", "0"]);
    for (let attempt = 0; attempt < 100; attempt++) {
      if ((await fetch(`${server.url}/ready`)).status === 200) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: "random",
      messages: [{ role: "user", content: "Go" }],
      max_tokens: 1200,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let usage: OpenAI.CompletionUsage | undefined;
    let signalled: Promise<number | null> | undefined;
    let refusal: string | number | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.usage) usage = chunk.usage;
      if (signalled === undefined) {
        signalled = server.stop("SIGTERM");
        while (!server.stdout().includes("shutting down")) await new Promise((resolve) => setTimeout(resolve, 5));
        refusal = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } }).then(
          (response) => response.status,
          () => "connection refused",
        );
      }
    }
    assert.ok(refusal === "connection refused" || refusal === 503, `new work is refused while shutting down (${refusal})`);
    assert.equal(usage?.completion_tokens, 1200, "the running stream was allowed to finish");
    assert.ok(text.length > 0);
    assert.equal(await signalled, 0, server.stderr());
    assert.match(server.stdout(), /"msg":"stopped"/);
    await assert.rejects(fetch(`${server.url}/health`), "the port is closed after exit");
  });

  it("on SIGINT, ends a stream that outlasts --shutdown-timeout with an error event, then exits 0", async () => {
    const dataDir = temporaryDirectory();
    const key = JSON.parse((await runCli(["keys", "create", "--json", "--data-dir", dataDir])).stdout).key as string;
    const randomModel = path.join(path.dirname(storiesModel), "llama-2-tiny-random.gguf");
    const server = await startServeProcess(["--data-dir", dataDir, "--model", `random=${randomModel}`, "--shutdown-timeout", "0.2"]);
    let signalled: Promise<number | null> | undefined;
    try {
      for (let attempt = 0; attempt < 100; attempt++) {
        if ((await fetch(`${server.url}/ready`)).status === 200) break;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" };
      const catalog = (await (await fetch(`${server.url}/v1/models/random`, { headers })).json()) as { context_length: number };
      const response = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers,
        body: JSON.stringify({ model: "random", messages: [{ role: "user", content: "Go" }], max_tokens: catalog.context_length - 64, stream: true }),
      });
      assert.equal(response.status, 200);
      const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
      let text = "";
      const started = Date.now();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += value;
        if (signalled === undefined && text.includes('"content"')) signalled = server.stop("SIGINT");
      }
      const elapsed = Date.now() - started;
      const events = text.split("\n\n").filter((event) => event.startsWith("data: "));
      const last = events.at(-1)!;
      assert.ok(events.length > 2, "content streamed before the shutdown");
      assert.ok(!text.includes("data: [DONE]"), "a cut stream does not claim to be done");
      const error = JSON.parse(last.slice("data: ".length)) as { error: { code: string; type: string; message: string } };
      assert.equal(error.error.code, "shutting_down");
      assert.match(error.error.message, /shutting down/i);
      assert.ok(elapsed < 15_000, `the stream was cut after the timeout, not run to max_tokens (${elapsed} ms)`);
      assert.equal(await signalled, 0, server.stderr());
    } finally {
      await (signalled ?? server.stop());
    }
  });

  it("starts offline without a model, lists the default as not ready, and answers 503 with how to pass a GGUF", async () => {
    const dataDir = temporaryDirectory();
    const key = JSON.parse((await runCli(["keys", "create", "--json", "--data-dir", dataDir])).stdout).key as string;
    const server = await startServeProcess(["--data-dir", dataDir]);
    try {
      const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
      let model: Record<string, any> = {};
      for (let attempt = 0; attempt < 200; attempt++) {
        model = (await client.models.list()).data[0] as unknown as Record<string, any>;
        if (model.status.state === "unavailable") break;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.equal(model.id, "qwen2.5-0.5b-instruct");
      assert.equal(model.status.state, "unavailable");
      assert.match(model.status.detail, /--model/);
      const ready = await fetch(`${server.url}/ready`);
      assert.equal(ready.status, 503);
      await assert.rejects(
        client.chat.completions.create({ model: "qwen2.5-0.5b-instruct", messages: [{ role: "user", content: "Hi" }] }),
        (error: unknown) => error instanceof OpenAI.APIError && error.status === 503 && /--model \/path\/to\/model\.gguf/.test(error.message),
      );
      assert.equal((await fetch(`${server.url}/health`)).status, 200, "the process is up");
    } finally {
      assert.equal(await server.stop(), 0);
    }
  });
});
