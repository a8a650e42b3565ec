/**
 * A rolling restart behind a real load balancer loses nothing: two `turnpike serve` processes
 * share one PostgreSQL behind nginx (a private config on a free port), several clients stream
 * chat completions through it with the official `openai` client (no retries of their own), and
 * node 1 then node 2 is stopped with SIGTERM (exit 0) and started again on its port.
 *
 * nginx retries a request on the other node when a node refuses the connection (its listener is
 * closed) or answers 503 (`proxy_next_upstream error timeout http_503 non_idempotent`). Retrying
 * a POST is safe here because every 503 a stopping node answers came from its door (new requests
 * are refused before authentication, before anything is reserved or generated): it did no work
 * and billed nothing. README "Upgrades and drains" says where that stops holding.
 *
 * Afterwards: no request failed, every successful request is billed exactly once (its own usage
 * record, by request id; balance = Σ ledger entries; each record costs its tokens at the
 * prices), and nothing is held.
 */
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import OpenAI from "openai";
import { openStore } from "../src/store/open.ts";
import { assertBooksBalanced } from "./helpers/audit-books.ts";
import { freshPostgresSchema } from "./helpers/databases.ts";
import { billedExactly, meteredKey } from "./helpers/metered.ts";
import { freePort, startServeProcess, type ServeProcess } from "./helpers/process.ts";
import { storiesModel, temporaryDirectory } from "./helpers/server.ts";

const pricing = { prompt: 1_000_000, cached_prompt: 1_000_000, completion: 2_000_000 };
const CREDIT = 1_000_000_000;
const NGINX = process.env.TURNPIKE_TEST_NGINX ?? "/usr/sbin/nginx";
const CLIENTS = 4;


/** nginx in front of `ports`, with its own prefix, pid file, logs and temp paths under `directory`. */
function nginxConfig(directory: string, listen: number, ports: number[]): string {
  const temp = (name: string) => path.join(directory, name);
  return `worker_processes 1;
pid ${temp("nginx.pid")};
error_log ${temp("error.log")} warn;
events { worker_connections 512; }
http {
  access_log off;
  client_body_temp_path ${temp("client-body")};
  proxy_temp_path ${temp("proxy")};
  fastcgi_temp_path ${temp("fastcgi")};
  uwsgi_temp_path ${temp("uwsgi")};
  scgi_temp_path ${temp("scgi")};
  upstream turnpike {
    # max_fails=0: a node that refused a connection while restarting is tried again on the next request.
${ports.map((port) => `    server 127.0.0.1:${port} max_fails=0;`).join("\n")}
  }
  server {
    listen 127.0.0.1:${listen};
    location / {
      proxy_pass http://turnpike;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_buffering off;
      proxy_read_timeout 300s;
      proxy_next_upstream error timeout http_503 non_idempotent;
    }
  }
}
`;
}

type Outcome = { requestId: string; ok: boolean; error?: string };

