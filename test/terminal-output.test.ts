/**
 * What `turnpike serve` prints: on a terminal (`--log-format pretty`, forced here since a test
 * has no terminal) a start banner and one readable line per record; piped (`auto`) or with
 * `--log-format json`, JSON lines as log collectors expect.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { describe, it } from "node:test";
import { runCli, startServeProcess } from "./helpers/process.ts";
import { cliPath, nodeBinary, repoRoot, storiesModel, temporaryDirectory } from "./helpers/server.ts";

/** Waits until `read()` matches `pattern` (the process writes when it gets there), or fails saying what it read. */
async function waitFor(read: () => string, pattern: RegExp, what: string): Promise<RegExpExecArray> {
  for (let attempt = 0; attempt < 600; attempt++) {
    const match = pattern.exec(read());
    if (match !== null) return match;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`no ${what} in:\n${read()}`);
}

async function waitUntilReady(url: string): Promise<void> {
  for (let attempt = 0; attempt < 600; attempt++) {
    if ((await fetch(`${url}/ready`)).status === 200) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error("the model never became ready");
}

async function chat(url: string, key: string): Promise<number> {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "stories", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 8 }),
  });
  await response.arrayBuffer();
  return response.status;
}

describe("turnpike serve --log-format pretty", () => {
  it("prints a start banner with the setup code in a box, then one readable line per request", async () => {
    const dataDir = temporaryDirectory();
    const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: "1" };
    delete env.FORCE_COLOR;
    delete env.TURNPIKE_LOG_FORMAT;
    const child = spawn(nodeBinary, [cliPath, "serve", "--log-format", "pretty", "--port", "0", "--threads", "1", "--gpu", "cpu", "--data-dir", dataDir, "--model", `stories=${storiesModel}`], {
      cwd: repoRoot,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = once(child, "exit") as Promise<[number | null, string | null]>;
    try {
      await waitFor(() => stdout, /and give it to any OpenAI SDK with base URL \S+\/v1\n/, "start banner");
      const url = /^ {2}API +(http:\/\/\S+)\/v1$/m.exec(stdout)?.[1];
      assert.ok(url, stdout);
      assert.match(stdout, /^ {2}Turnpike \d+\.\d+\.\d+\S* is listening$/m);
      assert.match(stdout, new RegExp(`^ {2}Console +${url}/`, "m"));
      assert.match(stdout, new RegExp(`^ {2}Data +${dataDir} \\(SQLite database and downloaded models\\)$`, "m"));
      assert.match(stdout, /^ {2}Models +stories {2}(loading|ready)$/m);
      const code = /^ {2}┃ +([A-Z2-9]{4}-[A-Z2-9]{4}-[A-Z2-9]{4}-[A-Z2-9]{4}) +┃$/m.exec(stdout)?.[1];
      assert.ok(code, `the setup code in a box:\n${stdout}`);
      assert.match(stdout, new RegExp(`┃ +${url}/signup +┃`));
      assert.match(stdout, /┗━+┛/);
      assert.ok(!stderr.includes(code), "printed once, in the box");
      assert.doesNotMatch(stdout, /turnpike listening/, "the banner says it instead");

      // The next step the banner gives works as printed.
      const keysCreate = /^ +(?:npx )?turnpike (keys create .+)$/m.exec(stdout)?.[1];
      assert.ok(keysCreate, stdout);
      const created = await runCli(keysCreate.split(" "));
      assert.equal(created.code, 0, created.stderr);
      const key = created.stdout.trim().split("\n").at(-1)!;

      await waitUntilReady(url);
      assert.equal(await chat(url, key), 200);
      const line = await waitFor(() => stdout, /^.*POST \/v1\/chat\/completions.*$/m, "request line");
      assert.match(line[0], /^\[\d\d:\d\d:\d\d\] INFO: POST \/v1\/chat\/completions 200 \d+ms model=stories key=key_\S+ \d+\+\d+ tok$/);
      assert.match(stdout, /INFO: model stories: ready$/m, "each change of a model's state is one line");
      assert.ok(!stdout.includes(key), "the key is never printed");
      assert.ok(!stdout.split("\n").some((text) => text.startsWith("{")), "no JSON line");
      child.kill("SIGTERM");
      const [exitCode] = await exited;
      assert.equal(exitCode, 0, stderr);
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL");
    }
  });
});

describe("turnpike serve logging JSON", () => {
  for (const [name, args] of [
    ["with --log-format json", ["--log-format", "json"]],
    ["piped, with the default (auto)", []],
  ] as const) {
    it(`${name}: every line of standard output is a JSON record, the setup code is on stderr`, async () => {
      const dataDir = temporaryDirectory();
      const key = JSON.parse((await runCli(["keys", "create", "--json", "--data-dir", dataDir])).stdout).key as string;
      const server = await startServeProcess([...args, "--data-dir", dataDir, "--model", `stories=${storiesModel}`]);
      try {
        const models = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
        assert.equal(models.status, 200);
        await waitFor(server.stdout, /"msg":"request"/, "request record");
      } finally {
        assert.equal(await server.stop(), 0, server.stderr());
      }
      const records = server
        .stdout()
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      for (const record of records) assert.ok(typeof record.level === "number" && typeof record.time === "number" && typeof record.msg === "string", JSON.stringify(record));
      assert.ok(records.some((record) => record.msg === "turnpike listening" && record.service === "turnpike"));
      const request = records.find((record) => record.msg === "request");
      assert.deepEqual({ method: request?.method, url: request?.url, status: request?.status }, { method: "GET", url: "/v1/models", status: 200 });
      assert.equal(typeof request?.latency_ms, "number");
      const code = /setup code:\s+([A-Z2-9-]{19})/.exec(server.stderr())?.[1];
      assert.ok(code, server.stderr());
      assert.ok(!server.stdout().includes(code) && !server.stdout().includes(key));
    });
  }
});
