/**
 * The llama-server helper against the real binary (scripts/build-llama-server.sh): it starts on a
 * free port, answers the OpenAI chat API streamed and not, and its own endpoints as the
 * openai-compatible engine expects; close() ends the process. Skipped outside CI when the binary
 * is not built; under CI=true a missing binary fails the file.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { after, before, describe, test } from "node:test";
import { findLlamaServer, loadedCpuBackend, sharedModelsDir, skipWithoutLlamaServer, startLlamaServer, withNodeLlamaCppCpuBackends, type RunningLlamaServer } from "./helpers/llama-server.ts";

const execFileAsync = promisify(execFile);
const helperUrl = new URL("./helpers/llama-server.ts", import.meta.url).href;

const chatmlModel = path.join(sharedModelsDir, "stories260K-chatml.gguf");
const CONTEXT_SIZE = 1024;
const PARALLEL = 2;

const messages = [
  { role: "system", content: "You are a storyteller." },
  { role: "user", content: "Tell me a story about a cat." },
];

type Chunk = {
  object: string;
  choices: Array<{ index: number; delta: { role?: string; content?: string | null }; finish_reason: string | null }>;
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | null;
  timings?: Record<string, number>;
};

/** True once no process has this pid (checked for up to 5 s). */
async function waitUntilGone(pid: number): Promise<boolean> {
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    try {
      process.kill(pid, 0);
    } catch {
      return true;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}

/** POSTs JSON and parses the JSON answer. */
async function postJson(url: string, body: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: response.status, body: await response.json() };
}

/** POSTs a streamed request and returns each `data:` event parsed, `[DONE]` kept as a string. */
async function postStream(url: string, body: unknown): Promise<{ status: number; contentType: string; events: Array<Chunk | "[DONE]"> }> {
  const response = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const text = await response.text();
  const events = text
    .split("\n\n")
    .map((block) => block.trim())
    .filter((block) => block.startsWith("data: "))
    .map((block) => block.slice("data: ".length))
    .map((data) => (data === "[DONE]" ? "[DONE]" : (JSON.parse(data) as Chunk)));
  return { status: response.status, contentType: response.headers.get("content-type") ?? "", events };
}

