/**
 * The console at 1280 px and at phone width (390 px), light and dark, in a real browser: tables
 * fit (no clipped cell) at 1280 and turn into cards with every field at 390; the playground
 * keeps a failed call out of the next request and View code shows exactly what is sent; the chat
 * comes first on a phone; the low-balance banner; billing history; Export CSV; the chart legend's
 * contrast and a single day's bar; stat cards and tabs on a phone; the theme menu, applied before
 * the app loads. Screenshots go to test-output/console/responsive-*.png.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import { type Browser, type BrowserContext, type Page } from "playwright-core";
import { buildConsole } from "../console/build.ts";
import { openStore } from "../src/store/open.ts";
import { grantCredit } from "../src/billing/ledger.ts";
import { repoRoot, startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { ConsoleClient, writeConsoleConfig } from "./helpers/console.ts";
import { launchChromium, signInThroughForm, skipWithoutChromium } from "./helpers/browser.ts";

const screenshots = path.join(repoRoot, "test-output", "console");
const password = "correct horse battery";
const DESKTOP = { width: 1280, height: 860 };
const PHONE = { width: 390, height: 844 };

let test: TestServer;
let browser: Browser;
const contexts: BrowserContext[] = [];
const pageErrors: string[] = [];

async function newPage(viewport = DESKTOP, colorScheme: "light" | "dark" = "light"): Promise<Page> {
  const context = await browser.newContext({ viewport, baseURL: test.url, colorScheme, acceptDownloads: true });
  contexts.push(context);
  const page = await context.newPage();
  page.on("pageerror", (error) => pageErrors.push(`${error.message}\n${error.stack ?? ""}`));
  return page;
}

async function signIn(page: Page, email: string): Promise<void> {
  await signInThroughForm(page, email, password);
}

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: path.join(screenshots, `responsive-${name}.png`), fullPage: true });
}

/** Goes to a page through the navigation (the menu first on a phone). */
async function open(page: Page, link: string, heading = link): Promise<void> {
  const menu = page.getByRole("button", { name: "Menu" });
  if (await menu.isVisible()) await menu.click();
  await page.getByRole("link", { name: link, exact: true }).click();
  await page.getByRole("heading", { name: heading, exact: true }).first().waitFor();
}

/** Every table on the page fits its container, and no cell's content is cut. */
async function assertTablesFit(page: Page, what: string): Promise<void> {
  const problems = await page.evaluate(() => {
    const found: string[] = [];
    for (const table of document.querySelectorAll<HTMLTableElement>("table")) {
      const wrap = table.parentElement!;
      if (table.scrollWidth > wrap.clientWidth + 1) found.push(`${table.getAttribute("aria-label")}: ${table.scrollWidth} > ${wrap.clientWidth}`);
      if (wrap.scrollWidth > wrap.clientWidth + 1) found.push(`${table.getAttribute("aria-label")} scrolls sideways`);
      for (const cell of table.querySelectorAll<HTMLElement>("td, th")) {
        if (cell.scrollWidth > cell.clientWidth + 1) found.push(`${table.getAttribute("aria-label")} cell "${cell.innerText.slice(0, 30)}" clipped`);
        const box = cell.getBoundingClientRect();
        if (box.right > window.innerWidth + 1) found.push(`${table.getAttribute("aria-label")} cell "${cell.innerText.slice(0, 30)}" off screen`);
      }
    }
    return { found, tables: document.querySelectorAll("table").length };
  });
  assert.ok(problems.tables > 0, `${what}: a table is on the page`);
  assert.deepEqual(problems.found, [], what);
}

/** At phone width every table is cards: each row a block, each field visible with its label, on screen. */
async function assertCards(page: Page, label: string, fields: string[]): Promise<void> {
  const table = page.getByRole("table", { name: label });
  await table.waitFor();
  const report = await table.evaluate((element) => {
    const rows = [...element.querySelectorAll<HTMLTableRowElement>("tbody tr")];
    return {
      headerHidden: element.querySelector("thead")!.getBoundingClientRect().height <= 1,
      rows: rows.map((row) => ({
        display: getComputedStyle(row).display,
        cells: [...row.querySelectorAll<HTMLElement>("td")].map((cell) => {
          const box = cell.getBoundingClientRect();
          return { label: cell.dataset.label ?? "", before: getComputedStyle(cell, "::before").content, visible: box.width > 0 && box.height > 0, onScreen: box.left >= 0 && box.right <= window.innerWidth + 1, clipped: cell.scrollWidth > cell.clientWidth + 1 };
        }),
      })),
    };
  });
  assert.ok(report.headerHidden, `${label}: the header row is hidden`);
  assert.ok(report.rows.length > 0, `${label}: has rows`);
  for (const row of report.rows) {
    assert.equal(row.display, "block", `${label}: a row is a card`);
    for (const field of fields) {
      const cell = row.cells.find((candidate) => candidate.label === field);
      assert.ok(cell, `${label}: the card has ${field}`);
      assert.equal(cell.before, `"${field}"`, `${label}: ${field} is labelled`);
    }
    assert.ok(row.cells.every((cell) => cell.visible && cell.onScreen && !cell.clipped), `${label}: every field is on screen, none clipped`);
  }
}

