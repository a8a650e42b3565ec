/**
 * What each model serves, in the console in a real browser (Debian's chromium): on a server with
 * a chat model (stories260K), an embedding model (its mean-pooled variant, `serves: ["embeddings"]`)
 * and a completions-only model, the playground offers the chat model alone; Models and
 * Admin › Models show each model's services as badges matching its `/v1/models` `endpoints`, an
 * embedding model's one price and, when the server sends it, its vector length; a server with
 * no chat model shows the playground's empty state. Screenshots go to test-output/console/services-*.png.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { type Browser, type BrowserContext, type Page } from "playwright-core";
import { buildConsole } from "../console/build.ts";
import { repoRoot, startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { ConsoleClient } from "./helpers/console.ts";
import { embeddingModelPath } from "./helpers/test-models.ts";
import { launchChromium, signInThroughForm, skipWithoutChromium } from "./helpers/browser.ts";

const screenshots = path.join(repoRoot, "test-output", "console");
const password = "correct horse battery";
const admin = "admin@example.com";
const pricing = { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 };
const embeddingPricing = { prompt: 20_000, cached_prompt: 0, completion: 0 };

/** A server with `models` (config entries) and an admin who signed up. */
async function serverWith(models: Array<Record<string, unknown>>): Promise<TestServer> {
  const configFile = path.join(temporaryDirectory(), "turnpike.json");
  fs.writeFileSync(configFile, JSON.stringify({ models }));
  const server = await startTestServer({ configFile, flags: { models: undefined } });
  assert.equal((await new ConsoleClient(server.url).signUpAdmin(server, admin, password)).status, 201);
  return server;
}

let test: TestServer;
let browser: Browser;
const contexts: BrowserContext[] = [];
const pageErrors: string[] = [];

async function newPage(server: TestServer): Promise<Page> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, baseURL: server.url });
  contexts.push(context);
  const page = await context.newPage();
  page.on("pageerror", (error) => pageErrors.push(`${error.message}\n${error.stack ?? ""}`));
  return page;
}

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: path.join(screenshots, `services-${name}.png`), fullPage: true });
}

/** The service badges shown for `modelId` (the list named "<id> serves"), in order. */
async function badgesOf(page: Page, modelId: string): Promise<string[]> {
  const items = page.getByRole("list", { name: `${modelId} serves` }).getByRole("listitem");
  await items.first().waitFor();
  return (await items.allInnerTexts()).map((text) => text.trim());
}

