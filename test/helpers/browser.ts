/**
 * The console's browser tests: Debian's chromium driven by playwright-core (which never downloads
 * a browser), started as the machine's probe showed it must be here (no sandbox as root, no
 * background networking on a closed network), and signing in through the real form.
 */
import fs from "node:fs";
import { chromium, type Browser, type Page } from "playwright-core";

/** The browser binary; TURNPIKE_CHROMIUM overrides Debian's. */
export const CHROMIUM = process.env.TURNPIKE_CHROMIUM ?? "/usr/bin/chromium";

/** A headless chromium for one test file; close it in `after`. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

/** Signs in through the console's sign-in page and waits for the Playground, where it lands. */
export async function signInThroughForm(page: Page, email: string, password: string): Promise<void> {
  await page.goto("/signin");
  await page.getByLabel("Email address").fill(email);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Playground" }).waitFor();
}

/**
 * For `describe(name, { skip: skipWithoutChromium() }, ...)`: false when the browser is there;
 * when it is missing, a skip message outside CI, and under CI=true an error (.ci/run installs it).
 */
export function skipWithoutChromium(): string | false {
  if (fs.existsSync(CHROMIUM)) return false;
  const message = `no browser at ${CHROMIUM} (apt-get install chromium)`;
  if (process.env.CI === "true") throw new Error(`${message}; CI must install it before the tests (.ci/run does)`);
  return message;
}
