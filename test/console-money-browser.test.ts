/**
 * Prices in money in a real browser (Debian's chromium driven by playwright-core): with a
 * `credit_value` set, the Models page shows each price per million tokens in money beside its
 * credits, and the Usage page shows costs in money, its Cost charts included (axis and tooltip
 * in the currency). Screenshots go to test-output/console/.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { type Browser, type Page } from "playwright-core";
import { buildConsole } from "../console/build.ts";
import { requireAccountByEmail } from "../src/accounts/accounts.ts";
import { recordUsage } from "../src/billing/usage.ts";
import { openStore } from "../src/store/open.ts";
import { setupCodeOf } from "./helpers/console.ts";
import { repoRoot, startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { launchChromium, skipWithoutChromium } from "./helpers/browser.ts";

const screenshots = path.join(repoRoot, "test-output", "console");

describe("prices in money in the console", { skip: skipWithoutChromium() }, () => {
  let test: TestServer;
  let browser: Browser;
  let page: Page;
  const pageErrors: string[] = [];
  const configDirectory = temporaryDirectory("turnpike-money-console-");

  before(async () => {
    await buildConsole({ quiet: true });
    fs.mkdirSync(screenshots, { recursive: true });
    const configFile = path.join(configDirectory, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        // 1,000,000 credits cost 0.50 USD.
        credit_value: "usd:0.5",
        models: [{ id: "stories260K", path: storiesModel, pricing: { prompt: 1_000_000, cached_prompt: 300, completion: 2_000_000 } }],
      }),
    );
    test = await startTestServer({ configFile });
    browser = await launchChromium();
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, baseURL: test.url });
    page = await context.newPage();
    page.on("pageerror", (error) => pageErrors.push(`${error.message}\n${error.stack ?? ""}`));
    await page.goto("/signup");
    await page.getByLabel("Email address").fill("money@example.com");
    await page.getByLabel("Password").fill("a long enough password");
    await page.getByLabel("Setup code").fill(setupCodeOf(test));
    await page.getByRole("button", { name: "Create account" }).click();
    await page.getByRole("heading", { name: "API Keys" }).waitFor();
  });

  after(async () => {
    await browser?.close();
    await test?.close();
    fs.rmSync(configDirectory, { recursive: true, force: true });
    assert.deepEqual(pageErrors, [], "no uncaught errors in the console");
  });

  it("shows each price per million tokens in money, with its credits beside it", async () => {
    await page.getByRole("link", { name: "Models" }).click();
    await page.getByRole("heading", { name: "stories260K" }).waitFor();
    const price = async (name: string) => {
      const cell = page.getByTestId(`price-${name}`);
      return [(await cell.locator('[data-price="money"]').innerText()).trim(), (await cell.locator('[data-price="credits"]').innerText()).trim()];
    };
    assert.deepEqual(await price("prompt"), ["$0.50 / 1M tokens", "1,000,000 credits"]);
    assert.deepEqual(await price("completion"), ["$1.00 / 1M tokens", "2,000,000 credits"]);
    // 300 credits at 0.50 USD per million: 0.00015 USD, never rounded to $0.00.
    assert.deepEqual(await price("cached_prompt"), ["$0.00015 / 1M tokens", "300 credits"]);
    await page.screenshot({ path: path.join(screenshots, "20-models-money.png"), fullPage: true });
  });

  it("shows usage costs and the total spent in money", async () => {
    const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
    try {
      const account = await requireAccountByEmail(database, "money@example.com");
      await recordUsage(database, {
        request_id: "req_console_money",
        account_id: account.id,
        key_id: null,
        model: "stories260K",
        prompt_tokens: 12,
        cached_prompt_tokens: 0,
        completion_tokens: 7,
        cost: 26,
        latency_ms: 40,
        status: 200,
        finish_reason: "length",
        stream: 0,
        created_at: Date.now() - 1000,
      });
    } finally {
      await database.destroy();
    }
    await page.getByRole("link", { name: "Usage" }).click();
    const row = page.locator('tr[data-request-id="req_console_money"]');
    await row.waitFor();
    // 26 credits at 0.50 USD per million: 0.000013 USD.
    assert.equal((await row.locator('[data-column="cost"]').innerText()).trim(), "$0.000013");
    await page.getByTestId("usage-cost").getByText("$0.000013 (26 credits)").waitFor();
    await page.screenshot({ path: path.join(screenshots, "21-usage-money.png"), fullPage: true });
  });

  it("plots the Cost charts in money: the axis in the currency, the tooltip the exact cost", async () => {
    const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
    try {
      const account = await requireAccountByEmail(database, "money@example.com");
      // 5,000,000 credits at 0.50 USD per million: 2.50 USD, beside the 26 credits above.
      await recordUsage(database, {
        request_id: "req_console_money_large",
        account_id: account.id,
        key_id: null,
        model: "stories260K",
        prompt_tokens: 3000,
        cached_prompt_tokens: 0,
        completion_tokens: 1000,
        cost: 5_000_000,
        latency_ms: 900,
        status: 200,
        finish_reason: "stop",
        stream: 0,
        created_at: Date.now() - 500,
      });
    } finally {
      await database.destroy();
    }
    await page.reload();
    await page.locator('tr[data-request-id="req_console_money_large"]').waitFor();
    await page.getByRole("tab", { name: "Cost" }).click();
    const perDay = page.getByRole("img", { name: "Cost per day" });
    await perDay.locator(".recharts-bar-rectangle").first().waitFor();
    const ticks = (await perDay.locator(".recharts-yAxis-tick-labels .recharts-cartesian-axis-tick-value").allTextContents()).map((text) => text.trim());
    assert.ok(ticks.length >= 2 && ticks.every((tick) => tick.startsWith("$")), `money ticks: ${ticks.join(" ")}`);
    assert.ok(ticks.some((tick) => /^\$[12](\.\d+)?$/.test(tick)), `ticks up to the $2.50 spent: ${ticks.join(" ")}`);
    const modelTicks = (await page.getByRole("img", { name: "Cost per model" }).locator(".recharts-xAxis-tick-labels .recharts-cartesian-axis-tick-value").allTextContents()).map((text) => text.trim());
    assert.ok(modelTicks.length >= 2 && modelTicks.every((tick) => tick.startsWith("$")), `money ticks per model: ${modelTicks.join(" ")}`);
    await perDay.locator(".recharts-bar-rectangle").first().hover();
    const tooltip = perDay.locator(".recharts-tooltip-wrapper");
    await tooltip.getByText("Cost (USD)").waitFor();
    // 5,000,026 credits: 2.500013 USD, as the table formats it.
    assert.match(await tooltip.innerText(), /Cost \(USD\)\s*:\s*\$2\.50/);
    assert.doesNotMatch(await tooltip.innerText(), /Credits/);
    await page.screenshot({ path: path.join(screenshots, "22-usage-cost-chart-money.png"), fullPage: true });
  });
});