describe("llama-server (the real binary, on stories260K-chatml)", { skip: skipWithoutLlamaServer() }, () => {
  let server: RunningLlamaServer;

  before(async () => {
    server = await startLlamaServer({ model: chatmlModel, parallel: PARALLEL, contextSize: CONTEXT_SIZE });
  });
  after(async () => {
    await server?.close();
  });

  test("listens on 127.0.0.1 at a port of its own and reports healthy", async () => {
    assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.notEqual(server.url, "http://127.0.0.1:0");
    const response = await fetch(`${server.url}/health`);
    assert.equal(response.status, 200);
    assert.deepEqual(await response.json(), { status: "ok" });
  });

  test("/props reports the context per slot, the slot count and the model's chat template", async () => {
    const response = await fetch(`${server.url}/props`);
    assert.equal(response.status, 200);
    const props = (await response.json()) as { default_generation_settings: { n_ctx: number }; total_slots: number; chat_template: string };
    assert.equal(props.total_slots, PARALLEL);
    assert.equal(props.default_generation_settings.n_ctx, CONTEXT_SIZE / PARALLEL);
    assert.match(props.chat_template, /<\|im_start\|>/);
  });

  test("/tokenize counts tokens, gives their pieces, and /detokenize reverses it", async () => {
    const plain = await postJson(`${server.url}/tokenize`, { content: "Once upon a time", add_special: false, with_pieces: true });
    assert.equal(plain.status, 200);
    const pieces = plain.body.tokens as Array<{ id: number; piece: string }>;
    assert.ok(pieces.length > 0);
    assert.equal(pieces.map((token) => token.piece).join("").trim(), "Once upon a time");
    const withBos = await postJson(`${server.url}/tokenize`, { content: "Once upon a time", add_special: true });
    assert.deepEqual(withBos.body.tokens, [1, ...pieces.map((token) => token.id)]);
    const back = await postJson(`${server.url}/detokenize`, { tokens: pieces.map((token) => token.id) });
    assert.equal(back.body.content.trim(), "Once upon a time");
  });

  test("/apply-template renders the model's ChatML template without the BOS token", async () => {
    const rendered = await postJson(`${server.url}/apply-template`, { messages });
    assert.equal(rendered.status, 200);
    assert.equal(
      rendered.body.prompt,
      "<|im_start|>system\nYou are a storyteller.<|im_end|>\n<|im_start|>user\nTell me a story about a cat.<|im_end|>\n<|im_start|>assistant\n",
    );
  });

  test("a chat completion at temperature 0 gives the same text streamed and not, with usage", async () => {
    const request = { model: "any", messages, temperature: 0, max_tokens: 16 };
    const whole = await postJson(`${server.url}/v1/chat/completions`, request);
    assert.equal(whole.status, 200);
    assert.equal(whole.body.object, "chat.completion");
    const choice = whole.body.choices[0];
    assert.equal(choice.message.role, "assistant");
    assert.ok(choice.message.content.length > 0);
    assert.equal(choice.finish_reason, "length");
    assert.equal(whole.body.usage.completion_tokens, 16);
    assert.ok(whole.body.usage.prompt_tokens > 10);
    assert.equal(whole.body.timings.predicted_n, 16);

    const streamed = await postStream(`${server.url}/v1/chat/completions`, { ...request, stream: true, stream_options: { include_usage: true } });
    assert.equal(streamed.status, 200);
    assert.match(streamed.contentType, /^text\/event-stream/);
    assert.equal(streamed.events.at(-1), "[DONE]");
    const chunks = streamed.events.filter((event): event is Chunk => event !== "[DONE]");
    assert.ok(chunks.every((chunk) => chunk.object === "chat.completion.chunk"));
    // The first chunk only opens the message: role, and content null.
    assert.deepEqual(chunks[0]!.choices[0]!.delta, { role: "assistant", content: null });
    const text = chunks.flatMap((chunk) => chunk.choices.map((streamChoice) => streamChoice.delta.content ?? "")).join("");
    assert.equal(text, choice.message.content);
    // The finish comes in a chunk of its own with an empty delta; usage (and timings) in one more, with no choices.
    const finish = chunks.at(-2)!;
    assert.deepEqual(finish.choices, [{ finish_reason: "length", index: 0, delta: {} }]);
    const usageChunk = chunks.at(-1)!;
    assert.deepEqual(usageChunk.choices, []);
    assert.equal(usageChunk.usage?.completion_tokens, whole.body.usage.completion_tokens);
    assert.equal(usageChunk.usage?.prompt_tokens, whole.body.usage.prompt_tokens);
    assert.equal(usageChunk.timings?.predicted_n, 16);
  });

  test("n = 2 streams both choices, each under its own index, and sends a usage chunk per choice (each counting its own tokens)", async () => {
    const streamed = await postStream(`${server.url}/v1/chat/completions`, {
      messages,
      temperature: 0,
      max_tokens: 4,
      n: 2,
      stream: true,
      stream_options: { include_usage: true },
    });
    assert.equal(streamed.status, 200);
    const chunks = streamed.events.filter((event): event is Chunk => event !== "[DONE]");
    const texts = [0, 1].map((index) =>
      chunks.flatMap((chunk) => chunk.choices.filter((streamChoice) => streamChoice.index === index).map((streamChoice) => streamChoice.delta.content ?? "")).join(""),
    );
    assert.equal(texts[0], texts[1]);
    const usages = chunks.filter((chunk) => chunk.usage).map((chunk) => chunk.usage!.completion_tokens);
    assert.deepEqual(usages, [4, 4]);
  });

  test("n above the slot count is refused with an OpenAI-shaped error body (numeric code)", async () => {
    const refused = await postJson(`${server.url}/v1/chat/completions`, { messages, max_tokens: 4, n: PARALLEL + 1 });
    assert.equal(refused.status, 400);
    assert.equal(refused.body.error.type, "invalid_request_error");
    assert.equal(refused.body.error.code, 400);
  });

  test("a prompt over the slot's context is refused before any stream starts", async () => {
    const refused = await postJson(`${server.url}/v1/chat/completions`, { messages: [{ role: "user", content: "cat ".repeat(400) }], stream: true });
    assert.equal(refused.status, 400);
    assert.equal(refused.body.error.type, "exceed_context_size_error");
    assert.equal(refused.body.error.n_ctx, CONTEXT_SIZE / PARALLEL);
    assert.ok(refused.body.error.n_prompt_tokens > CONTEXT_SIZE / PARALLEL);
  });
});

