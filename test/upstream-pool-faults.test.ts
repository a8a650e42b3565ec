/**
 * A pool of two real upstream servers (Turnpike nodes in child processes, stories260K in-process
 * each) behind a Turnpike node: one member is killed (SIGKILL) in the middle of a load, and every
 * request not yet answered is served by the other with no error the client can see; the killed
 * member is restarted on its port and the pool takes it back by itself.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { cliPath, nodeBinary, repoRoot, startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { startServeProcess, type ServeProcess } from "./helpers/process.ts";

type Status = { state: string; members_healthy: number; members_total: number };

/** Waits until a member's model is loaded (`/ready` answers 200). */
async function ready(url: string): Promise<void> {
  for (let attempt = 0; attempt < 300; attempt++) {
    const response = await fetch(`${url}/ready`).catch(() => undefined);
    if (response?.status === 200) return;
    await delay(100);
  }
  throw new Error(`${url} never became ready`);
}

describe("an upstream pool when a member dies under load", () => {
  const directories: string[] = [];
  let members: ServeProcess[] = [];
  let ports: number[] = [];
  let gateway: TestServer;
  const memberArgs = (dataDir: string, port: number) => ["--model", `story=${storiesModel}`, "--data-dir", dataDir, "--parallel", "2", "--port", String(port)];

  before(async () => {
    // Both members share one operator key: the second's data dir is a copy of the first's.
    const first = temporaryDirectory("turnpike-member-");
    const created = JSON.parse(execFileSync(nodeBinary, [cliPath, "keys", "create", "--name", "gateway", "--data-dir", first, "--json"], { cwd: repoRoot, encoding: "utf8" })) as { key: string };
    const second = temporaryDirectory("turnpike-member-");
    fs.cpSync(first, second, { recursive: true });
    directories.push(first, second);
    // Pushed one by one: a member that started is stopped by `after` even when the next fails to start.
    for (const directory of [first, second]) members.push(await startServeProcess(memberArgs(directory, 0)));
    await Promise.all(members.map((member) => ready(member.url)));
    ports = members.map((member) => Number(new URL(member.url).port));
    const configDir = temporaryDirectory("turnpike-pool-");
    directories.push(configDir);
    const configFile = path.join(configDir, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [
          {
            id: "story",
            upstream: { kind: "openai", urls: members.map((member) => `${member.url}/v1`), api_key_env: "TURNPIKE_TEST_POOL_KEY", max_in_flight: 2, health_interval: 0.5, connect_timeout: 2 },
          },
        ],
      }),
    );
    gateway = await startTestServer({ configFile, env: { TURNPIKE_TEST_POOL_KEY: created.key } });
  });

  after(async () => {
    await gateway?.close();
    await Promise.all(members.map((member) => member.stop("SIGKILL").catch(() => {})));
    for (const directory of directories) fs.rmSync(directory, { recursive: true, force: true });
  });

  async function status(): Promise<Status> {
    const response = await fetch(`${gateway.baseURL}/models/story`, { headers: { authorization: `Bearer ${gateway.key}` } });
    return ((await response.json()) as { status: Status }).status;
  }

  it("serves every request of a load through the surviving member when the other is killed mid-way, and takes it back once restarted", async () => {
    assert.deepEqual(await status(), { state: "ready", members_healthy: 2, members_total: 2 });
    // Long answers (the end-of-text token banned) keep requests in flight on both members when one dies.
    const request = () =>
      gateway.client.chat.completions.create({
        model: "story",
        messages: [{ role: "user", content: "Once upon a time" }],
        max_tokens: 400,
        logit_bias: { "2": -100 },
      });
    const load = Array.from({ length: 10 }, () => request());
    await delay(150);
    await members[0]!.stop("SIGKILL");
    const results = await Promise.allSettled(load);
    const failures = results.filter((result) => result.status === "rejected");
    assert.deepEqual(failures.map((failure) => String((failure as PromiseRejectedResult).reason)), [], "no client saw an error");
    for (const result of results) assert.equal((result as PromiseFulfilledResult<{ usage?: { completion_tokens: number } }>).value.usage?.completion_tokens, 400);

    // The pool noticed: one member of two.
    let seen = await status();
    for (let attempt = 0; attempt < 40 && seen.members_healthy !== 1; attempt++) {
      await delay(100);
      seen = await status();
    }
    assert.deepEqual(seen, { state: "degraded", members_healthy: 1, members_total: 2 });
    const survivor = await request();
    assert.equal(survivor.usage?.completion_tokens, 400);

    // Restarted on its port, it comes back by itself.
    members[0] = await startServeProcess(memberArgs(directories[0]!, ports[0]!));
    await ready(members[0].url);
    for (let attempt = 0; attempt < 100 && seen.members_healthy !== 2; attempt++) {
      await delay(100);
      seen = await status();
    }
    assert.deepEqual(seen, { state: "ready", members_healthy: 2, members_total: 2 });
  });
});
