/**
 * The web console in a real browser (Debian's chromium driven by playwright-core): sign up,
 * Create Key, copy it, call the API with the openai SDK, see the call in Usage, the key gone
 * once the dialog closes, another account seeing none of it, an admin granting a plan, and the
 * playground streaming an answer. Screenshots of each page go to test-output/console/.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import { type Browser, type BrowserContext, type Page } from "playwright-core";
import { buildConsole } from "../console/build.ts";
import { repoRoot, startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { setupCodeOf, writeConsoleConfig } from "./helpers/console.ts";
import { launchChromium, signInThroughForm, skipWithoutChromium } from "./helpers/browser.ts";

const screenshots = path.join(repoRoot, "test-output", "console");
const password = "a long enough password";

let test: TestServer;
let browser: Browser;
const contexts: BrowserContext[] = [];
/** Uncaught errors in the console's pages: there must be none. */
const pageErrors: string[] = [];

async function newPage(viewport = { width: 1280, height: 860 }, colorScheme: "light" | "dark" = "light"): Promise<Page> {
  const context = await browser.newContext({ viewport, baseURL: test.url, colorScheme });
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: test.url });
  contexts.push(context);
  const page = await context.newPage();
  page.on("pageerror", (error) => pageErrors.push(`${error.message}\n${error.stack ?? ""}`));
  return page;
}

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: path.join(screenshots, `${name}.png`), fullPage: true });
}

async function signUp(page: Page, email: string, setupCode?: string): Promise<void> {
  await page.goto("/signup");
  await page.getByLabel("Email address").fill(email);
  await page.getByLabel("Password").fill(password);
  if (setupCode !== undefined) await page.getByLabel("Setup code").fill(setupCode);
  await page.getByRole("button", { name: "Create account" }).click();
  await page.getByRole("heading", { name: "API Keys" }).waitFor();
}