describe("startLlamaServer", { skip: skipWithoutLlamaServer() }, () => {
  test("close() ends the process on SIGTERM, right after start, without the SIGKILL fallback", async () => {
    const server = await startLlamaServer({ model: chatmlModel });
    await server.close();
    // 0 after SIGTERM; SIGKILL (the fallback after 2 s) would mean the signal was lost.
    assert.equal(server.process.signalCode, null);
    assert.equal(server.process.exitCode, 0);
    await assert.rejects(fetch(`${server.url}/health`));
  });

  test("a test process that exits without close() takes its llama-server with it", async (context) => {
    for (const signal of [undefined, "SIGTERM"] as const) {
      await context.test(signal ?? "exit", async () => {
        // The child starts a server, prints its pid, and then exits (or is killed by the signal).
        const ending = signal === undefined ? "process.exit(0);" : `process.kill(process.pid, "${signal}");`;
        const script = `const { startLlamaServer } = await import(${JSON.stringify(helperUrl)});
          const server = await startLlamaServer({ model: ${JSON.stringify(chatmlModel)} });
          console.log(server.process.pid);
          ${ending}`;
        const child = execFileAsync(process.execPath, ["--input-type=module", "-e", script]);
        const result = await child.catch((error: { stdout: string }) => error);
        const pid = Number(result.stdout.trim());
        assert.ok(pid > 0, `no pid printed: ${JSON.stringify(result)}`);
        assert.equal(await waitUntilGone(pid), true, `llama-server ${pid} outlived its test process`);
      });
    }
  });

  test("the build loads its CPU backend at start (GGML_BACKEND_DL), one of every x86 level it holds", async () => {
    const builtDir = path.dirname(findLlamaServer()!);
    const builtBackends = fs.readdirSync(builtDir).filter((name) => /^libggml-cpu-.*\.so$/.test(name));
    // GGML_CPU_ALL_VARIANTS: a baseline x64 library and the levels above it, not one native build.
    if (process.arch === "x64") assert.ok(builtBackends.includes("libggml-cpu-x64.so") && builtBackends.length > 3, `backends built: ${builtBackends.join(", ")}`);
    const server = await startLlamaServer({ model: chatmlModel });
    try {
      const backend = loadedCpuBackend(server.process.pid!);
      assert.ok(backend !== undefined && path.dirname(backend) === builtDir && builtBackends.includes(path.basename(backend)), `not a CPU backend of the build: ${backend}`);
    } finally {
      await server.close();
    }
  });

  test("runs with node-llama-cpp's prebuilt CPU backends in place of its own (the benchmark's set-up)", async () => {
    const copy = withNodeLlamaCppCpuBackends();
    const server = await startLlamaServer({ binary: copy.server, model: chatmlModel });
    try {
      const backend = loadedCpuBackend(server.process.pid!);
      // Loaded from the copy's folder, and byte for byte node-llama-cpp's library of that name.
      assert.ok(backend !== undefined && path.dirname(backend) === path.dirname(copy.server), `not a backend of the copy: ${backend}`);
      assert.ok(fs.readFileSync(backend).equals(fs.readFileSync(path.join(copy.backendsDir, path.basename(backend)))), `${backend} is not node-llama-cpp's`);
      const answer = await postJson(`${server.url}/v1/chat/completions`, { messages, max_tokens: 8, temperature: 0 });
      assert.equal(answer.status, 200);
      assert.equal(answer.body.usage.completion_tokens, 8);
    } finally {
      await server.close();
      copy.remove();
    }
  });

  test("rejects with llama-server's own log when the model cannot be loaded", async () => {
    await assert.rejects(startLlamaServer({ model: path.join(sharedModelsDir, "no-such-model.gguf") }), /exited|model/);
  });
});

describe("skipWithoutLlamaServer", () => {
  /** Runs skipWithoutLlamaServer() in a child with an empty cache, so the binary is missing. */
  async function skipVerdict(ci: string): Promise<{ code: number; stdout: string; stderr: string }> {
    const script = `const { skipWithoutLlamaServer } = await import(${JSON.stringify(helperUrl)}); console.log(JSON.stringify(skipWithoutLlamaServer()));`;
    const emptyCache = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-empty-cache-"));
    const env = { ...process.env, TURNPIKE_CACHE_DIR: emptyCache, CI: ci };
    try {
      return await execFileAsync(process.execPath, ["--input-type=module", "-e", script], { env }).then(
        (result) => ({ code: 0, ...result }),
        (error: { code: number; stdout: string; stderr: string }) => error,
      );
    } finally {
      fs.rmSync(emptyCache, { recursive: true, force: true });
    }
  }

  test("without the binary, skips outside CI with how to build it", async () => {
    const verdict = await skipVerdict("");
    assert.equal(verdict.code, 0);
    assert.match(JSON.parse(verdict.stdout), /llama-server is not built .*run scripts\/build-llama-server\.sh/);
  });

  test("without the binary, fails under CI=true instead of skipping", async () => {
    const verdict = await skipVerdict("true");
    assert.notEqual(verdict.code, 0);
    assert.match(verdict.stderr, /llama-server is not built .*CI must build it/);
  });
});
