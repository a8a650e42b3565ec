/**
 * The playground over the Responses API, in a real browser (Debian's chromium): the toggle
 * switches it to `/v1/responses` and is remembered across a reload; an answer on stories260K
 * streams in with its usage and cost (the server's own formula, equal to what was billed); View
 * code shows the Responses call; a 400 (max_output_tokens below 16), a refusal for want of
 * credit and a failure inside the stream (`error` then `response.failed`) show in place of the
 * answer. Screenshots go to test-output/console/responses-*.png.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { type Browser, type BrowserContext, type Page } from "playwright-core";
import { buildConsole } from "../console/build.ts";
import { FakeEngine } from "../src/engines/fake/fake-engine.ts";
import { costOf } from "../src/protocol/price.ts";
import { openStore } from "../src/store/open.ts";
import { grantCredit } from "../src/billing/ledger.ts";
import { repoRoot, startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { ConsoleClient } from "./helpers/console.ts";
import { launchChromium, signInThroughForm, skipWithoutChromium } from "./helpers/browser.ts";

const screenshots = path.join(repoRoot, "test-output", "console");
const password = "correct horse battery";
const funded = "funded@example.com";
const pricing = { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 };
/** What the fake model streams before it fails. */
const partial = "Once upon a";

let test: TestServer;
let browser: Browser;
const contexts: BrowserContext[] = [];
const pageErrors: string[] = [];

async function newPage(viewport = { width: 1280, height: 860 }): Promise<Page> {
  const context = await browser.newContext({ viewport, baseURL: test.url });
  contexts.push(context);
  const page = await context.newPage();
  page.on("pageerror", (error) => pageErrors.push(`${error.message}\n${error.stack ?? ""}`));
  return page;
}

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: path.join(screenshots, `responses-${name}.png`), fullPage: true });
}

/** The bodies the page posts to `/v1/responses`, and their answers' text once they end. */
function recordResponsesCalls(page: Page): { bodies: Array<Record<string, any>>; answers: Array<Promise<string>> } {
  const calls = { bodies: [] as Array<Record<string, any>>, answers: [] as Array<Promise<string>> };
  page.on("request", (request) => {
    if (request.url().endsWith("/v1/responses") && request.method() === "POST") calls.bodies.push(JSON.parse(request.postData()!));
  });
  page.on("response", (response) => {
    if (response.url().endsWith("/v1/responses")) calls.answers.push(response.text());
  });
  return calls;
}

/** The `data:` payloads of an SSE body, parsed (`[DONE]` left out), with each block's `event:` name. */
function eventsOf(sse: string): Array<{ event: string | undefined; data: Record<string, any> }> {
  return sse
    .split("\n\n")
    .filter((block) => block.includes("data: ") && !block.includes("data: [DONE]"))
    .map((block) => {
      const lines = block.split("\n");
      return { event: lines.find((line) => line.startsWith("event: "))?.slice(7), data: JSON.parse(lines.find((line) => line.startsWith("data: "))!.slice(6)) };
    });
}