/** WCAG contrast of two CSS colours (rgb()/rgba()). */
function contrast(foreground: string, background: string): number {
  const channels = (color: string) => color.match(/[\d.]+/g)!.slice(0, 3).map(Number);
  const luminance = (color: string) => {
    const [red, green, blue] = channels(color).map((value) => {
      const channel = value / 255;
      return channel <= 0.03928 ? channel / 12.92 : ((channel + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * red! + 0.7152 * green! + 0.0722 * blue!;
  };
  const [light, dark] = [luminance(foreground), luminance(background)].sort((a, b) => b - a);
  return (light! + 0.05) / (dark! + 0.05);
}

/** The legend texts' colours and the background they sit on. */
async function legendColours(page: Page): Promise<Array<{ text: string; color: string; background: string }>> {
  await page.locator(".chart-legend-text").first().waitFor();
  return page.evaluate(() =>
    [...document.querySelectorAll<HTMLElement>(".chart-legend-text")].map((element) => {
      let node: HTMLElement | null = element;
      let background = "rgba(0, 0, 0, 0)";
      while (node !== null) {
        const color = getComputedStyle(node).backgroundColor;
        if (color !== "rgba(0, 0, 0, 0)" && color !== "transparent") {
          background = color;
          break;
        }
        node = node.parentElement;
      }
      return { text: element.innerText, color: getComputedStyle(element).color, background };
    }),
  );
}

describe("the console at 1280 px and 390 px", { skip: skipWithoutChromium() }, () => {
  before(async () => {
    await buildConsole({ quiet: true });
    fs.mkdirSync(screenshots, { recursive: true });
    test = await startTestServer({ configFile: writeConsoleConfig(temporaryDirectory()), flags: { models: undefined } });
    const admin = new ConsoleClient(test.url);
    assert.equal((await admin.signUpAdmin(test, "admin@example.com", password)).status, 201);
    const funded = new ConsoleClient(test.url);
    assert.equal((await funded.signUp("a.rather.long.address.for.a.funded.account@example.com", password)).status, 201);
    assert.equal((await new ConsoleClient(test.url).signUp("zero@example.com", password)).status, 201);
    const fundedId = (await funded.get("/api/account")).body.id;
    // Plenty: over what 100 typical requests cost (2,000 credits each at these prices).
    const database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
    try {
      await grantCredit(database, { accountId: fundedId, amount: 1_000_000, source: "admin:responsive-test" });
    } finally {
      await database.destroy();
    }
    assert.equal((await admin.post(`/api/admin/accounts/${fundedId}/grant`, { plan: "starter" })).status, 200);
    const names = ["production backend, EU region", 'build "ci" box', "laptop"];
    for (const name of names) {
      const created = await funded.post("/api/keys", { name, models: name === "laptop" ? ["stories260K"] : null, spend_cap: name === "laptop" ? 100_000 : null, expires_at: Math.floor(Date.now() / 1000) + 30 * 86400 });
      assert.equal(created.status, 201, created.text);
      const client = new OpenAI({ baseURL: test.baseURL, apiKey: created.body.key, maxRetries: 0 });
      await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 4 });
    }
    const codes = await admin.post("/api/admin/codes", { plan: "pro", count: 2 });
    assert.equal(codes.status, 201);
    assert.equal((await funded.post("/api/billing/redeem", { code: codes.body.data[0].code })).status, 200);
    browser = await launchChromium();
  });
  after(async () => {
    for (const context of contexts) await context.close();
    await browser?.close();
    await test?.close();
  });

  it("fits every table at 1280 px: no clipped cell, no sideways scroll", async () => {
    const page = await newPage();
    await signIn(page, "a.rather.long.address.for.a.funded.account@example.com");
    await open(page, "API Keys");
    await page.getByRole("row").filter({ hasText: "production backend" }).waitFor();
    await assertTablesFit(page, "API Keys");
    await shot(page, "1280-keys");
    await open(page, "Usage");
    await page.getByRole("table", { name: "Recent requests" }).waitFor();
    await assertTablesFit(page, "Usage");
    await shot(page, "1280-usage");
    await open(page, "Billing");
    await page.getByRole("table", { name: "Billing history" }).waitFor();
    await assertTablesFit(page, "Billing");
    await shot(page, "1280-billing");

    const admin = await newPage();
    await signIn(admin, "admin@example.com");
    await open(admin, "Admin");
    const tables: Record<string, string> = { Accounts: "Accounts", Keys: "API Keys", Codes: "Redemption codes", Models: "Models and their status" };
    for (const [section, table] of Object.entries(tables)) {
      await admin.getByRole("tab", { name: section }).click();
      await admin.getByRole("table", { name: table }).locator("tbody tr").first().waitFor();
      await assertTablesFit(admin, `Admin › ${section}`);
      await shot(admin, `1280-admin-${section.toLowerCase()}`);
      if (section === "Keys") {
        const revoke = admin.getByRole("button", { name: /^Revoke / }).first();
        assert.ok(await revoke.isVisible(), "Admin › Keys shows Revoke");
      }
    }
  });

  it("shows the balance after each entry in the billing history", async () => {
    const page = await newPage();
    await signIn(page, "a.rather.long.address.for.a.funded.account@example.com");
    await open(page, "Billing");
    const rows = page.getByRole("table", { name: "Billing history" }).locator("tbody tr");
    await rows.first().waitFor();
    const history = (await page.evaluate(async () => (await fetch("/api/billing/history?limit=100")).json())) as { data: Array<{ amount: number; balance_after: number }> };
    assert.equal(await rows.count(), history.data.length);
    const shown = await rows.evaluateAll((elements) => elements.map((row) => Number((row.querySelector<HTMLElement>('[data-column="balance_after"]')!.innerText).replace(/\D/g, ""))));
    assert.deepEqual(shown, history.data.map((entry) => entry.balance_after));
    const balance = Number((await page.getByTestId("balance").innerText()).replace(/\D/g, ""));
    assert.equal(shown[0], balance, "the newest entry's balance is the account's");
    await page.getByText("Redeemed a code: Pro").waitFor();
  });

  it("turns tables into cards with every field at 390 px (dark)", async () => {
    const page = await newPage(PHONE, "dark");
    await signIn(page, "a.rather.long.address.for.a.funded.account@example.com");
    await open(page, "API Keys");
    await assertCards(page, "API Keys", ["Name", "Access", "Created", "Last used", "Expires", "Models", "Spent", "Status"]);
    const revoke = page.getByRole("button", { name: "Revoke laptop" });
    await revoke.scrollIntoViewIfNeeded();
    const box = (await revoke.boundingBox())!;
    assert.ok(box.x >= 0 && box.x + box.width <= PHONE.width, "Revoke is on screen");
    await shot(page, "390-keys-dark");
    await open(page, "Usage");
    await assertCards(page, "Recent requests", ["Time", "Key", "Model", "Prompt", "Completion", "Credits", "Latency", "Status"]);
    await assertCards(page, "Usage per model", ["Model", "Requests", "Prompt tokens", "Cached", "Completion tokens", "Credits"]);
    await shot(page, "390-usage-dark");
    await open(page, "Billing");
    await assertCards(page, "Billing history", ["Time", "Type", "Description", "Credits", "Balance after"]);
    await shot(page, "390-billing-dark");

    const admin = await newPage(PHONE);
    await signIn(admin, "admin@example.com");
    await open(admin, "Admin");
    const tabs = await admin.getByRole("tab").evaluateAll((elements) => elements.map((tab) => tab.getBoundingClientRect()).map((box) => ({ left: box.left, right: box.right })));
    assert.equal(tabs.length, 5);
    assert.ok(tabs.every((tab) => tab.left >= 0 && tab.right <= PHONE.width), "every Admin tab is on screen");
    await assertCards(admin, "Accounts", ["Email", "Role", "Plan", "Balance", "Keys", "Created", "Status"]);
    await admin.getByRole("tab", { name: "Keys" }).click();
    await assertCards(admin, "API Keys", ["Name", "Owner", "Access", "Spent", "Status"]);
    await shot(admin, "390-admin-keys");
  });

  it("keeps a failed call out of the next request, shows its error, and View code shows the body sent", async () => {
    const page = await newPage();
    await signIn(page, "zero@example.com");
    const bodies: Array<{ messages: Array<{ role: string; content: string }> }> = [];
    page.on("request", (request) => {
      if (request.url().endsWith("/v1/chat/completions") && request.method() === "POST") bodies.push(JSON.parse(request.postData()!));
    });
    await page.getByLabel("Message").fill("Hello there");
    await page.getByRole("button", { name: "Send" }).click();
    const failed = page.getByTestId("failed-message");
    await failed.waitFor();
    assert.match(await failed.innerText(), /quota/i);
    assert.equal(await page.getByTestId("assistant-message").count(), 0, "no empty Assistant bubble");
    await shot(page, "1280-playground-failed");

    await page.getByLabel("Message").fill("Second try");
    await page.getByRole("button", { name: "View code" }).click();
    const dialog = page.getByRole("dialog", { name: "View code" });
    await dialog.getByRole("tab", { name: "Request body" }).click();
    const shownBody = JSON.parse(await dialog.locator("pre").innerText());
    await shot(page, "1280-playground-code");
    await page.keyboard.press("Escape");
    await dialog.waitFor({ state: "detached" });
    await page.getByRole("button", { name: "Send" }).click();
    await page.getByTestId("failed-message").nth(1).waitFor();
    assert.equal(bodies.length, 2);
    assert.deepEqual(bodies[1], shownBody, "View code showed exactly the body sent");
    assert.deepEqual(
      bodies[1]!.messages.map((message) => message.role),
      ["system", "user"],
      "neither the failed message nor an empty assistant turn is sent again",
    );
    assert.equal(bodies[1]!.messages[1]!.content, "Second try");

    // Retry sends the failed message again, alone.
    await page.getByRole("button", { name: "Retry" }).first().click();
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="failed-message"]').length === 2 && !document.querySelector('[data-state="streaming"]'));
    assert.equal(bodies.length, 3);
    assert.deepEqual(bodies[2]!.messages.map((message) => message.content), ["You are a helpful assistant.", "Hello there"]);
  });

  it("shows the balance banner to an account without credit, not to a funded one", async () => {
    const zero = await newPage(PHONE);
    await signIn(zero, "zero@example.com");
    const banner = zero.getByTestId("balance-banner");
    await banner.waitFor();
    assert.match(await banner.innerText(), /0 credits/);
    await shot(zero, "390-playground-banner");
    await open(zero, "API Keys");
    await banner.waitFor();
    await shot(zero, "390-keys-banner");
    await banner.getByRole("link", { name: "Redeem a code" }).click();
    await zero.getByRole("heading", { name: "Billing" }).waitFor();
    await zero.waitForFunction(() => document.activeElement?.id === "redeem-code");
    await zero.goto("/keys");
    await zero.getByTestId("balance-banner").getByRole("link", { name: "Buy a plan" }).click();
    await zero.getByRole("heading", { name: "Plans" }).waitFor();

    const funded = await newPage();
    await signIn(funded, "a.rather.long.address.for.a.funded.account@example.com");
    await funded.waitForLoadState("networkidle");
    assert.equal(await funded.getByTestId("balance-banner").count(), 0);
    await open(funded, "API Keys");
    await funded.getByRole("row").filter({ hasText: "laptop" }).waitFor();
    await funded.waitForLoadState("networkidle");
    assert.equal(await funded.getByTestId("balance-banner").count(), 0);
  });

  it("puts the chat first on a phone, the message box in the first screen, the settings folded", async () => {
    const page = await newPage(PHONE);
    await signIn(page, "a.rather.long.address.for.a.funded.account@example.com");
    const box = (await page.getByLabel("Message").boundingBox())!;
    assert.ok(box.y + box.height <= PHONE.height, `the message box ends at ${box.y + box.height}, within ${PHONE.height}`);
    const settings = page.locator("details.playground-settings");
    assert.equal(await settings.evaluate((element) => (element as HTMLDetailsElement).open), false);
    await shot(page, "390-playground");
    await settings.locator("summary").click();
    const keySelect = page.getByLabel("API key");
    await keySelect.waitFor();
    const fits = await keySelect.evaluate((select: HTMLSelectElement) => {
      const probe = document.createElement("span");
      probe.style.font = getComputedStyle(select).font;
      probe.style.whiteSpace = "nowrap";
      probe.textContent = select.selectedOptions[0]!.text;
      document.body.append(probe);
      const width = probe.getBoundingClientRect().width;
      probe.remove();
      // Room for the padding and the arrow.
      return { width, room: select.clientWidth - 40 };
    });
    assert.ok(fits.width <= fits.room, `the key choice is not truncated (${fits.width} in ${fits.room})`);
    await shot(page, "390-playground-settings");

    await page.getByLabel("Message").fill("Tell me a story");
    await page.getByRole("button", { name: "View code" }).click();
    const dialog = page.getByRole("dialog", { name: "View code" });
    const tabs = await dialog.getByRole("tab").evaluateAll((elements) => elements.map((tab) => tab.getBoundingClientRect()).map((rect) => ({ left: rect.left, right: rect.right })));
    const dialogBox = (await dialog.boundingBox())!;
    assert.ok(tabs.every((tab) => tab.left >= dialogBox.x && tab.right <= dialogBox.x + dialogBox.width), "every View code tab is visible");
    await shot(page, "390-playground-code");
    await page.keyboard.press("Escape");
  });

  it("lays out the Usage stat cards two to a row on a phone, draws a single day as a centred bar, and exports CSV", async () => {
    const page = await newPage(PHONE);
    await signIn(page, "a.rather.long.address.for.a.funded.account@example.com");
    await open(page, "Usage");
    const stats = await page.locator(".stat").evaluateAll((elements) => elements.map((element) => element.getBoundingClientRect()).map((rect) => ({ top: rect.top, left: rect.left })));
    assert.equal(stats.length, 3);
    assert.equal(Math.round(stats[0]!.top), Math.round(stats[1]!.top), "two stat cards side by side");
    assert.ok(stats[1]!.left > stats[0]!.left);
    const bar = await page.locator(".chart").first().evaluate((chart) => {
      const grid = chart.querySelector(".recharts-cartesian-grid")!.getBoundingClientRect();
      const rectangles = [...chart.querySelectorAll(".recharts-bar-rectangle")].map((element) => element.getBoundingClientRect()).filter((rect) => rect.width > 0);
      const left = Math.min(...rectangles.map((rect) => rect.left));
      const right = Math.max(...rectangles.map((rect) => rect.right));
      return { width: right - left, centre: (left + right) / 2, gridCentre: grid.left + grid.width / 2, gridWidth: grid.width };
    });
    assert.ok(bar.width >= 24, `a proper bar (${bar.width} px wide)`);
    assert.ok(Math.abs(bar.centre - bar.gridCentre) < bar.gridWidth * 0.05, "centred");
    await shot(page, "390-usage-single-day");

    const download = page.waitForEvent("download");
    await page.getByRole("link", { name: "Export CSV" }).click();
    const file = await download;
    assert.match(file.suggestedFilename(), /^turnpike-usage-.+\.csv$/);
    const text = fs.readFileSync((await file.path())!, "utf8");
    assert.match(text, /^time,request_id,/);
    assert.ok(text.includes('"build ""ci"" box"') && text.includes('"production backend, EU region"'));
    assert.equal(text.trim().split("\r\n").length, 4, "a header and three requests");
  });

  it("gives the chart legend at least 4.5:1 contrast, light and dark", async () => {
    for (const scheme of ["light", "dark"] as const) {
      const page = await newPage(DESKTOP, scheme);
      await signIn(page, "a.rather.long.address.for.a.funded.account@example.com");
      await open(page, "Usage");
      const legend = await legendColours(page);
      assert.ok(legend.some((entry) => entry.text === "Cached prompt"));
      for (const entry of legend) assert.ok(contrast(entry.color, entry.background) >= 4.5, `${scheme}: "${entry.text}" ${entry.color} on ${entry.background}: ${contrast(entry.color, entry.background).toFixed(2)}`);
      await shot(page, `1280-usage-${scheme}`);
    }
  });

  it("keeps the theme chosen across reloads, applied before the app loads", async () => {
    const page = await newPage(DESKTOP, "light");
    await signIn(page, "zero@example.com");
    const background = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    assert.equal(await background(), "rgb(255, 255, 255)");
    await page.getByLabel("Theme").selectOption("dark");
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), "dark");
    assert.equal(await background(), "rgb(15, 17, 21)");
    await page.reload();
    await page.getByRole("heading", { name: "Playground" }).waitFor();
    assert.equal(await page.getByLabel("Theme").inputValue(), "dark");
    assert.equal(await background(), "rgb(15, 17, 21)");
    await shot(page, "1280-playground-dark-chosen");
    // Without the app's script at all, the page is dark already: the theme is applied in <head>.
    await page.route("**/assets/*.js", (route) => route.abort());
    await page.reload();
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), "dark");
    assert.equal(await background(), "rgb(15, 17, 21)");
    await page.unroute("**/assets/*.js");
    await page.reload();
    await page.getByLabel("Theme").selectOption("system");
    await page.reload();
    await page.getByRole("heading", { name: "Playground" }).waitFor();
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), undefined);
    assert.equal(await background(), "rgb(255, 255, 255)");
  });

  it("had no uncaught errors in any page", () => {
    assert.deepEqual(pageErrors, []);
  });
});