describe("what each model serves, in the console", { skip: skipWithoutChromium() }, () => {
  before(async () => {
    await buildConsole({ quiet: true });
    fs.mkdirSync(screenshots, { recursive: true });
    test = await serverWith([
      { id: "stories260K", path: storiesModel, pricing },
      { id: "story-embedding", path: embeddingModelPath(), serves: ["embeddings"], pricing: embeddingPricing },
      { id: "story-completions", path: storiesModel, serves: ["completions"], pricing },
      { id: "story-embedding-priced", path: embeddingModelPath(), embeddings: { matryoshka: [32, 16] }, pricing: { ...embeddingPricing, embeddings: 10_000 } },
    ]);
    browser = await launchChromium();
  });
  after(async () => {
    for (const context of contexts) await context.close();
    await browser?.close();
    await test?.close();
  });

  it("offers in the playground only the model served at its endpoints, not the embedding or completions-only model", async () => {
    const listed = await test.client.models.list();
    const endpoints = new Map(listed.data.map((model) => [model.id, (model as unknown as { endpoints: string[] }).endpoints]));
    assert.deepEqual(endpoints.get("story-embedding"), ["/v1/embeddings"], "the server lists the embedding model at /v1/embeddings only");
    assert.deepEqual(endpoints.get("story-completions"), ["/v1/completions"]);
    assert.ok(endpoints.get("stories260K")!.includes("/v1/chat/completions"));

    const page = await newPage(test);
    await signInThroughForm(page, admin, password);
    const options = page.getByLabel("Model").locator("option");
    assert.deepEqual(await options.evaluateAll((all) => all.map((option) => (option as HTMLOptionElement).value)), ["stories260K"]);
    assert.equal(await page.getByLabel("Model").inputValue(), "stories260K", "the chat model is chosen");
    assert.equal(await page.getByRole("radio", { name: "Responses" }).count(), 1, "stories260K is served at /v1/responses too");
    await shot(page, "playground");
  });

  it("shows on Models what each model serves, as badges from its endpoints, and an embedding model's one price", async () => {
    const page = await newPage(test);
    await signInThroughForm(page, admin, password);
    await page.getByRole("link", { name: "Models" }).click();
    await page.getByRole("heading", { name: "Models" }).waitFor();
    assert.deepEqual(await badgesOf(page, "stories260K"), ["Chat", "Completions"]);
    assert.deepEqual(await badgesOf(page, "story-embedding"), ["Embeddings"]);
    assert.deepEqual(await badgesOf(page, "story-completions"), ["Completions"]);
    const chat = page.getByRole("list", { name: "stories260K serves" }).locator('[data-service="chat"]');
    assert.equal(await chat.getAttribute("title"), "/v1/chat/completions, /v1/responses, /v1/messages", "the badge names its endpoints");

    const embeddingCard = page.getByRole("article", { name: "story-embedding", exact: true });
    assert.equal(await embeddingCard.getByTestId("price-embeddings").innerText(), "20,000 credits / 1M tokens", "an embedding's input at the prompt price");
    assert.equal(await embeddingCard.getByTestId("price-completion").count(), 0, "no completion price for a model that completes nothing");
    assert.equal(await embeddingCard.getByTestId("vector-length").innerText(), "64 dimensions", "the loaded GGUF's vector length, with no shorter one on offer");
    const chatCard = page.getByRole("article", { name: "stories260K", exact: true });
    assert.equal(await chatCard.getByTestId("price-completion").innerText(), "2,000,000 credits / 1M tokens");
    assert.equal(await chatCard.getByTestId("price-embeddings").count(), 0);
    await shot(page, "models");
  });

  it("shows an embedding model's vector length and its own embedding price where the server sends them", async () => {
    const page = await newPage(test);
    await signInThroughForm(page, admin, password);
    await page.goto("/models");
    // Detected from the GGUF's pooling (no `serves`), with Matryoshka lengths and its own embedding price in its entry.
    const embeddingCard = page.getByRole("article", { name: "story-embedding-priced", exact: true });
    assert.equal(await embeddingCard.getByTestId("vector-length").innerText(), "64 dimensions (or 32, 16)");
    assert.equal(await embeddingCard.getByTestId("price-embeddings").innerText(), "10,000 credits / 1M tokens");
    await shot(page, "models-embeddings");

    await page.goto("/admin/models");
    const row = page.getByRole("row").filter({ hasText: "story-embedding-priced" });
    await row.waitFor();
    assert.match(await row.innerText(), /Vectors: 64 dimensions \(or 32, 16\)/);
    assert.match(await row.innerText(), /10,000 per embedding input/);
  });

  it("shows on Admin › Models what each model serves", async () => {
    const page = await newPage(test);
    await signInThroughForm(page, admin, password);
    await page.goto("/admin/models");
    await page.getByRole("tab", { name: "Models" }).waitFor();
    assert.deepEqual(await badgesOf(page, "stories260K"), ["Chat", "Completions"]);
    assert.deepEqual(await badgesOf(page, "story-embedding"), ["Embeddings"]);
    assert.deepEqual(await badgesOf(page, "story-completions"), ["Completions"]);
    const embeddingRow = page.getByRole("row").filter({ hasText: "story-embedding", hasNotText: "story-embedding-priced" });
    assert.match(await embeddingRow.innerText(), /20,000 per embedding input/);
    assert.match(await embeddingRow.innerText(), /Vectors: 64 dimensions\n/);
    await shot(page, "admin-models");
  });

  it("says so in the playground when no model serves chat", async () => {
    const embeddingsOnly = await serverWith([{ id: "story-embedding", path: embeddingModelPath(), serves: ["embeddings"] }]);
    try {
      const page = await newPage(embeddingsOnly);
      await signInThroughForm(page, admin, password);
      await page.getByText("No chat models").waitFor();
      assert.match(await page.locator(".state.empty").innerText(), /\/v1\/chat\/completions or \/v1\/responses/);
      assert.equal(await page.getByLabel("Model").count(), 0, "no model to choose");
      assert.equal(await page.getByLabel("Message").count(), 0, "nothing to send");
      await shot(page, "playground-empty");
      await page.getByRole("link", { name: "See what each model serves" }).click();
      assert.deepEqual(await badgesOf(page, "story-embedding"), ["Embeddings"]);
    } finally {
      await embeddingsOnly.close();
    }
  });

  it("had no uncaught errors in any page", () => {
    assert.deepEqual(pageErrors, []);
  });
});
