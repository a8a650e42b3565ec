/**
 * The console's API reference page in a real browser (Debian's chromium via playwright-core, as
 * in console-browser.test.ts): rendered from /openapi.json, grouped by tag, with each route's
 * request fields, answer fields and error codes, and readable at phone width. Screenshots go to
 * test-output/console/.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { type Browser, type BrowserContext, type Page } from "playwright-core";
import { buildConsole } from "../console/build.ts";
import { repoRoot, startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { setupCodeOf, writeConsoleConfig } from "./helpers/console.ts";
import { launchChromium, signInThroughForm, skipWithoutChromium } from "./helpers/browser.ts";

const screenshots = path.join(repoRoot, "test-output", "console");
const password = "a long enough password";

describe("the console's API reference", { skip: skipWithoutChromium() }, () => {
  let test: TestServer;
  let browser: Browser;
  const contexts: BrowserContext[] = [];
  const pageErrors: string[] = [];

  async function newPage(viewport: { width: number; height: number }, colorScheme: "light" | "dark" = "light"): Promise<Page> {
    const context = await browser.newContext({ viewport, baseURL: test.url, colorScheme });
    contexts.push(context);
    const page = await context.newPage();
    page.on("pageerror", (error) => pageErrors.push(`${error.message}\n${error.stack ?? ""}`));
    return page;
  }

  before(async () => {
    await buildConsole({ quiet: true });
    fs.mkdirSync(screenshots, { recursive: true });
    test = await startTestServer({ configFile: writeConsoleConfig(temporaryDirectory()), flags: { models: undefined } });
    browser = await launchChromium();
  });
  after(async () => {
    for (const context of contexts) await context.close();
    await browser?.close();
    await test?.close();
  });

  it("shows every route grouped by tag, with its request fields, its answer's fields and error codes", async () => {
    const page = await newPage({ width: 1280, height: 860 });
    await page.goto("/signup");
    await page.getByLabel("Email address").fill("admin@example.com");
    await page.getByLabel("Password").fill(password);
    await page.getByLabel("Setup code").fill(setupCodeOf(test));
    await page.getByRole("button", { name: "Create account" }).click();
    await page.getByRole("heading", { name: "API Keys" }).waitFor();

    await page.getByRole("link", { name: "API reference" }).click();
    await page.getByRole("heading", { name: "API reference", level: 1 }).waitFor();
    for (const tag of ["Chat", "Models", "Auth", "Keys", "Usage", "Billing", "Admin"]) await page.getByRole("heading", { name: tag, exact: true, level: 2 }).waitFor();

    const chat = page.getByRole("article", { name: "POST /v1/chat/completions" });
    await chat.getByText("Create a chat completion").waitFor();
    await chat.getByRole("region", { name: "Request body" }).getByText("messages", { exact: true }).waitFor();
    const responses = chat.getByRole("region", { name: "Responses" });
    for (const code of ["invalid_api_key", "insufficient_quota", "rate_limit_exceeded", "context_length_exceeded"]) await responses.getByText(code, { exact: true }).waitFor();
    await chat.getByRole("button", { name: "Show example" }).click();
    await chat.getByText('"stream_options"', { exact: false }).waitFor();

    // The answer's fields, followed through the document's $refs: the completion's usage, each chunk's, a list's items'.
    const answer = chat.getByRole("region", { name: "Response body" });
    await answer.getByText("usage", { exact: true }).waitFor();
    await answer.getByText("CompletionUsage", { exact: true }).waitFor();
    await answer.getByText("prompt_tokens", { exact: true }).waitFor();
    await chat.getByRole("region", { name: /^Stream event/ }).getByText("delta", { exact: true }).waitFor();
    const history = page.getByRole("article", { name: "GET /api/billing/history" }).getByRole("region", { name: "Response body" });
    await history.getByText("balance_after", { exact: true }).waitFor();
    await history.getByText("has_more", { exact: true }).waitFor();
    await page.getByRole("article", { name: "GET /ready" }).getByText("503", { exact: true }).waitFor();
    await page.getByRole("article", { name: "GET /api/billing/history" }).screenshot({ path: path.join(screenshots, "23-api-reference-response-fields.png") });

    const createKey = page.getByRole("article", { name: "POST /api/keys" });
    await createKey.getByRole("region", { name: "Request body" }).getByText("spend_cap", { exact: true }).waitFor();
    await createKey.getByRole("region", { name: "Response body" }).getByText("key", { exact: true }).waitFor();
    await createKey.getByText("key_looser_than_parent", { exact: true }).waitFor();
    const usage = page.getByRole("article", { name: "GET /api/usage/requests" });
    await usage.getByRole("region", { name: "Parameters" }).getByText("after", { exact: true }).waitFor();

    const documented = await page.evaluate(async () => {
      const document = (await (await fetch("/openapi.json")).json()) as { paths: Record<string, Record<string, unknown>> };
      return Object.values(document.paths).reduce((count, item) => count + Object.keys(item).length, 0);
    });
    assert.equal(await page.locator("article.api-operation").count(), documented, "one card per operation");
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: path.join(screenshots, "19-api-reference.png") });
  });

  it("is readable at 390 px wide: nothing wider than the screen", async () => {
    const phone = await newPage({ width: 390, height: 844 }, "dark");
    await signInThroughForm(phone, "admin@example.com", password);
    await phone.getByRole("button", { name: "Menu" }).click();
    await phone.getByRole("link", { name: "API reference" }).click();
    await phone.getByRole("heading", { name: "API reference", level: 1 }).waitFor();
    await phone.getByRole("article", { name: "POST /api/admin/accounts/{id}/grant" }).getByRole("button", { name: "Show example" }).click();
    const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert.ok(overflow <= 0, `the page is ${overflow} px wider than the screen`);
    await phone.getByRole("article", { name: "POST /v1/chat/completions" }).screenshot({ path: path.join(screenshots, "20-phone-api-reference-dark.png") });
  });

  it("had no uncaught errors", () => {
    assert.deepEqual(pageErrors, []);
  });
});
