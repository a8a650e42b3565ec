/**
 * The console's calls to `/api`: JSON in and out, the session cookie sent by the browser, the
 * CSRF token added to every state-changing call, and OpenAI-shaped errors turned into `ApiError`.
 */

export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly param: string | null;

  constructor(message: string, status: number, code: string, param: string | null = null) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.param = param;
  }
}

let csrfToken = "";
let onSignedOut: () => void = () => {};

export function setCsrfToken(token: string): void {
  csrfToken = token;
}

/** Called when a call finds the session gone (expired, signed out elsewhere, account disabled). */
export function setSignedOutHandler(handler: () => void): void {
  onSignedOut = handler;
}

export async function api<T>(method: "GET" | "POST" | "PATCH" | "DELETE", path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (method !== "GET" && csrfToken !== "") headers["x-csrf-token"] = csrfToken;
  let response: Response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: "same-origin" });
  } catch {
    throw new ApiError("Could not reach the server. Check your connection and try again.", 0, "network_error");
  }
  const text = await response.text();
  let parsed: unknown = undefined;
  try {
    parsed = text === "" ? undefined : JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (!response.ok) {
    const error = (parsed as { error?: { message?: string; code?: string; param?: string | null } } | undefined)?.error;
    const failure = new ApiError(
      error?.message ?? `The server answered ${response.status}.`,
      response.status,
      error?.code ?? (response.status === 404 ? "not_found" : "http_error"),
      error?.param ?? null,
    );
    if (response.status === 401 && !path.startsWith("/api/auth/")) onSignedOut();
    throw failure;
  }
  return parsed as T;
}

export const get = <T>(path: string) => api<T>("GET", path);
export const post = <T>(path: string, body: unknown = {}) => api<T>("POST", path, body);

/* The shapes `/api` answers with. */

export type {
  SessionObject as Session,
  AuthSetupObject as AuthSetup,
  PlanObject as Plan,
  AccountObject as Account,
  ApiKeyObject as ApiKey,
  CreatedApiKeyObject as CreatedKey,
  UsageRow as UsageGroup,
  RecentRequest as UsageRequest,
} from "../../src/protocol/account-api.ts";

import type { ModelObject } from "../../src/protocol/models.ts";
export type { ModelQueue } from "../../src/protocol/queues.ts";

/**
 * A model of `/api/models`. A model that serves embeddings may also carry its vectors' length
 * (`embeddings.dimensions`, null until known) and what an embedding's input costs
 * (`pricing.embeddings`): optional, as not every server sends them.
 */
export type Model = ModelObject & {
  embeddings?: { dimensions?: number | null; matryoshka?: boolean | readonly number[] };
  pricing: { embeddings?: number };
};

export type List<T> = { object?: "list"; data: T[] };
