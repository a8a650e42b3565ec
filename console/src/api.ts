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

export type Session = { id: string; email: string; role: "admin" | "user"; csrf_token: string };

export type Plan = {
  id: string;
  name: string;
  price: { amount: number; currency: string };
  credit: number;
  days: number | null;
  rpm: number | null;
  tpm: number | null;
  models: string[] | null;
};

export type Account = {
  id: string;
  email: string;
  role: "admin" | "user";
  balance: number;
  plan: Plan | null;
  credit_expires: number | null;
  created: number;
  disabled: number | null;
};

export type ApiKey = {
  id: string;
  name: string;
  display_prefix: string;
  account_id: string | null;
  account_email?: string | null;
  created: number;
  last_used: number | null;
  expires: number | null;
  revoked: number | null;
  status: "active" | "revoked" | "expired";
  models: string[] | null;
  spend_cap: number | null;
  spent: number;
  rpm: number | null;
  tpm: number | null;
};

export type CreatedKey = ApiKey & { key: string };

export type Model = {
  id: string;
  owned_by: string;
  context_length: number;
  modalities: { input: string[]; output: string[] };
  pricing: { prompt: number; cached_prompt: number; completion: number };
  supported_parameters: string[];
  status: { state: "ready" | "loading" | "downloading" | "unavailable"; progress?: number; detail?: string };
};

export type UsageGroup = {
  group: string;
  requests: number;
  prompt_tokens: number;
  cached_prompt_tokens: number;
  completion_tokens: number;
  cost: number;
};

export type UsageRequest = {
  id: string;
  request_id: string;
  created: number;
  key_id: string | null;
  key_name: string | null;
  model: string;
  prompt_tokens: number;
  cached_prompt_tokens: number;
  completion_tokens: number;
  cost: number;
  latency_ms: number;
  status: number;
  finish_reason: string | null;
  stream: boolean | number;
};

export type List<T> = { object?: "list"; data: T[] };
