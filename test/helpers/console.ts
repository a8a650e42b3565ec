/**
 * Helpers for the console's `/api`: a cookie-keeping client that signs up or in and sends the
 * CSRF token on state-changing calls, as the console does.
 */
import fs from "node:fs";
import path from "node:path";
import { storiesModel } from "./server.ts";

export type ApiResponse = { status: number; headers: Headers; body: any; text: string };

export class ConsoleClient {
  readonly baseUrl: string;
  cookie = "";
  csrfToken = "";
  /** Sent on every request (e.g. `x-forwarded-for` to act from another address). */
  extraHeaders: Record<string, string>;

  constructor(baseUrl: string, extraHeaders: Record<string, string> = {}) {
    this.baseUrl = baseUrl;
    this.extraHeaders = extraHeaders;
  }

  async request(method: string, url: string, body?: unknown, headers: Record<string, string> = {}): Promise<ApiResponse> {
    const unsafe = method !== "GET" && method !== "HEAD";
    const response = await fetch(`${this.baseUrl}${url}`, {
      method,
      headers: {
        ...(body === undefined ? {} : { "content-type": "application/json" }),
        ...(this.cookie === "" ? {} : { cookie: this.cookie }),
        ...(unsafe && this.csrfToken !== "" ? { "x-csrf-token": this.csrfToken } : {}),
        ...this.extraHeaders,
        ...headers,
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const setCookie = response.headers.get("set-cookie");
    if (setCookie !== null) {
      const [pair] = setCookie.split(";");
      this.cookie = /=$/.test(pair ?? "") || /Expires=Thu, 01 Jan 1970/i.test(setCookie) ? "" : (pair ?? "");
    }
    const text = await response.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    return { status: response.status, headers: response.headers, body: parsed, text };
  }

  get(url: string, headers?: Record<string, string>) {
    return this.request("GET", url, undefined, headers);
  }
  post(url: string, body: unknown = {}, headers?: Record<string, string>) {
    return this.request("POST", url, body, headers);
  }
  delete(url: string, headers?: Record<string, string>) {
    return this.request("DELETE", url, undefined, headers);
  }

  async signUp(email: string, password = "correct horse battery", setupCode?: string): Promise<ApiResponse> {
    const response = await this.post("/api/auth/signup", { email, password, ...(setupCode === undefined ? {} : { setup_code: setupCode }) });
    if (response.status === 201) this.csrfToken = response.body.csrf_token;
    return response;
  }

  /** Signs up as the installation's first admin, with the setup code the server printed. */
  async signUpAdmin(test: { server: { setupCode: string | null } }, email: string, password = "correct horse battery"): Promise<ApiResponse> {
    return this.signUp(email, password, setupCodeOf(test));
  }

  async signIn(email: string, password = "correct horse battery"): Promise<ApiResponse> {
    const response = await this.post("/api/auth/signin", { email, password });
    if (response.status === 200) this.csrfToken = response.body.csrf_token;
    return response;
  }
}

/** The one-time setup code a test server printed at start-up (it had no admin). */
export function setupCodeOf(test: { server: { setupCode: string | null } }): string {
  if (test.server.setupCode === null) throw new Error("the server printed no setup code: it has an admin already");
  return test.server.setupCode;
}

/** A config file with priced stories260K and two plans. */
export function writeConsoleConfig(directory: string): string {
  const file = path.join(directory, "turnpike.json");
  fs.writeFileSync(
    file,
    JSON.stringify({
      models: [{ id: "stories260K", path: storiesModel, pricing: { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 } }],
      plans: [
        { id: "starter", name: "Starter", price: { amount: 500, currency: "usd" }, credit: 5000, days: 30, rpm: 600, tpm: 1000000 },
        { id: "pro", name: "Pro", price: { amount: 2000, currency: "usd" }, credit: 25000, days: 30 },
      ],
    }),
  );
  return file;
}
