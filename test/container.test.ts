/**
 * The container image and the compose set-ups, for real: podman builds the project's own Dockerfile
 * (on base images built from Debian's archive by scripts/container-base-images.sh, since no image
 * registry is reachable here), runs it read-only as a non-root user with the GGUF mounted read-only,
 * drives it with the official `openai` SDK and stops it with SIGTERM; then deploy/compose/two-nodes.yaml
 * comes up under podman-compose (two nodes, nginx, PostgreSQL, Redis, two llama-servers) and a key made
 * on one node serves on the other and through nginx, with the books balanced. Skips only without podman.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import OpenAI from "openai";
import { mustRun, prepareBaseImages, runCommand, secondsSince, skipWithoutPodman, waitForOk } from "./helpers/podman.ts";
import { freePort } from "./helpers/process.ts";
import { modelsDir, repoRoot, temporaryDirectory } from "./helpers/server.ts";

const image = "localhost/turnpike:container-test";
const dataPath = "/data";
const composeDirectory = path.join(repoRoot, "deploy", "compose");

function phase(name: string, started: number): void {
  process.stderr.write(`container test: ${name} took ${secondsSince(started)} s\n`);
}

/** A chat completion both ways, whole and streamed, each with text and usage. */
async function chatBothWays(client: OpenAI, model: string): Promise<void> {
  const body = { model, messages: [{ role: "user" as const, content: "Once upon a time" }], max_tokens: 12, temperature: 0 };
  const whole = await client.chat.completions.create(body);
  assert.equal(whole.object, "chat.completion");
  assert.ok(whole.choices[0]!.message.content!.length > 0, "the model wrote something");
  assert.ok(whole.usage!.completion_tokens > 0);
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = "";
  let finish: string | null = null;
  let usage: OpenAI.CompletionUsage | undefined;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
    usage = chunk.usage ?? usage;
  }
  assert.ok(text.length > 0, "the stream carried text");
  assert.ok(finish === "stop" || finish === "length", `the stream finished (${finish})`);
  assert.ok(usage !== undefined && usage.completion_tokens > 0, "the stream ended with its usage");
}

