/**
 * Admin › Models shows each model's queue on this node, in a real browser (Debian's chromium): on
 * the fake engine with one slot held by a gate and two requests waiting (one `priority`, one
 * `default`), the model's row shows the slot in use, the waiting per tier and the oldest wait, and
 * refreshes by itself once the queue drains. Screenshot: test-output/console/queues-admin-models.png.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Browser } from "playwright-core";
import { buildConsole } from "../console/build.ts";
import { FakeEngine, FakeGate } from "../src/engines/fake/fake-engine.ts";
import { until } from "./helpers/fair-load.ts";
import { launchChromium, signInThroughForm, skipWithoutChromium } from "./helpers/browser.ts";
import { ConsoleClient } from "./helpers/console.ts";
import { postJson, repoRoot, startTestServer, type TestServer } from "./helpers/server.ts";

const screenshots = path.join(repoRoot, "test-output", "console");
const admin = "admin@example.com";
const password = "correct horse battery";

describe("Admin › Models shows each model's queue", { skip: skipWithoutChromium() }, () => {
  let test: TestServer;
  let browser: Browser;
  const gate = new FakeGate();
  const engine = new FakeEngine({ capacity: 1, queueSize: 8, script: () => [{ steps: [{ gate }, { text: "Hello" }] }] });

  before(async () => {
    await buildConsole({ quiet: true });
    fs.mkdirSync(screenshots, { recursive: true });
    test = await startTestServer({ engines: { fake: engine } });
    assert.equal((await new ConsoleClient(test.url).signUpAdmin(test, admin, password)).status, 201);
    browser = await launchChromium();
  });
  after(async () => {
    gate.release();
    await browser?.close();
    await test?.close();
  });

  it("shows the slot in use, the waiting per tier and the oldest wait, and refreshes when it drains", async () => {
    const chat = (extra: Record<string, unknown> = {}) =>
      postJson(`${test.baseURL}/chat/completions`, { model: "fake", messages: [{ role: "user", content: "Hi" }], max_tokens: 4, ...extra }, { authorization: `Bearer ${test.key}` });
    const requests = [chat()];
    await until(() => engine.running === 1, 5_000, "one running");
    requests.push(chat(), chat({ service_tier: "priority" }));
    await until(() => engine.members()[0]!.waiting === 2, 5_000, "two waiting");

    const context = await browser.newContext({ viewport: { width: 1400, height: 800 }, baseURL: test.url });
    const page = await context.newPage();
    const errors: string[] = [];
    page.on("pageerror", (error) => errors.push(error.message));
    await signInThroughForm(page, admin, password);
    await page.goto("/admin/models");
    const cell = page.getByTestId("queue-fake");
    await cell.getByText("1 / 1 running · 2 waiting").waitFor();
    assert.match(await cell.innerText(), /priority 1 · default 1 · oldest \d+(\.\d)? s/);
    assert.equal(await cell.getByRole("meter").getAttribute("aria-valuenow"), "1");
    await page.screenshot({ path: path.join(screenshots, "queues-admin-models.png"), fullPage: true });

    gate.release();
    for (const response of await Promise.all(requests)) assert.equal(response.status, 200);
    // Refreshed by itself (every two seconds), no reload.
    await cell.getByText("0 / 1 running · none waiting").waitFor({ timeout: 10_000 });
    assert.deepEqual(errors, []);
    await context.close();
  });
});