describe("a rolling restart of two nodes behind nginx", () => {
  let databaseUrl: string;
  let dropSchema: (() => Promise<void>) | undefined;
  let nginx: ChildProcess | undefined;
  const nodes: ServeProcess[] = [];
  const directory = temporaryDirectory();

  before(async () => {
    ({ url: databaseUrl, drop: dropSchema } = await freshPostgresSchema());
  });
  after(async () => {
    for (const node of nodes) if (node.child.exitCode === null && node.child.signalCode === null) await node.stop("SIGKILL");
    if (nginx !== undefined && nginx.exitCode === null) {
      nginx.kill("SIGTERM");
      await once(nginx, "exit");
    }
    await dropSchema?.();
    fs.rmSync(directory, { recursive: true, force: true });
  });

  it("fails no request, bills each exactly once, and leaves nothing held", async (t) => {
    const configFile = path.join(directory, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [{ id: "story", path: storiesModel, pricing }],
        plans: [{ id: "funded", name: "Funded", price: { amount: 100, currency: "usd" }, credit: CREDIT }],
      }),
    );
    const ports = [await freePort(), await freePort()];
    const start = async (node: number) => {
      const serve = await startServeProcess([
        "--port",
        String(ports[node]),
        "--config",
        configFile,
        "--data-dir",
        temporaryDirectory(),
        "--database-url",
        databaseUrl,
        "--drain-delay",
        "1",
        "--shutdown-timeout",
        "120",
      ]);
      nodes.push(serve);
      while ((await fetch(`${serve.url}/ready`).catch(() => undefined))?.status !== 200) await delay(50);
      return serve;
    };
    const running = [await start(0), await start(1)];

    const nginxDirectory = path.join(directory, "nginx");
    fs.mkdirSync(nginxDirectory, { mode: 0o755 });
    fs.chmodSync(directory, 0o755);
    const listen = await freePort();
    fs.writeFileSync(path.join(nginxDirectory, "nginx.conf"), nginxConfig(nginxDirectory, listen, ports));
    nginx = spawn(NGINX, ["-p", nginxDirectory, "-c", path.join(nginxDirectory, "nginx.conf"), "-e", path.join(nginxDirectory, "error.log"), "-g", "daemon off;"], {
      stdio: ["ignore", "inherit", "inherit"],
    });
    let health: Response | undefined;
    while ((health = await fetch(`http://127.0.0.1:${listen}/health`).catch(() => undefined)) === undefined) {
      assert.equal(nginx.exitCode, null, `nginx exited: ${fs.existsSync(path.join(nginxDirectory, "error.log")) ? fs.readFileSync(path.join(nginxDirectory, "error.log"), "utf8") : ""}`);
      await delay(50);
    }
    assert.equal(health.status, 200, await health.text());

    const database = await openStore({ dataDir: temporaryDirectory(), databaseUrl });
    try {
      const { accountId, key } = await meteredKey(database, "funded");
      const outcomes: Outcome[] = [];
      let loading = true;
      let sequence = 0;
      const client = async (index: number) => {
        const openai = new OpenAI({ baseURL: `http://127.0.0.1:${listen}/v1`, apiKey: key, maxRetries: 0, timeout: 120_000 });
        while (loading) {
          const requestId = `rolling_${index}_${sequence++}`;
          const body = { model: "story", messages: [{ role: "user" as const, content: `Once upon a time ${requestId}` }], max_tokens: 24 };
          try {
            let usage: OpenAI.CompletionUsage | undefined;
            if (index === 0) usage = (await openai.chat.completions.create(body, { headers: { "x-request-id": requestId } })).usage;
            else {
              const stream = await openai.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } }, { headers: { "x-request-id": requestId } });
              for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
            }
            outcomes.push(usage === undefined ? { requestId, ok: false, error: "no usage reported" } : { requestId, ok: true });
          } catch (error) {
            outcomes.push({ requestId, ok: false, error: String(error) });
          }
        }
      };
      const load = Promise.all(Array.from({ length: CLIENTS }, (_, index) => client(index)));
      /** Waits for `count` more answers (or the first failure, which fails the test below). */
      const progress = async (count: number) => {
        const target = outcomes.length + count;
        while (outcomes.length < target && outcomes.every((outcome) => outcome.ok)) await delay(20);
      };

      await progress(20);
      for (const node of [0, 1]) {
        const stopped = running[node]!.stop("SIGTERM");
        // Load goes on while the node drains, stops and is away.
        assert.equal(await stopped, 0, running[node]!.stderr());
        await progress(10);
        running[node] = await start(node);
        await progress(20);
      }
      loading = false;
      await load;

      const failed = outcomes.filter((outcome) => !outcome.ok);
      assert.deepEqual(failed, [], "no request failed");
      // 503s of /v1 requests: refusals of a stopping node, or of a new one still loading its model; nginx retried each on the other node.
      const retried = nodes.reduce((sum, node) => sum + (node.stdout().match(/"url":"\/v1\/[^"]*","status":503/g)?.length ?? 0), 0);
      t.diagnostic(`${outcomes.length} requests through nginx; ${retried} answered 503 by a node and retried by nginx on the other`);

      for (const node of running) assert.equal(await node.stop("SIGTERM"), 0, node.stderr());
      const served = outcomes.map((outcome) => outcome.requestId).sort();
      const records = await database.selectFrom("usage_records").select("request_id").where("account_id", "=", accountId).execute();
      assert.deepEqual(records.map((record) => record.request_id).sort(), served, "each request billed once, under its own id");
      await billedExactly(database, accountId, CREDIT, pricing, served.length);
      await assertBooksBalanced(database, [accountId]);
    } finally {
      await database.destroy();
    }
  });
});