describe("the web console in a browser", { skip: skipWithoutChromium() }, () => {
  let admin: Page;
  let user: Page;
  let key = "";
  let completion: OpenAI.Chat.Completions.ChatCompletion;

  before(async () => {
    await buildConsole({ quiet: true });
    fs.mkdirSync(screenshots, { recursive: true });
    test = await startTestServer({ configFile: writeConsoleConfig(temporaryDirectory()), flags: { models: undefined } });
    browser = await launchChromium();
    admin = await newPage();
    user = await newPage();
  });
  after(async () => {
    for (const context of contexts) await context.close();
    await browser?.close();
    await test?.close();
  });

  it("signs up: the account made with the setup code is the admin, the next a user", async () => {
    await admin.goto("/");
    await admin.getByRole("heading", { name: "Welcome back" }).waitFor();
    await shot(admin, "01-sign-in");
    await admin.getByRole("link", { name: "Create an account" }).click();
    await admin.getByRole("heading", { name: "Create your account" }).waitFor();
    await admin.getByLabel("Setup code").waitFor();
    await shot(admin, "02-sign-up");
    await signUp(admin, "admin@example.com", setupCodeOf(test));
    await admin.getByRole("link", { name: "Admin" }).waitFor();

    await user.goto("/signup");
    await user.getByRole("heading", { name: "Create your account" }).waitFor();
    await user.waitForLoadState("networkidle");
    assert.equal(await user.getByLabel("Setup code").count(), 0, "no setup code once an admin exists");
    await signUp(user, "user@example.com");
    await user.getByText("No API keys yet").waitFor();
    assert.equal(await user.getByRole("link", { name: "Admin" }).count(), 0, "users have no Admin page");
    await shot(user, "03-keys-empty");
  });

  it("creates a key, shows it once with a copy button, and forgets it when the dialog closes", async () => {
    await user.getByRole("button", { name: "+ Create Key" }).first().click();
    const dialog = user.getByRole("dialog", { name: "Create Key" });
    await dialog.getByLabel("Name").fill("laptop");
    await dialog.getByLabel("Expiration").selectOption("30");
    await dialog.getByLabel("Only these models").check();
    await dialog.getByLabel("stories260K").check();
    await dialog.getByLabel("Spend cap (optional)").fill("100000");
    await shot(user, "04-create-key");
    await dialog.getByRole("button", { name: "Create secret key" }).click();

    const saved = user.getByRole("dialog", { name: "Save your key" });
    await saved.getByText("you won't be able to view it again").waitFor();
    key = await saved.getByLabel('Secret key "laptop"').inputValue();
    assert.match(key, /^tp-[A-Za-z0-9_-]{43}$/);
    await saved.getByRole("button", { name: "Copy" }).click();
    await saved.getByRole("button", { name: "Copied" }).waitFor();
    assert.equal(await user.evaluate(() => navigator.clipboard.readText()), key);
    await shot(user, "05-key-created");
    await saved.getByRole("button", { name: "Done" }).click();
    await saved.waitFor({ state: "detached" });

    const row = user.getByRole("row").filter({ hasText: "laptop" });
    await row.waitFor();
    assert.match(await row.innerText(), /stories260K/);
    assert.match(await row.innerText(), /Active/);
    assert.ok(!(await user.content()).includes(key), "the key is nowhere on the page after the dialog closed");
    await user.reload();
    await row.waitFor();
    assert.ok(!(await user.content()).includes(key), "nor after a reload");
    await shot(user, "06-keys");
  });

  it("lets the admin grant a plan, and the user's balance shows it", async () => {
    await user.getByRole("link", { name: "Billing" }).click();
    await user.getByTestId("balance").getByText("0 credits").waitFor();
    await user.getByRole("heading", { name: "Starter" }).waitFor();

    await admin.getByRole("link", { name: "Admin" }).click();
    const row = admin.getByRole("row").filter({ hasText: "user@example.com" });
    await row.getByRole("button", { name: "Grant a plan to user@example.com" }).click();
    const dialog = admin.getByRole("dialog", { name: "Grant a plan to user@example.com" });
    await dialog.getByLabel("Plan").selectOption("starter");
    await dialog.getByRole("button", { name: "Grant plan" }).click();
    await dialog.waitFor({ state: "detached" });
    await row.getByText("5,000").waitFor();
    await row.getByText("Starter").waitFor();
    await shot(admin, "07-admin-accounts");

    await user.reload();
    await user.getByTestId("balance").getByText("5,000 credits").waitFor();
    await user.getByTestId("plan").getByText("Starter").waitFor();
    await user.getByRole("button", { name: "Buy Pro" }).click();
    await user.getByText("Online payments are not configured on this server").waitFor();
    await shot(user, "08-billing");
  });

  it("shows a call made with the copied key in Usage, with its tokens", async () => {
    const client = new OpenAI({ baseURL: test.baseURL, apiKey: key, maxRetries: 0 });
    completion = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 7, temperature: 0 });
    const usage = completion.usage!;
    assert.equal(usage.completion_tokens, 7);

    await user.getByRole("link", { name: "Usage" }).click();
    const row = user.getByRole("row").filter({ hasText: "laptop" }).filter({ hasText: "stories260K" });
    await row.first().waitFor();
    assert.equal(await row.count(), 1);
    assert.equal((await row.locator('[data-column="prompt_tokens"]').innerText()).trim(), String(usage.prompt_tokens));
    assert.equal((await row.locator('[data-column="completion_tokens"]').innerText()).trim(), "7");
    const cost = usage.prompt_tokens * 1 + 7 * 2;
    assert.equal((await row.locator('[data-column="cost"]').innerText()).trim(), String(cost));
    await user.getByTestId("usage-requests").getByText("1", { exact: true }).waitFor();
    await user.getByTestId("usage-tokens").getByText(String(usage.prompt_tokens + 7), { exact: true }).waitFor();
    await shot(user, "09-usage");

    // The admin sees nothing of it as their own usage, and all of it when choosing the account.
    await admin.getByRole("link", { name: "Usage" }).click();
    await admin.getByTestId("usage-requests").getByText("0", { exact: true }).waitFor();
    await admin.getByLabel("Account").selectOption({ label: "user@example.com" });
    const adminRow = admin.getByRole("row").filter({ hasText: "laptop" }).filter({ hasText: "stories260K" });
    await adminRow.first().waitFor();
    assert.equal((await adminRow.locator('[data-column="cost"]').innerText()).trim(), String(cost));
    await admin.getByTestId("usage-requests").getByText("1", { exact: true }).waitFor();
    await shot(admin, "09-usage-admin");
    await admin.getByRole("link", { name: "Admin" }).click();
  });

  it("never shows one account's keys to another (UI and API)", async () => {
    const other = await newPage();
    await signUp(other, "other@example.com");
    await other.getByText("No API keys yet").waitFor();
    const listed = await other.evaluate(async () => (await fetch("/api/keys")).text());
    assert.ok(!listed.includes("laptop"));
    const ownKeys = await user.evaluate(async () => (await fetch("/api/keys")).json());
    const keyId = (ownKeys as { data: Array<{ id: string; name: string }> }).data.find((entry) => entry.name === "laptop")!.id;
    assert.ok(!listed.includes(keyId));
    const usage = await other.evaluate(async () => (await fetch("/api/usage/requests?limit=50")).text());
    assert.ok(!usage.includes(completion.id) && !usage.includes("laptop"), "nor its usage");
    const account = await other.evaluate(async () => (await fetch("/api/account")).json());
    assert.equal((account as { balance: number }).balance, 0);
  });

  it("streams an answer in the playground, with usage and cost", async () => {
    await user.getByRole("link", { name: "Playground" }).click();
    await user.getByLabel("Model").selectOption("stories260K");
    await user.getByLabel("Maximum tokens").fill("12");
    await user.getByLabel("Message").fill("Tell me a story");
    await user.getByRole("button", { name: "Send" }).click();
    const answer = user.getByTestId("assistant-message");
    await user.getByTestId("playground-usage").waitFor();
    assert.ok((await answer.innerText()).replace(/^Assistant\s*/, "").trim().length > 0, "the answer has text");
    assert.match(await user.getByTestId("playground-usage").innerText(), /12 completion tokens · \d+ credits/);
    await shot(user, "10-playground");
    await user.getByRole("button", { name: "View code" }).click();
    const code = user.getByRole("dialog", { name: "View code" });
    await code.getByText("curl", { exact: false }).first().waitFor();
    assert.match(await code.locator("pre").innerText(), /Authorization: Bearer \$TURNPIKE_KEY/);
    await code.getByRole("tab", { name: "Node.js (openai)" }).click();
    assert.match(await code.locator("pre").innerText(), /new OpenAI/);
    await shot(user, "11-playground-code");
    await user.keyboard.press("Escape");
    await code.waitFor({ state: "detached" });
  });

  it("lists the models with their prices and status", async () => {
    await user.getByRole("link", { name: "Models" }).click();
    await user.getByRole("heading", { name: "stories260K" }).waitFor();
    await user.getByText("Ready").first().waitFor();
    await user.getByText("1,000,000 credits / 1M tokens").first().waitFor();
    await shot(user, "12-models");
  });

  it("revokes a key after confirmation", async () => {
    await user.getByRole("link", { name: "API Keys" }).click();
    const row = user.getByRole("row").filter({ hasText: "laptop" });
    await row.getByText("Account", { exact: true }).waitFor();
    // The playground's temporary key is inference-only.
    await user.getByRole("row").filter({ hasText: "Playground (temporary)" }).getByText("Inference", { exact: true }).waitFor();
    await row.getByRole("button", { name: "Revoke laptop" }).click();
    const dialog = user.getByRole("dialog", { name: "Revoke secret key" });
    await shot(user, "13-revoke");
    await dialog.getByRole("button", { name: "Revoke key" }).click();
    await row.getByText("Revoked").waitFor();
    const client = new OpenAI({ baseURL: test.baseURL, apiKey: key, maxRetries: 0 });
    await assert.rejects(client.models.list(), (error: unknown) => error instanceof OpenAI.AuthenticationError);
  });

  it("shows the admin sections", async () => {
    for (const section of ["Plans", "Codes", "Keys", "Models"]) {
      await admin.getByRole("tab", { name: section }).click();
      await admin.locator(".tab-panel").waitFor();
      await admin.waitForFunction(() => document.querySelector(".tab-panel [role=status]") === null);
      await shot(admin, `14-admin-${section.toLowerCase()}`);
    }
    await admin.getByRole("tab", { name: "Keys" }).click();
    await admin.getByRole("row").filter({ hasText: "user@example.com" }).first().waitFor();
  });

  it("lets the admin create a plan and a code that the user redeems", async () => {
    await admin.getByRole("tab", { name: "Plans" }).click();
    await admin.getByRole("button", { name: "+ Create plan" }).click();
    const dialog = admin.getByRole("dialog", { name: "Create plan" });
    await dialog.getByLabel("Id").fill("team");
    await dialog.getByLabel("Name").fill("Team");
    await dialog.getByLabel("Price (minor units, e.g. cents)").fill("9900");
    await dialog.getByLabel("Credit granted").fill("100000");
    await dialog.getByLabel("Days the credit lasts").fill("90");
    await dialog.getByLabel("Share weight").fill("2");
    await dialog.getByLabel("Allow the flex tier").check();
    await dialog.getByLabel("Service tier flex").fill("0.5");
    await dialog.getByRole("button", { name: "Save plan" }).click();
    await dialog.waitFor({ state: "detached" });
    await admin.getByRole("heading", { name: "Team" }).waitFor();
    await admin.getByText("$99.00").waitFor();
    await admin.getByText("Service tiers: default ×1, flex ×0.5").waitFor();
    await admin.getByText("Share weight 2").waitFor();

    await admin.getByRole("tab", { name: "Codes" }).click();
    await admin.getByLabel("Plan").selectOption("team");
    await admin.getByRole("button", { name: "Create codes" }).click();
    const codes = admin.getByRole("dialog", { name: "Save these codes" });
    const code = (await codes.locator("pre").innerText()).trim();
    assert.match(code, /^TP-[0-9A-Z-]+$/);
    await shot(admin, "16-admin-codes-created");
    await codes.getByRole("button", { name: "Close" }).click();
    await codes.waitFor({ state: "detached" });
    await admin.getByRole("row").filter({ hasText: "team" }).getByText("Unused").waitFor();

    await user.getByRole("link", { name: "Billing" }).click();
    const before = Number((await user.getByTestId("balance").innerText()).replace(/\D/g, ""));
    await user.getByLabel("Redemption code").fill(code.toLowerCase());
    await user.getByRole("button", { name: "Redeem" }).click();
    await user.getByText("Code redeemed: Team").waitFor();
    await user.getByTestId("balance").getByText(`${(before + 100_000).toLocaleString("en-US")} credits`).waitFor();
    await user.getByTestId("plan").getByText("Team").waitFor();
    await user.getByLabel("Redemption code").fill(code);
    await user.getByRole("button", { name: "Redeem" }).click();
    await user.getByRole("alert").filter({ hasText: /redeemed/i }).waitFor();
    await shot(user, "17-billing-redeemed");
  });

  it("works at phone width (in dark mode) and signs out", async () => {
    const phone = await newPage({ width: 390, height: 844 }, "dark");
    await signInThroughForm(phone, "user@example.com", password);
    await phone.getByRole("button", { name: "Menu" }).click();
    await phone.getByRole("link", { name: "API Keys" }).click();
    await phone.getByRole("heading", { name: "API Keys" }).waitFor();
    await shot(phone, "15-phone-keys");
    await phone.getByRole("button", { name: "Menu" }).click();
    await phone.getByRole("link", { name: "Usage" }).click();
    await phone.getByRole("heading", { name: "Recent requests" }).waitFor();
    await phone.getByRole("row").filter({ hasText: "laptop" }).first().waitFor();
    await shot(phone, "18-phone-usage-dark");
    await phone.getByRole("button", { name: "Menu" }).click();
    await phone.getByRole("button", { name: "Sign out" }).click();
    await phone.getByRole("heading", { name: "Welcome back" }).waitFor();
    const session = await phone.evaluate(async () => (await fetch("/api/auth/session")).status);
    assert.equal(session, 401);
  });

  it("had no uncaught errors in any page", () => {
    assert.deepEqual(pageErrors, []);
  });
});