describe("the container image", { skip: skipWithoutPodman(), timeout: 900_000 }, () => {
  let env: NodeJS.ProcessEnv;
  const podman = (args: string[]) => mustRun("podman", args, { env });
  const testStarted = performance.now();

  before(async () => {
    let started = performance.now();
    env = await prepareBaseImages();
    phase("base images", started);
    started = performance.now();
    await podman(["build", "--tag", image, "--file", "Dockerfile", "."]);
    phase("image build", started);
    const size = JSON.parse(await podman(["image", "inspect", image]))[0].Size as number;
    process.stderr.write(`container test: image ${image} is ${(size / 1e6).toFixed(0)} MB\n`);
  }, { timeout: 900_000 });

  after(async () => {
    // Kept for the next run's layer cache; only the tag this test made goes.
    if (env !== undefined) await runCommand("podman", ["image", "rm", image], { env });
    phase("the whole container test", testStarted);
  });

  it("declares a non-root user and carries no compiler", async () => {
    const [inspected] = JSON.parse(await podman(["image", "inspect", image]));
    assert.equal(inspected.Config.User, "1000:1000");
    const found = await runCommand("podman", ["run", "--rm", "--entrypoint", "sh", image, "-c", "command -v gcc cc g++ c++ make cmake || true"], { env });
    assert.equal(found.code, 0, found.stderr);
    assert.equal(found.stdout.trim(), "", "no compiler or build tool in the final image");
  });

  it("comes up from the one-node compose file: read-only, SQLite on its volume, the model folder read-only", async () => {
    const project = "turnpike-single-test";
    const port = await freePort();
    const composeEnv = { ...env, TURNPIKE_IMAGE: image, TURNPIKE_PORT: String(port), TURNPIKE_MODEL_DIR: modelsDir, TURNPIKE_MODEL_FILE: "stories260K.gguf", TURNPIKE_THREADS: "1" };
    const composeArgs = ["--project-name", project, "--file", path.join(composeDirectory, "single-node.yaml")];
    const down = async () => {
      await runCommand("podman-compose", [...composeArgs, "down", "--volumes"], { env: composeEnv, cwd: composeDirectory });
      await runCommand("podman", ["volume", "rm", "--force", `${project}_turnpike-data`], { env });
      await runCommand("podman", ["network", "rm", "--force", `${project}_default`], { env });
    };
    await down();
    try {
      const started = performance.now();
      await mustRun("podman-compose", [...composeArgs, "up", "--detach", "--no-build"], { env: composeEnv, cwd: composeDirectory });
      await waitForOk(`http://127.0.0.1:${port}/ready`, 180);
      phase("one-node compose: up to /ready", started);
      const [inspected] = JSON.parse(await podman(["inspect", `${project}_turnpike_1`]));
      assert.equal(inspected.HostConfig.ReadonlyRootfs, true);
      const models = inspected.Mounts.find((mount: { Destination: string }) => mount.Destination === "/models");
      assert.equal(models.RW, false, "the model folder is mounted read-only");
      assert.match((await podman(["exec", `${project}_turnpike_1`, "ls", dataPath])), /turnpike\.sqlite/);
    } finally {
      await down();
    }
  });

  describe("one container, read-only, as a non-root user", () => {
    const name = "turnpike-container-test";
    const volume = "turnpike-container-test-data";
    let port: number;
    let client: OpenAI;

    const remove = async () => {
      await runCommand("podman", ["rm", "--force", "--time", "0", name], { env });
      await runCommand("podman", ["volume", "rm", "--force", volume], { env });
    };

    before(async () => {
      await remove();
      port = await freePort();
      const started = performance.now();
      // --read-only-tmpfs=false: no writable /run, /var/tmp; only /tmp (scratch) and the data volume, as with Docker.
      await podman([
        "run", "--detach", "--name", name, "--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp", "--user", "1000:1000",
        "--volume", `${volume}:${dataPath}`, "--volume", `${modelsDir}:/models:ro`,
        "--env", "TURNPIKE_MODELS=stories=/models/stories260K.gguf", "--env", "TURNPIKE_THREADS=1", "--env", "TURNPIKE_PARALLEL=2",
        "--publish", `127.0.0.1:${port}:8080`, image,
      ]);
      await waitForOk(`http://127.0.0.1:${port}/ready`, 180, async () => {
        const state = (await runCommand("podman", ["inspect", "--format", "{{.State.Status}}", name], { env })).stdout.trim();
        return state === "running" ? undefined : `the container is ${state}: ${(await runCommand("podman", ["logs", name], { env })).stderr.slice(-3000)}`;
      });
      phase("one container: start to /ready", started);
      const key = (await podman(["exec", name, "node", "bin/turnpike.js", "keys", "create", "--name", "container-test", "--json"])).trim();
      client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: JSON.parse(key).key, maxRetries: 0 });
    }, { timeout: 300_000 });
    after(remove);

    it("runs as uid 1000 and can write only to its data volume", async () => {
      assert.equal((await podman(["exec", name, "id", "-u"])).trim(), "1000");
      for (const target of ["/app/written", "/app/node_modules/node-llama-cpp/written", "/home/node/written", "/written"]) {
        const written = await runCommand("podman", ["exec", name, "touch", target], { env });
        assert.notEqual(written.code, 0, `${target} is not writable`);
        assert.match(written.stderr, /Read-only file system|Permission denied/);
      }
      await podman(["exec", name, "touch", `${dataPath}/written`]);
      const files = (await podman(["exec", name, "ls", dataPath])).split("\n");
      assert.ok(files.includes("turnpike.sqlite"), `the SQLite database is on the volume (${files.join(", ")})`);
    });

    it("answers /health and /ready, serves the model from the read-only mount and the built console", async () => {
      assert.equal((await fetch(`http://127.0.0.1:${port}/health`)).status, 200);
      const ready = await (await fetch(`http://127.0.0.1:${port}/ready`)).json();
      assert.equal(ready.status, "ready");
      const models = await client.models.list();
      assert.deepEqual(models.data.map((model) => model.id), ["stories"]);
      const page = await fetch(`http://127.0.0.1:${port}/`);
      assert.equal(page.status, 200, "the built console is in the image");
      assert.match(await page.text(), /<script type="module"[^>]+src="\/assets\//);
    });

    it("serves chat completions to the openai SDK, whole and streamed", async () => {
      await chatBothWays(client, "stories");
    });

    it("exits 0 on SIGTERM", async () => {
      const started = performance.now();
      await podman(["stop", "--time", "60", name]);
      phase("one container: SIGTERM to exit", started);
      const state = JSON.parse(await podman(["inspect", name]))[0].State;
      assert.equal(state.ExitCode, 0, (await runCommand("podman", ["logs", name], { env })).stderr.slice(-2000));
      assert.equal(state.OOMKilled, false);
    });
  });

  describe("two nodes behind nginx with PostgreSQL, Redis and two llama-servers (deploy/compose/two-nodes.yaml)", () => {
    const project = "turnpike-compose-test";
    const ports = { nginx: 0, node1: 0, node2: 0 };
    let composeEnv: NodeJS.ProcessEnv;
    let composeArgs: string[];
    const compose = (args: string[]) => mustRun("podman-compose", [...composeArgs, ...args], { env: composeEnv, cwd: composeDirectory });
    const container = (service: string) => `${project}_${service}_1`;

    async function down() {
      if (composeArgs === undefined) return;
      const result = await runCommand("podman-compose", [...composeArgs, "down", "--volumes"], { env: composeEnv, cwd: composeDirectory });
      if (result.code !== 0) process.stderr.write(`container test: compose down: ${result.stderr.slice(-1000)}\n`);
      // podman-compose leaves the project's network and, in some versions, its volumes.
      const volumes = (await runCommand("podman", ["volume", "ls", "--quiet", "--filter", `label=io.podman.compose.project=${project}`], { env })).stdout.split("\n").filter(Boolean);
      if (volumes.length > 0) await runCommand("podman", ["volume", "rm", "--force", ...volumes], { env });
      await runCommand("podman", ["network", "rm", "--force", `${project}_default`], { env });
    }

    async function logsOf(service: string): Promise<string> {
      const result = await runCommand("podman", ["logs", "--tail", "40", container(service)], { env });
      return `${service}:\n${result.stdout}${result.stderr}`.slice(-3000);
    }

    before(async () => {
      ports.nginx = await freePort();
      ports.node1 = await freePort();
      ports.node2 = await freePort();
      // The nodes published on loopback too, to talk to each one directly; the compose file itself publishes nginx only.
      const override = path.join(temporaryDirectory("turnpike-compose-"), "direct-ports.yaml");
      fs.writeFileSync(
        override,
        `services:\n  turnpike-1:\n    ports: ["127.0.0.1:${ports.node1}:8080"]\n  turnpike-2:\n    ports: ["127.0.0.1:${ports.node2}:8080"]\n`,
      );
      composeArgs = ["--project-name", project, "--file", path.join(composeDirectory, "two-nodes.yaml"), "--file", override];
      composeEnv = {
        ...env,
        TURNPIKE_IMAGE: image,
        TURNPIKE_PORT: String(ports.nginx),
        TURNPIKE_MODEL_DIR: modelsDir,
        LLAMA_MODEL_FILE: "stories260K.gguf",
        LLAMA_THREADS: "1",
        LLAMA_CTX_SIZE: "2048",
        POSTGRES_PASSWORD: `test-${Math.random().toString(36).slice(2)}`,
      };
      const llamaServer = await runCommand("podman", ["image", "exists", "ghcr.io/ggml-org/llama.cpp:server"], { env });
      assert.equal(llamaServer.code, 0, "no llama-server stand-in image: scripts/build-llama-server.sh must have built llama-server before scripts/container-base-images.sh ran");
      await down();
      const started = performance.now();
      await compose(["up", "--detach", "--no-build"]);
      phase("compose: up", started);
      const statusOf = async () => {
        const listed = await runCommand("podman", ["ps", "--all", "--filter", `label=io.podman.compose.project=${project}`, "--format", "{{.Names}} {{.Status}}"], { env });
        const exited = listed.stdout.split("\n").filter((line) => /Exited \([1-9]/.test(line) && !line.includes("_migrate_"));
        return exited.length === 0 ? undefined : `${exited.join("; ")}\n${(await Promise.all(["turnpike-1", "turnpike-2", "migrate", "postgres"].map(logsOf))).join("\n")}`;
      };
      for (const port of [ports.node1, ports.node2, ports.nginx]) await waitForOk(`http://127.0.0.1:${port}/ready`, 240, statusOf);
      phase("compose: up to every /ready", started);
    }, { timeout: 600_000 });
    after(down);

    /** Runs `turnpike ...args` in a node's container (its environment names the database and config). */
    const turnpike = async (service: string, args: string[]) => (await podman(["exec", container(service), "node", "bin/turnpike.js", ...args])).trim();

    it("asks for a key on each node and through nginx, and each node sees both llama-servers", async () => {
      for (const port of [ports.node1, ports.node2, ports.nginx]) {
        const response = await fetch(`http://127.0.0.1:${port}/v1/models`, { headers: { authorization: "Bearer nothing" } });
        assert.equal(response.status, 401, "the models list needs a key");
      }
      const key = JSON.parse(await turnpike("turnpike-1", ["keys", "create", "--name", "operator", "--json"])).key;
      for (const port of [ports.node1, ports.node2]) {
        const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key, maxRetries: 0 });
        // Each node probes the pool's members itself; poll until it has seen both answer.
        let status: { state: string; members_healthy?: number; members_total?: number } | undefined;
        for (let attempt = 0; attempt < 240 && status?.members_healthy !== 2; attempt++) {
          if (attempt > 0) await delay(500);
          const llama = (await client.models.list()).data.find((model) => model.id === "llama");
          assert.ok(llama !== undefined, "the upstream model is listed");
          status = (llama as unknown as { status: typeof status }).status;
        }
        assert.deepEqual(status, { state: "ready", members_healthy: 2, members_total: 2 }, `node on ${port} sees both llama-servers`);
      }
    });

    it("a metered key made on node 1 serves on node 2 and through nginx, and the books balance", async () => {
      const email = `compose-${Math.random().toString(36).slice(2)}@example.com`;
      await turnpike("turnpike-1", ["accounts", "create", "--email", email, "--json"]);
      await turnpike("turnpike-1", ["plans", "grant", "--account", email, "--plan", "starter"]);
      const key = JSON.parse(await turnpike("turnpike-1", ["keys", "create", "--account", email, "--json"])).key as string;
      const clients = [ports.node2, ports.node1, ports.nginx].map((port) => new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key, maxRetries: 0 }));
      for (const client of clients) await chatBothWays(client, "llama");

      // Every hold settled, then balance = the plan's credit less the charges = the sum of the ledger.
      const query =
        "SELECT a.balance, (SELECT sum(amount) FROM ledger_entries WHERE account_id = a.id), " +
        "(SELECT count(*) FROM holds WHERE account_id = a.id AND status = 'active'), " +
        "(SELECT count(*) FROM usage_records WHERE account_id = a.id) " +
        `FROM accounts a WHERE a.email = '${email}'`;
      let books: number[] = [];
      for (let attempt = 0; attempt < 120; attempt++) {
        const row = await podman(["exec", container("postgres"), "psql", "--username", "turnpike", "--dbname", "turnpike", "--tuples-only", "--no-align", "--field-separator", " ", "--command", query]);
        books = row.trim().split(" ").map(Number);
        if (books[2] === 0) break;
        await delay(250);
      }
      const [balance, sumOfEntries, activeHolds, usageRecords] = books;
      assert.equal(activeHolds, 0, "every hold settled");
      assert.equal(usageRecords, 6, "each of the six requests recorded once");
      assert.equal(balance, sumOfEntries, "the balance is the sum of the ledger");
      assert.ok(balance! < 5_000_000 && balance! > 0, `the requests were charged (balance ${balance})`);
      const shown = JSON.parse(await turnpike("turnpike-2", ["accounts", "show", "--email", email, "--json"]));
      assert.equal(shown.balance, balance, "node 2 shows the same balance");
    });
  });
});