describe("the playground over the Responses API", { skip: skipWithoutChromium() }, () => {
  before(async () => {
    await buildConsole({ quiet: true });
    fs.mkdirSync(screenshots, { recursive: true });
    const directory = temporaryDirectory();
    const configFile = path.join(directory, "turnpike.json");
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        models: [
          { id: "stories260K", path: storiesModel, pricing },
          // Served by the fake engine below (its file is never opened): it fails after some text.
          { id: "breaks-midway", path: path.join(directory, "breaks-midway.gguf"), pricing },
        ],
        plans: [{ id: "starter", name: "Starter", price: { amount: 500, currency: "usd" }, credit: 5000, days: 30, rpm: 600, tpm: 1000000 }],
      }),
    );
    const breaking = new FakeEngine({ script: () => [{ steps: [{ text: "Once" }, { text: " upon" }, { text: " a" }, { fail: new Error("the fake model broke down") }] }] });
    test = await startTestServer({ configFile, flags: { models: undefined }, engines: { "breaks-midway": breaking } });
    assert.equal((await new ConsoleClient(test.url).signUpAdmin(test, "admin@example.com", password)).status, 201);
    const user = new ConsoleClient(test.url);
    assert.equal((await user.signUp(funded, password)).status, 201);
    assert.equal((await new ConsoleClient(test.url).signUp("zero@example.com", password)).status, 201);
    const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
    try {
      await grantCredit(database, { accountId: (await user.get("/api/account")).body.id, amount: 1_000_000, source: "admin:responses-test" });
    } finally {
      await database.destroy();
    }
    browser = await launchChromium();
  });
  after(async () => {
    for (const context of contexts) await context.close();
    await browser?.close();
    await test?.close();
  });

  it("streams an answer from /v1/responses with its usage and the cost that was billed, and remembers the choice across a reload", async () => {
    const page = await newPage();
    await signInThroughForm(page, funded, password);
    const calls = recordResponsesCalls(page);
    await page.getByLabel("Model").selectOption("stories260K");
    const chat = page.getByRole("radio", { name: "Chat Completions" });
    const responses = page.getByRole("radio", { name: "Responses" });
    assert.equal(await chat.isChecked(), true, "Chat Completions is the default");
    await responses.check();
    await page.getByText("store: false").waitFor();
    await page.getByLabel("Maximum tokens").fill("16");
    await page.getByLabel("Message").fill("Tell me a story");
    await page.getByRole("button", { name: "Send" }).click();
    const usageLine = page.getByTestId("playground-usage");
    await usageLine.waitFor();
    await shot(page, "playground");

    assert.equal(calls.bodies.length, 1);
    const body = calls.bodies[0]!;
    assert.equal(body.model, "stories260K");
    assert.equal(body.instructions, "You are a helpful assistant.");
    assert.deepEqual(body.input, [{ role: "user", content: "Tell me a story" }]);
    assert.equal(body.max_output_tokens, 16);
    assert.equal(body.stream, true);
    assert.equal(body.store, false, "a playground response is not stored");
    assert.equal(body.messages, undefined);

    // The answer shown is the text the server streamed, and the usage line its terminal event's usage.
    const events = eventsOf(await calls.answers[0]!);
    assert.ok(events.every((event) => event.event === event.data.type), "every event is named");
    const streamed = events.filter((event) => event.data.type === "response.output_text.delta").map((event) => event.data.delta as string);
    assert.ok(streamed.length > 1, "the text came in several deltas");
    const terminal = events.at(-1)!.data;
    assert.match(terminal.type, /^response\.(completed|incomplete)$/);
    const answer = (await page.getByTestId("assistant-message").locator(".message-content").innerText()).trim();
    assert.ok(answer.length > 0);
    assert.equal(answer, streamed.join("").trim());
    const usage = terminal.response.usage as { input_tokens: number; output_tokens: number; input_tokens_details: { cached_tokens: number } };
    const cost = costOf({ prompt: pricing.prompt, cachedPrompt: pricing.cached_prompt, completion: pricing.completion }, { promptTokens: usage.input_tokens, cachedPromptTokens: usage.input_tokens_details.cached_tokens, completionTokens: usage.output_tokens });
    const status = terminal.response.status === "incomplete" ? "incomplete \\(max_output_tokens\\)" : "completed";
    assert.match(await usageLine.innerText(), new RegExp(`^${usage.input_tokens} input .*\\+ ${usage.output_tokens} output tokens · ${cost.toLocaleString("en-US")} credits · status: ${status}$`));

    // What was billed is what the playground showed (its usage record is written in the group commit after the stream's end).
    await test.server.usageWritten();
    const recorded = (await page.evaluate(async () => (await fetch("/api/usage/requests?limit=1")).json())) as { data: Array<{ prompt_tokens: number; completion_tokens: number; cost: number; stream: boolean }> };
    assert.deepEqual(
      { prompt: recorded.data[0]!.prompt_tokens, completion: recorded.data[0]!.completion_tokens, cost: recorded.data[0]!.cost, stream: recorded.data[0]!.stream },
      { prompt: usage.input_tokens, completion: usage.output_tokens, cost, stream: true },
    );

    // The next message carries the conversation as items.
    await page.getByLabel("Message").fill("And then?");
    await page.getByRole("button", { name: "Send" }).click();
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="assistant-message"]').length === 2 && !document.querySelector('[data-state="streaming"]'));
    assert.deepEqual(calls.bodies[1]!.input, [
      { role: "user", content: "Tell me a story" },
      // The text as the model wrote it (the page shows it trimmed; a story may end in a space or a newline).
      { role: "assistant", content: streamed.join("") },
      { role: "user", content: "And then?" },
    ]);

    await page.reload();
    await page.getByRole("heading", { name: "Playground" }).waitFor();
    assert.equal(await page.getByRole("radio", { name: "Responses" }).isChecked(), true, "the choice survives a reload");
    assert.equal(await page.evaluate(() => window.localStorage.getItem("turnpike.playground-dialect")), "responses");
    await page.locator(".summary-detail").getByText("Responses").waitFor();
  });

  it("shows the Responses call in View code: curl, client.responses.create and .stream, and the exact body sent", async () => {
    const page = await newPage();
    await signInThroughForm(page, funded, password);
    const calls = recordResponsesCalls(page);
    await page.getByRole("radio", { name: "Responses" }).check();
    await page.getByLabel("Maximum tokens").fill("20");
    await page.getByLabel("Message").fill("Once upon a time");
    await page.getByRole("button", { name: "View code" }).click();
    const dialog = page.getByRole("dialog", { name: "View code" });
    const code = dialog.locator("pre");
    const curl = await code.innerText();
    assert.match(curl, new RegExp(`^curl ${test.url.replace(/[.]/g, "\\.")}/v1/responses \\\\`));
    assert.match(curl, /"store": false/);
    assert.match(curl, /"max_output_tokens": 20/);
    assert.doesNotMatch(curl, /"stream"/, "the samples are not streamed");
    await dialog.getByRole("tab", { name: "Node.js (openai)" }).click();
    const node = await code.innerText();
    assert.match(node, /await client\.responses\.create\(\{/);
    assert.match(node, /client\.responses\.stream\(/);
    assert.match(node, /response\.output_text/);
    assert.doesNotMatch(node, /chat\.completions/);
    await shot(page, "code-node");
    await dialog.getByRole("tab", { name: "Python (openai)" }).click();
    assert.match(await code.innerText(), /client\.responses\.create\(\*\*\{[\s\S]*"store": False/);
    await dialog.getByRole("tab", { name: "Request body" }).click();
    await dialog.getByText("Exactly the body the next Send posts to").getByText("/v1/responses").waitFor();
    const shown = JSON.parse(await code.innerText());
    await page.keyboard.press("Escape");
    await dialog.waitFor({ state: "detached" });
    await page.getByRole("button", { name: "Send" }).click();
    await page.getByTestId("playground-usage").waitFor();
    assert.deepEqual(calls.bodies[0], shown, "View code showed exactly the body sent");

    // Back to chat: View code shows the chat call again.
    await page.getByRole("radio", { name: "Chat Completions" }).check();
    await page.getByRole("button", { name: "View code" }).click();
    assert.match(await dialog.locator("pre").innerText(), /\/v1\/chat\/completions/);
    await page.keyboard.press("Escape");
  });

  it("shows a 400, a refusal for want of credit and a failure inside the stream in place of the answer", async () => {
    const page = await newPage();
    await signInThroughForm(page, funded, password);
    await page.getByRole("radio", { name: "Responses" }).check();
    await page.getByLabel("Model").selectOption("stories260K");
    await page.getByLabel("Maximum tokens").fill("15");
    await page.getByLabel("Message").fill("Too short an answer");
    await page.getByRole("button", { name: "Send" }).click();
    const failed = page.getByTestId("failed-message");
    await failed.waitFor();
    assert.match(await failed.innerText(), /max_output_tokens/);
    assert.equal(await page.getByTestId("assistant-message").count(), 0, "no Assistant bubble");
    await shot(page, "failed-400");

    // A failure after some text: the text stays (muted), the error says what happened, the turn is left out.
    await page.getByLabel("Model").selectOption("breaks-midway");
    await page.getByLabel("Maximum tokens").fill("64");
    await page.getByLabel("Message").fill("Tell me a story");
    await page.getByRole("button", { name: "Send" }).click();
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="failed-message"]').length === 2);
    const midway = await failed.nth(1).innerText();
    assert.ok(midway.includes(partial), `the partial text is shown: ${midway}`);
    assert.equal(await page.getByTestId("playground-usage").count(), 0, "no usage line for a failed response");
    await shot(page, "failed-midway");

    const zero = await newPage();
    await signInThroughForm(zero, "zero@example.com", password);
    await zero.getByRole("radio", { name: "Responses" }).check();
    await zero.getByLabel("Message").fill("Hello there");
    await zero.getByRole("button", { name: "Send" }).click();
    await zero.getByTestId("failed-message").waitFor();
    assert.match(await zero.getByTestId("failed-message").innerText(), /quota/i);
  });

  it("had no uncaught errors in any page", () => {
    assert.deepEqual(pageErrors, []);
  });
});
