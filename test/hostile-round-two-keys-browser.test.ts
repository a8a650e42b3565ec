/**
 * Issue 19, row 11 in a real browser (Debian's chromium driven by playwright-core): the API Keys
 * page and Admin › Keys show the newest 50 keys and load the rest with "Load more"; revoking a
 * key from the second page keeps every loaded key in view. Screenshot in test-output/console/.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Browser, Page } from "playwright-core";
import type { Kysely } from "kysely";
import { buildConsole } from "../console/build.ts";
import { requireAccountByEmail } from "../src/accounts/accounts.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { setupCodeOf, writeConsoleConfig } from "./helpers/console.ts";
import { repoRoot, startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { launchChromium, skipWithoutChromium } from "./helpers/browser.ts";

const screenshots = path.join(repoRoot, "test-output", "console");
/** More than one page (50) of keys. */
const KEYS = 57;

describe("paged key lists in the console", { skip: skipWithoutChromium() }, () => {
  let test: TestServer;
  let database: Kysely<Database>;
  let browser: Browser;
  let page: Page;
  const pageErrors: string[] = [];

  before(async () => {
    await buildConsole({ quiet: true });
    fs.mkdirSync(screenshots, { recursive: true });
    test = await startTestServer({ configFile: writeConsoleConfig(temporaryDirectory()), flags: { models: undefined } });
    database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
    browser = await launchChromium();
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, baseURL: test.url });
    page = await context.newPage();
    page.on("pageerror", (error) => pageErrors.push(`${error.message}\n${error.stack ?? ""}`));
    await page.goto("/signup");
    await page.getByLabel("Email address").fill("pages@example.com");
    await page.getByLabel("Password").fill("a long enough password");
    await page.getByLabel("Setup code").fill(setupCodeOf(test));
    await page.getByRole("button", { name: "Create account" }).click();
    await page.getByRole("heading", { name: "API Keys" }).waitFor();
    const account = await requireAccountByEmail(database, "pages@example.com");
    const start = Date.now() - KEYS * 1000;
    // One a second apart, so the order is known: key 56 is the newest.
    for (let index = 0; index < KEYS; index++) await createApiKey(database, { accountId: account.id, name: `key ${index}`, now: start + index * 1000 });
  });

  after(async () => {
    await browser?.close();
    await database?.destroy();
    await test?.close();
    assert.deepEqual(pageErrors, [], "no uncaught errors in the console");
  });

  const rows = () => page.locator("tr[data-key-id]");

  it("shows the newest 50 keys on API Keys, and the rest after Load more", async () => {
    await page.goto("/keys");
    await rows().first().waitFor();
    assert.equal(await rows().count(), 50);
    assert.match((await rows().first().textContent()) ?? "", /key 56/);
    await page.getByRole("button", { name: "Load more" }).click();
    await page.getByRole("button", { name: "Load more" }).waitFor({ state: "detached" });
    assert.equal(await rows().count(), KEYS);
    assert.match((await rows().last().textContent()) ?? "", /key 0/);

    // Revoking the oldest (on the second page) keeps every key in view.
    await page.getByRole("button", { name: "Revoke key 0" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Revoke key" }).click();
    await rows().last().getByText("Revoked").waitFor();
    assert.equal(await rows().count(), KEYS);
    await page.screenshot({ path: path.join(screenshots, "30-keys-paged.png"), fullPage: true });
  });

  it("pages Admin › Keys the same way, every account's keys", async () => {
    await page.goto("/admin/keys");
    await rows().first().waitFor();
    assert.equal(await rows().count(), 50);
    await page.getByRole("button", { name: "Load more" }).click();
    await page.getByRole("button", { name: "Load more" }).waitFor({ state: "detached" });
    // The account's keys and the test server's operator key.
    assert.equal(await rows().count(), KEYS + 1);
    await rows().filter({ hasText: "operator" }).waitFor();
  });
});
