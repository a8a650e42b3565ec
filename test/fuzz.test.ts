/**
 * A fuzz run against a real server: at least 5,000 requests generated from a seeded PRNG, to
 * `/v1/chat/completions` (random JSON shapes at every level of the request: wrong types, huge and
 * deeply nested values, random unicode, the schema's own fields with random values, a few bodies
 * just under and just over the body limit, malformed JSON, random headers and content types),
 * to every `/api` and `/v1` route the server registers (read from Fastify's route table), and a
 * few malformed HTTP requests on raw sockets. Most use a key whose account has no credit (so
 * valid requests are refused cheaply, as an attacker's would be); a few use one with credit
 * (tiny `max_tokens`), the operator's key, no key or a made-up one. Some carry vendor fields
 * (`chat_template_kwargs` of any shape, `top_k`, ...) to a free model served by the scripted fake
 * upstream, whose one member must still be healthy at the end (issue 19 row 2).
 *
 * It asserts: no 5xx, every error in the OpenAI shape (Anthropic's on `/v1/messages`) (`error.message`, `error.type`,
 * `error.code` strings, `error.param` a string or null), and `/health` answering throughout.
 * Replay a failure with `TURNPIKE_FUZZ_SEED=<seed from the test name>`.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { after, before, it } from "node:test";
import type { Kysely } from "kysely";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { grantPlan } from "../src/billing/grant-plan.ts";
import { findPlan } from "../src/billing/plans-store.ts";
import { openStore } from "../src/store/open.ts";
import type { Database } from "../src/store/schema.ts";
import { FaultUpstream } from "./helpers/fault-upstream.ts";
import { errorBodySchema, streamEventSchemas } from "./helpers/messages-schemas.ts";
import { startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const SEED = Number(process.env.TURNPIKE_FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
const REQUESTS = Number(process.env.TURNPIKE_FUZZ_REQUESTS ?? 5000);
const CONCURRENCY = 8;
/** The whole run must end within this (the budget), on a loaded 2-core machine. */
const BUDGET_MS = 60_000;
const MODEL = "story";
/** A free model served by the scripted fake upstream: vendor fields pass to it. */
const UPSTREAM_MODEL = "upstream-story";

/** A small, fast, seedable PRNG (mulberry32). */
class Random {
  #state: number;
  constructor(seed: number) {
    this.#state = seed >>> 0;
  }
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }
  chance(probability: number): boolean {
    return this.next() < probability;
  }
  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)]!;
  }
}

// ---------------------------------------------------------------- values

const NUMBERS = [0, 1, -1, 2, 4, 8, 9, 20, 21, 0.5, -0.5, 1.5, 100, 1000, 2001, 65536, 2 ** 31, -(2 ** 31), 2 ** 53, 2 ** 53 + 2, -(2 ** 53), 1e21, 1e308, -1e308, 5e-324, 9007199254740991];
const STRINGS = ["", " ", "a", "0", "-1", "1e9", "true", "null", "NaN", "[]", "{}", "__proto__", "constructor", "toString", "hasOwnProperty", "auto", "none", "required", "text", "json_object", "json_schema", "function", "user", "system", "assistant", "tool", "developer", "image_url", "stories260K", MODEL, "\u0000", "\u0000\u0001\u001f", "\r\n\r\n", "%00", "../../etc/passwd", "<script>alert(1)</script>", "' OR 1=1 --", "\ud800", "\udfff\ud800", "\ufeff", "\u202e", "😀", "Ω≈ç√", "a\u0000b", "data:image/png;base64,AAAA", "http://127.0.0.1:1/x.png", "file:///etc/passwd"];

function randomUnicode(random: Random, length: number): string {
  let text = "";
  for (let index = 0; index < length; index++) {
    const kind = random.int(0, 9);
    if (kind < 4) text += String.fromCharCode(random.int(0x20, 0x7e));
    else if (kind < 6) text += String.fromCharCode(random.int(0, 0x1f));
    else if (kind < 8) text += String.fromCharCode(random.int(0x80, 0xffff));
    else text += String.fromCodePoint(random.int(0x10000, 0x10ffff));
  }
  return text;
}

function randomString(random: Random): string {
  const kind = random.int(0, 9);
  if (kind < 4) return random.pick(STRINGS);
  if (kind < 8) return randomUnicode(random, random.int(0, 40));
  if (kind < 9) return randomUnicode(random, random.int(100, 3000));
  return random.pick(["x", "é", "😀", "\u0000"]).repeat(random.int(10_000, 100_000));
}

function randomScalar(random: Random): unknown {
  switch (random.int(0, 5)) {
    case 0:
      return null;
    case 1:
      return random.chance(0.5);
    case 2:
      return random.pick(NUMBERS);
    case 3:
      return (random.next() - 0.5) * 10 ** random.int(0, 12);
    default:
      return randomString(random);
  }
}

/** Any JSON value, up to `depth` levels; now and then a very deep or very wide one. */
function randomValue(random: Random, depth = 3): unknown {
  if (depth <= 0 || random.chance(0.45)) return randomScalar(random);
  const roll = random.next();
  if (roll < 0.02) return deepNest(random, random.int(100, 3000));
  if (roll < 0.04) return Array.from({ length: random.int(1000, 20_000) }, () => random.int(0, 9));
  if (roll < 0.5) return Array.from({ length: random.int(0, 5) }, () => randomValue(random, depth - 1));
  const object: Record<string, unknown> = {};
  for (let index = random.int(0, 5); index > 0; index--) object[random.chance(0.7) ? randomString(random).slice(0, 30) : random.pick(STRINGS)] = randomValue(random, depth - 1);
  return object;
}

function deepNest(random: Random, levels: number): unknown {
  let value: unknown = randomScalar(random);
  const asObject = random.chance(0.5);
  for (let level = 0; level < levels; level++) value = asObject ? { [random.pick(["a", "type", "items", "properties", "anyOf"])]: value } : [value];
  return value;
}

// ---------------------------------------------------------------- chat requests

/** A JSON Schema, mostly plausible (the translator's keywords), sometimes not. */
function randomSchema(random: Random, depth = 3): unknown {
  if (depth <= 0 || random.chance(0.15)) return random.chance(0.8) ? { type: random.pick(["string", "number", "integer", "boolean", "null"]) } : randomValue(random, 2);
  const type = random.pick(["object", "array", "string", "number", "integer", "boolean", "null", "weird", ["string", "null"], 5]);
  const schema: Record<string, unknown> = { type };
  if (type === "object" || random.chance(0.1)) {
    const properties: Record<string, unknown> = {};
    for (let index = random.int(0, 4); index > 0; index--) properties[randomString(random).slice(0, 12) || "p"] = randomSchema(random, depth - 1);
    schema.properties = random.chance(0.95) ? properties : randomValue(random, 2);
    if (random.chance(0.5)) schema.required = Object.keys(properties);
    if (random.chance(0.3)) schema.additionalProperties = random.chance(0.5) ? random.chance(0.5) : randomSchema(random, depth - 1);
  }
  if (type === "array" || random.chance(0.1)) {
    schema.items = randomSchema(random, depth - 1);
    if (random.chance(0.3)) schema.minItems = random.pick([0, 1, 2, 5, -1, 1.5]);
    if (random.chance(0.3)) schema.maxItems = random.pick([0, 1, 3, 10, 100, -1, 1002, 2000, 100_000]);
  }
  if (type === "string" || random.chance(0.1)) {
    if (random.chance(0.2)) schema.minLength = random.pick([0, 1, 5, -1]);
    if (random.chance(0.2)) schema.maxLength = random.pick([0, 1, 10, 200, -1, 1500, 2000, 100_000]);
    if (random.chance(0.1)) schema.pattern = random.pick(["^[a-z]+$", "(", "a{1,3}", randomString(random).slice(0, 20)]);
    if (random.chance(0.1)) schema.format = random.pick(["date", "date-time", "email", "uuid", "unknown"]);
  }
  if (random.chance(0.1)) schema.enum = Array.from({ length: random.int(0, 4) }, () => randomScalar(random));
  if (random.chance(0.05)) schema.const = randomScalar(random);
  if (random.chance(0.08)) schema[random.pick(["anyOf", "oneOf", "allOf"])] = Array.from({ length: random.int(0, 3) }, () => randomSchema(random, depth - 1));
  if (random.chance(0.05)) schema.$ref = random.pick(["#", "#/$defs/a", "#/definitions/x", "http://example.com/schema", "#/properties/../../"]);
  if (random.chance(0.05)) schema.$defs = { a: randomSchema(random, depth - 1) };
  if (random.chance(0.05)) schema[randomString(random).slice(0, 10)] = randomValue(random, 1);
  return schema;
}

function randomContent(random: Random): unknown {
  const roll = random.next();
  if (roll < 0.5) return randomString(random);
  if (roll < 0.9) {
    return Array.from({ length: random.int(0, 4) }, () => {
      const type = random.pick(["text", "image_url", "input_audio", "file", "refusal", "video", 3, null]);
      const part: Record<string, unknown> = { type };
      if (type === "text" || random.chance(0.2)) part.text = random.chance(0.8) ? randomString(random) : randomValue(random, 2);
      if (type === "image_url" || random.chance(0.1)) part.image_url = random.chance(0.7) ? { url: random.pick(STRINGS), detail: random.pick(["auto", "low", "high", "max", 1]) } : randomValue(random, 2);
      if (type === "input_audio") part.input_audio = random.chance(0.7) ? { data: randomString(random), format: random.pick(["wav", "mp3", ""]) } : randomValue(random, 2);
      if (type === "file") part.file = randomValue(random, 2);
      if (type === "refusal") part.refusal = randomString(random);
      return random.chance(0.9) ? part : randomValue(random, 2);
    });
  }
  return randomValue(random, 2);
}

function randomMessage(random: Random): unknown {
  if (random.chance(0.05)) return randomValue(random, 2);
  const role = random.pick(["user", "user", "system", "developer", "assistant", "tool", "function", "", 1]);
  const message: Record<string, unknown> = { role };
  if (random.chance(0.95)) message.content = randomContent(random);
  if (random.chance(0.1)) message.name = random.chance(0.7) ? randomString(random) : randomValue(random, 1);
  if (role === "assistant" && random.chance(0.4)) {
    message.tool_calls = random.chance(0.8)
      ? Array.from({ length: random.int(0, 3) }, () => ({
          id: randomString(random).slice(0, 20),
          type: random.pick(["function", "other"]),
          function: { name: random.pick(["get_weather", "", randomString(random)]), arguments: random.chance(0.5) ? JSON.stringify(randomValue(random, 2)) ?? "" : randomString(random) },
        }))
      : randomValue(random, 2);
  }
  if (role === "tool" || random.chance(0.05)) message.tool_call_id = random.chance(0.8) ? randomString(random).slice(0, 30) : randomValue(random, 1);
  if (random.chance(0.05)) message[randomString(random).slice(0, 10)] = randomValue(random, 2);
  return message;
}

function randomTool(random: Random): unknown {
  if (random.chance(0.1)) return randomValue(random, 2);
  return {
    type: random.pick(["function", "function", "function", "code_interpreter", null]),
    function: random.chance(0.95)
      ? {
          name: random.pick(["get_weather", "a", "x".repeat(64), "x".repeat(65), "bad name", "", randomString(random).slice(0, 70)]),
          ...(random.chance(0.5) ? { description: randomString(random) } : {}),
          ...(random.chance(0.8) ? { parameters: random.chance(0.85) ? randomSchema(random) : randomValue(random, 2) } : {}),
          ...(random.chance(0.2) ? { strict: randomScalar(random) } : {}),
        }
      : randomValue(random, 2),
  };
}

/** A value for one field of the request, plausible or not. */
function fieldValue(random: Random, field: string): unknown {
  if (random.chance(0.25)) return randomValue(random, 2);
  switch (field) {
    case "model":
      return random.pick([MODEL, MODEL, "stories260K", "", "gpt-4o", "../story", MODEL.toUpperCase(), randomString(random)]);
    case "messages":
      if (random.chance(0.03)) return Array.from({ length: random.int(2000, 20_000) }, () => ({ role: "user", content: "" }));
      return Array.from({ length: random.int(0, 6) }, () => randomMessage(random));
    case "frequency_penalty":
    case "presence_penalty":
    case "temperature":
    case "top_p":
      return random.chance(0.5) ? random.int(-300, 300) / 100 : random.pick(NUMBERS);
    case "logit_bias": {
      const bias: Record<string, unknown> = {};
      const entries = random.chance(0.05) ? random.int(1000, 50_000) : random.int(0, 6);
      for (let index = 0; index < entries; index++) bias[random.chance(0.8) ? String(random.int(-5, 100_000)) : randomString(random).slice(0, 10)] = random.chance(0.9) ? random.int(-150, 150) : randomScalar(random);
      return bias;
    }
    case "logprobs":
    case "stream":
    case "parallel_tool_calls":
      return random.chance(0.8) ? random.chance(0.5) : randomScalar(random);
    case "top_logprobs":
      return random.int(-2, 25);
    case "max_tokens":
    case "max_completion_tokens":
      return random.pick([1, 2, 4, 0, -1, 1.5, 2048, 2049, 100_000, 2 ** 53, "4"]);
    case "n":
      return random.pick([1, 2, 8, 9, 0, -1, 1.5, 1000, "2"]);
    case "response_format":
      return random.pick([
        { type: "text" },
        { type: "json_object" },
        { type: "json_schema", json_schema: { name: random.pick(["answer", "", "bad name", randomString(random).slice(0, 20)]), schema: randomSchema(random), strict: random.chance(0.5) } },
        { type: "json_schema", json_schema: randomValue(random, 2) },
        { type: random.pick(["xml", "", 1]) },
      ]);
    case "seed":
      return random.pick([0, 1, -1, 2 ** 31, 2 ** 53, 1.5, -(2 ** 63)]);
    case "stop":
      return random.chance(0.5) ? randomString(random) : Array.from({ length: random.int(0, 6) }, () => (random.chance(0.9) ? randomString(random) : randomScalar(random)));
    case "stream_options":
      return random.chance(0.7) ? { include_usage: randomScalar(random) } : randomValue(random, 2);
    case "tools":
      if (random.chance(0.03)) return Array.from({ length: random.int(200, 5000) }, () => randomTool(random));
      return Array.from({ length: random.int(0, 4) }, () => randomTool(random));
    case "tool_choice":
      return random.pick(["none", "auto", "required", "any", { type: "function", function: { name: random.pick(["get_weather", "missing", ""]) } }, { type: "function" }]);
    case "user":
      return randomString(random);
    case "functions":
      return Array.from({ length: random.int(0, 3) }, () => randomValue(random, 2));
    case "modalities":
      return random.pick([["text"], ["audio"], ["text", "audio"], []]);
    default:
      return randomValue(random, 2);
  }
}

const CHAT_FIELDS = ["messages", "model", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "max_completion_tokens", "max_tokens", "n", "presence_penalty", "response_format", "seed", "stop", "stream", "stream_options", "temperature", "top_p", "tools", "tool_choice", "parallel_tool_calls", "user", "functions", "function_call", "audio", "modalities"];

/** A chat request: a valid one with a few random changes, or something else entirely. */
function chatBody(random: Random): unknown {
  if (random.chance(0.05)) return randomValue(random, 4);
  const body: Record<string, unknown> = { model: MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: random.int(1, 4) };
  for (let change = random.int(1, 4); change > 0; change--) {
    const roll = random.next();
    if (roll < 0.75) {
      const field = random.pick(CHAT_FIELDS);
      body[field] = fieldValue(random, field);
    }
    else if (roll < 0.85) delete body[random.pick(["model", "messages", "max_tokens"])];
    else if (roll < 0.95) body[randomString(random).slice(0, 20)] = randomValue(random, 3);
    else (body.messages as unknown[] | undefined)?.push?.(randomMessage(random));
  }
  return body;
}

/** A chat request for the key with credit: valid enough to run, and cheap (a few tokens). */
function paidChatBody(random: Random): Record<string, unknown> {
  const body: Record<string, unknown> = { model: MODEL, messages: [{ role: "user", content: random.pick(["Hi", "Once upon a time", randomUnicode(random, 20)]) }] };
  for (let change = random.int(0, 3); change > 0; change--) {
    const field = random.pick(["temperature", "top_p", "logprobs", "top_logprobs", "n", "stop", "seed", "stream", "stream_options", "response_format", "tools", "tool_choice", "logit_bias", "presence_penalty", "user"]);
    body[field] = fieldValue(random, field);
  }
  // Structured output and tools build grammars: a third of the paid requests try one.
  if (random.chance(0.35)) {
    if (random.chance(0.5)) body.response_format = { type: "json_schema", json_schema: { name: "answer", schema: randomSchema(random), strict: random.chance(0.5) } };
    else body.tools = Array.from({ length: random.int(1, 3) }, () => ({ type: "function", function: { name: random.pick(["get_weather", "lookup", "f"]), parameters: randomSchema(random) } }));
  }
  body.max_tokens = random.int(1, 3);
  delete body.max_completion_tokens;
  if (typeof body.n !== "number" || body.n > 2) body.n = random.int(1, 2);
  return body;
}

/** A chat request to the upstream model with vendor fields: plausible, huge, deep, shadowing or of the wrong type. */
function vendorChatBody(random: Random): Record<string, unknown> {
  const body: Record<string, unknown> = { model: UPSTREAM_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: random.int(1, 4) };
  const kwargs = random.pick([
    () => ({ enable_thinking: random.chance(0.5) }),
    () => randomValue(random, 4),
    () => ({ enable_thinking: deepNest(random, random.int(5, 6000)) }),
    () => ({ [random.pick(["messages", "tools", "model", "chat_template", "add_generation_prompt", "documents", "bos_token", "__proto__", "constructor"])]: randomValue(random, 2) }),
    () => ({ notes: "n".repeat(random.pick([16_384, 16_385, 70_000, 2_000_000])) }),
    () => Object.fromEntries(Array.from({ length: random.int(60, 70) }, (_, index) => [`k${index}`, randomScalar(random)])),
    () => Object.fromEntries(Array.from({ length: random.int(1, 6) }, () => [randomString(random).slice(0, 30), randomValue(random, 3)])),
  ]);
  if (random.chance(0.8)) body.chat_template_kwargs = kwargs();
  for (const field of ["top_k", "min_p", "repetition_penalty", "reasoning_effort"]) {
    if (random.chance(0.2)) body[field] = random.chance(0.5) ? random.pick([0, 1, -1, 40, 0.05, 1.1, 2 ** 31, "high", "low", "none", ""]) : randomValue(random, 2);
  }
  if (random.chance(0.3)) body.stream = random.chance(0.5);
  return body;
}

// ---------------------------------------------------------------- /api bodies

/** Plausible values for the fields the `/api` routes read, and random ones. */
function apiBody(random: Random): unknown {
  if (random.chance(0.15)) return randomValue(random, 3);
  const fields: Record<string, () => unknown> = {
    name: () => random.pick(["key", "", " ", "k".repeat(101), randomString(random)]),
    models: () => random.pick([[MODEL], [], null, ["nope"], [""], Array.from({ length: 101 }, () => MODEL), randomValue(random, 1)]),
    expires_at: () => random.pick([null, 0, -1, 1, Math.floor(Date.now() / 1000) + 3600, 2 ** 53, 1.5, "never"]),
    spend_cap: () => random.pick([null, 0, -1, 1, 1000, 2 ** 53, 1.5, "10"]),
    rpm: () => random.pick([null, 0, 1, 60, -1, 2 ** 53]),
    tpm: () => random.pick([null, 0, 1, 1000, -1, 2 ** 53]),
    code: () => random.pick(["", "X".repeat(101), "TP-FAKE-CODE", randomString(random)]),
    plan: () => random.pick(["roomy", "", "nope", randomString(random)]),
    count: () => random.pick([1, 0, -1, 1000, 1001, 1.5, "2"]),
    id: () => random.pick(["new-plan", "", "roomy", "a".repeat(300), randomString(random)]),
    price: () => (random.chance(0.7) ? { amount: random.pick([0, 1, 500, -1, 2 ** 53, 1.5]), currency: random.pick(["usd", "eur", "usdd", ""]) } : randomValue(random, 2)),
    credit: () => random.pick([0, 1, 1000, -1, 2 ** 53, 1e300, 1.5]),
    days: () => random.pick([null, 0, 1, 30, -1, 1e9, 1.5]),
    active: () => randomScalar(random),
    email: () => random.pick(["a@example.com", "", "not-an-email", "a".repeat(300) + "@example.com", randomString(random)]),
    password: () => random.pick(["", "short", "a long enough password", "p".repeat(1025), randomString(random)]),
  };
  const body: Record<string, unknown> = {};
  for (const name of Object.keys(fields)) if (random.chance(0.3)) body[name] = random.chance(0.8) ? fields[name]!() : randomValue(random, 2);
  return body;
}

// ---------------------------------------------------------------- requests

type Route = { method: string; path: string };

/** Every route Fastify holds, from its route table (so routes added later are fuzzed too). */
function registeredRoutes(tree: string): Route[] {
  const routes: Route[] = [];
  const stack: string[] = [];
  for (const line of tree.split("\n")) {
    const match = /^([│ ]*)(?:├── |└── )(\S+) \(([^)]+)\)/.exec(line);
    if (match === null) continue;
    const level = match[1]!.length / 4;
    stack.length = level;
    const parent = level === 0 ? "" : stack[level - 1]!;
    const full = parent === "" ? match[2]! : parent.endsWith("/") || match[2]!.startsWith("/") ? parent + match[2]! : `${parent}/${match[2]!}`;
    stack[level] = full;
    for (const method of match[3]!.split(", ")) if (method !== "HEAD") routes.push({ method, path: full });
  }
  return routes;
}

type Request = { method: string; path: string; headers: Record<string, string>; body?: string | Uint8Array; label: string };

/** Percent-encodes any string, lone surrogates included (as U+FFFD). */
function encodePart(text: string): string {
  return encodeURIComponent(text.toWellFormed());
}

function concretePath(random: Random, template: string): string {
  return template
    .replace(/:[a-zA-Z]+/g, () => encodePart(random.pick(["x", "0", "acct_unknown", "key_unknown", "roomy", "%", "a".repeat(200), randomString(random).slice(0, 30)])))
    .replace(/\*$/, () => encodePart(random.pick([MODEL, "nope", "owner/model", randomString(random).slice(0, 30)])));
}

const CONTENT_TYPES = ["application/json", "application/json", "application/json", "application/json; charset=utf-8", "application/json; charset=utf-16", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/octet-stream", "application/vnd.api+json", "APPLICATION/JSON", "application/json, text/plain", "json", ";", "application/json; boundary="];

function randomHeaders(random: Random, authorization: string | undefined): Record<string, string> {
  const headers: Record<string, string> = {};
  if (authorization !== undefined) headers.authorization = authorization;
  if (random.chance(0.95)) headers["content-type"] = random.chance(0.7) ? "application/json" : random.pick(CONTENT_TYPES);
  if (random.chance(0.1)) headers.accept = random.pick(["text/event-stream", "application/json", "*/*", "text/html", "x/y"]);
  if (random.chance(0.05)) headers["content-encoding"] = random.pick(["gzip", "deflate", "br", "identity", "x"]);
  if (random.chance(0.1)) headers["x-request-id"] = random.pick(["req_1", "", "x".repeat(200), "a b", "%00"]);
  if (random.chance(0.05)) headers["x-forwarded-for"] = random.pick(["1.2.3.4", "::1", "garbage", "1.2.3.4, 5.6.7.8"]);
  if (random.chance(0.05)) headers.origin = random.pick(["http://evil.example", "null", "http://127.0.0.1", ""]);
  if (random.chance(0.05)) headers.cookie = random.pick(["turnpike_session=abc", "turnpike_session=", "a=b; turnpike_session=x".repeat(3)]);
  if (random.chance(0.03)) headers["x-csrf-token"] = random.pick(["", "x", "a".repeat(100)]);
  if (random.chance(0.03)) headers["sec-fetch-site"] = random.pick(["cross-site", "same-origin", "none"]);
  if (random.chance(0.05)) headers[`x-fuzz-${random.int(0, 99)}`] = randomUnicode(random, 20).replace(/[^\x20-\x7e]/g, "?");
  return headers;
}

/** The body as sent: JSON, JSON broken on purpose, or raw bytes. */
function encodeBody(random: Random, value: unknown): string | Uint8Array {
  const text = JSON.stringify(value) ?? "null";
  const roll = random.next();
  if (roll < 0.9) return text;
  if (roll < 0.94) return text.slice(0, random.int(0, text.length));
  if (roll < 0.96) return text + random.pick(["}", "]", ",", " x", "\u0000"]);
  if (roll < 0.98) return new Uint8Array(Array.from({ length: random.int(0, 200) }, () => random.int(0, 255)));
  return random.pick(["", "{", "[", '{"a":', "\ufeff{}", '{"model":"story","messages":[{"role":"user","content":"\\ud800"}]}', "{'a':1}", "NaN", "1e999999"]);
}

/** A body of exactly `size` bytes of valid JSON (a chat request whose message fills it). */
function sizedChatBody(size: number): string {
  const skeleton = JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: "user", content: "" }] });
  return skeleton.replace('"content":""', `"content":"${"a".repeat(Math.max(0, size - skeleton.length))}"`);
}

type Keys = { zero: string; credit: string; operator: string };

function nextRequest(random: Random, index: number, routes: Route[], keys: Keys, bodyLimit: number): Request {
  // A few bodies right at the limits: chat's --body-limit, /api's 256 KiB, /api/auth's 16 KiB.
  if (index % 500 === 250) {
    // Alternately one byte under and one over (250, 1250, ... under; 750, 1750, ... over).
    const over = Math.floor(index / 500) % 2 === 1;
    const target = random.pick([
      { path: "/v1/chat/completions", limit: bodyLimit },
      { path: "/api/keys", limit: 256 * 1024 },
      { path: "/api/auth/signin", limit: 16 * 1024 },
    ]);
    return {
      method: "POST",
      path: target.path,
      headers: { authorization: `Bearer ${keys.zero}`, "content-type": "application/json" },
      body: sizedChatBody(target.limit + (over ? 1 : -1)),
      label: `${target.path} body of ${target.limit + (over ? 1 : -1)} bytes`,
    };
  }
  const authorization = random.pick([
    ...Array<string | undefined>(14).fill(`Bearer ${keys.zero}`),
    `Bearer ${keys.operator}`,
    undefined,
    "Bearer tp-unknown",
    `Bearer ${keys.zero.slice(0, -1)}x`,
    `bearer ${keys.zero}`,
    `Basic ${Buffer.from("a:b").toString("base64")}`,
    "Bearer ",
    `Bearer ${"x".repeat(5000)}`,
  ]);
  const roll = random.next();
  // The operator's key has no account to bill: on chat it would generate, so it is kept to /api.
  const chatAuthorization = authorization === `Bearer ${keys.operator}` ? `Bearer ${keys.zero}` : authorization;
  if (roll < 0.02) {
    const body = paidChatBody(random);
    return { method: "POST", path: "/v1/chat/completions", headers: { authorization: `Bearer ${keys.credit}`, "content-type": "application/json" }, body: JSON.stringify(body), label: "paid chat" };
  }
  if (roll < 0.06) {
    // Written by hand where JSON.stringify cannot (kwargs nested thousands deep).
    const body = vendorChatBody(random);
    let text: string;
    try {
      text = JSON.stringify(body);
    } catch {
      text = JSON.stringify({ ...body, chat_template_kwargs: null }).replace('"chat_template_kwargs":null', `"chat_template_kwargs":{"enable_thinking":${"[".repeat(6000)}1${"]".repeat(6000)}}`);
    }
    return { method: "POST", path: "/v1/chat/completions", headers: { authorization: `Bearer ${keys.zero}`, "content-type": "application/json" }, body: text, label: "vendor fields upstream" };
  }
  if (roll < 0.55) {
    return { method: "POST", path: "/v1/chat/completions", headers: randomHeaders(random, chatAuthorization), body: encodeBody(random, chatBody(random)), label: "chat" };
  }
  const route = random.pick(routes);
  const query = random.chance(0.3) ? `?${random.pick(["from=-1", "to=abc", "limit=1e9", "before=%00", "account=all", "group_by=x", "from=9999999999999999", "a=1&a=2", "limit=-5", "cursor=" + encodePart(randomString(random).slice(0, 50))])}` : "";
  const headers = randomHeaders(random, authorization);
  const hasBody = route.method !== "GET" && route.method !== "DELETE" && random.chance(0.95);
  return {
    method: route.method,
    path: concretePath(random, route.path) + query,
    headers: hasBody ? headers : Object.fromEntries(Object.entries(headers).filter(([name]) => name !== "content-type")),
    body: hasBody ? encodeBody(random, apiBody(random)) : undefined,
    label: `${route.method} ${route.path}`,
  };
}

/** Malformed HTTP, sent on a raw socket. */
const RAW_REQUESTS = [
  "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
  "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
  "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
  "GET /\u0000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
  "GET / HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n",
  "BREW /api/keys HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
  "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad Header: 1\r\n\r\n",
  `GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`,
  "GET /%%32%65 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
  "GET /v1/models/%ZZ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
  "POST /api/auth/signin HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
  "GET /api/keys HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \u00ff\u00fe\r\n\r\n",
];

type Outcome = { status: number; text: string; contentType: string };

async function sendRaw(port: number, text: string): Promise<Outcome> {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1", () => socket.write(Buffer.from(text, "latin1")));
    let received = "";
    socket.setTimeout(10_000, () => socket.destroy());
    socket.on("data", (chunk) => {
      received += chunk.toString("latin1");
      // A whole answer on a connection the server keeps open: done, without waiting for it to idle out.
      const split = received.indexOf("\r\n\r\n");
      const length = /\r\ncontent-length: (\d+)/i.exec(received.slice(0, split))?.[1];
      if (split >= 0 && length !== undefined && Buffer.byteLength(received.slice(split + 4), "latin1") >= Number(length)) socket.destroy();
    });
    socket.on("error", () => {});
    socket.on("close", () => {
      const split = received.indexOf("\r\n\r\n");
      const head = received.slice(0, split);
      // Anything but an HTTP status line (nothing at all, say) is status 0: never mistaken for a fine answer.
      resolve({ status: Number(/^HTTP\/1\.[01] (\d{3}) /.exec(received)?.[1] ?? 0), text: received.slice(split + 4), contentType: /content-type: ([^\r]*)/i.exec(head)?.[1] ?? "" });
    });
  });
}

async function send(baseUrl: string, request: Request): Promise<Outcome> {
  const response = await fetch(`${baseUrl}${request.path}`, { method: request.method, headers: request.headers, body: request.body as BodyInit | undefined, signal: AbortSignal.timeout(30_000) });
  return { status: response.status, text: await response.text(), contentType: response.headers.get("content-type") ?? "" };
}

/** Why an answer breaks the rules, or null when it keeps them. */
/**
 * What is wrong with an answer, or null. `path`: the request's; the Anthropic Messages routes
 * (`/v1/messages…`) answer in Anthropic's error shape (their clients' SDKs read no other), every
 * other route in OpenAI's.
 */
function problemWith(outcome: Outcome, path: string): string | null {
  const anthropic = path.startsWith("/v1/messages");
  if (outcome.status >= 500) {
    const code = /"code":"([^"]*)"/.exec(outcome.text)?.[1];
    // Documented 503s: a full wait queue (a burst of valid requests), a full parse queue (a burst of large bodies, issue 19
    // row 4: the fuzz's own workers share one key), payments not configured; Anthropic's overloaded 529.
    const documented = outcome.status === 503 && (code === "engine_overloaded" || code === "server_busy" || code === "payments_not_configured");
    const overloaded = anthropic && outcome.status === 529 && /"type":"overloaded_error"/.test(outcome.text);
    if (!documented && !overloaded) return `status ${outcome.status}`;
  }
  if (outcome.status === 0) return "no answer";
  const shaped = (payload: unknown): boolean => {
    if (anthropic) return errorBodySchema.safeParse(payload).success || streamEventSchemas.error.safeParse(payload).success;
    const error = (payload as { error?: Record<string, unknown> } | null)?.error;
    return (
      typeof error === "object" &&
      error !== null &&
      typeof error.message === "string" &&
      typeof error.type === "string" &&
      typeof error.code === "string" &&
      (typeof error.param === "string" || error.param === null)
    );
  };
  if (outcome.status >= 400) {
    try {
      if (!shaped(JSON.parse(outcome.text))) return `error not in the ${anthropic ? "Anthropic" : "OpenAI"} shape`;
    } catch {
      return "error body is not JSON";
    }
  }
  if (outcome.contentType.startsWith("text/event-stream")) {
    for (const line of outcome.text.split("\n")) {
      if (!line.startsWith("data: {") || !line.includes('"error"')) continue;
      const payload = JSON.parse(line.slice(6)) as Record<string, unknown>;
      if ("error" in payload && !shaped(payload)) return `stream error not in the ${anthropic ? "Anthropic" : "OpenAI"} shape`;
    }
  }
  return null;
}

// ---------------------------------------------------------------- the run

let test: TestServer;
let database: Kysely<Database>;
let keys: Keys;
let upstream: FaultUpstream;
const BODY_LIMIT = 10 * 1024 * 1024;

before(async () => {
  const configFile = path.join(temporaryDirectory(), "turnpike.json");
  upstream = await FaultUpstream.start({ model: UPSTREAM_MODEL, maxModelLen: 4096 });
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      models: [
        { id: MODEL, path: storiesModel, pricing: { prompt: 1, cached_prompt: 1, completion: 1 } },
        { id: UPSTREAM_MODEL, upstream: { kind: "vllm", urls: [upstream.baseUrl], health_interval: 3600 } },
      ],
      plans: [{ id: "roomy", name: "Roomy", price: { amount: 100, currency: "usd" }, credit: 1_000_000_000 }],
    }),
  );
  test = await startTestServer({ configFile, flags: { parallel: "2", queue_size: "64", body_limit: String(BODY_LIMIT) } });
  database = await openStore({ dataDir: test.dataDir, databaseUrl: "" });
  const broke = await createAccount(database, { email: "broke@example.com" });
  const paying = await createAccount(database, { email: "paying@example.com" });
  await grantPlan(database, { accountId: paying.id, plan: (await findPlan(database, "roomy"))!, source: "test:fuzz" });
  keys = {
    zero: (await createApiKey(database, { name: "zero", accountId: broke.id })).key,
    credit: (await createApiKey(database, { name: "credit", accountId: paying.id })).key,
    operator: test.key,
  };
});
after(async () => {
  await database?.destroy();
  await test?.close();
  await upstream?.close();
});

it(`answers ${REQUESTS} fuzzed requests without a 5xx, every error in its route's shape (OpenAI's; Anthropic's on /v1/messages), /health answering throughout (seed ${SEED})`, async () => {
  const routes = registeredRoutes(test.server.app.server.printRoutes({ commonPrefix: false })).filter(
    (route) => (route.path.startsWith("/api/") || route.path.startsWith("/v1/")) && route.path !== "/v1/chat/completions",
  );
  assert.ok(routes.some((route) => route.path === "/api/keys" && route.method === "POST"), "the route table was read");
  const random = new Random(SEED);
  const port = Number(new URL(test.url).port);
  // Requests are generated in order from the seed, so a seed replays the same run.
  const planned: Array<{ raw: string } | { request: Request }> = Array.from({ length: REQUESTS }, (_, index) =>
    index % 40 === 20 ? { raw: random.pick(RAW_REQUESTS) } : { request: nextRequest(random, index, routes, keys, BODY_LIMIT) },
  );
  const started = performance.now();
  const failures = new Map<string, { count: number; example: string }>();
  const timeSpent = new Map<string, { count: number; ms: number }>();
  const statuses = new Map<number, number>();
  let next = 0;

  let probing = true;
  const health = { probes: 0, failures: 0, worstMs: 0 };
  const prober = (async () => {
    while (probing) {
      const probeStarted = performance.now();
      try {
        const response = await fetch(`${test.url}/health`, { signal: AbortSignal.timeout(5000) });
        await response.text();
        if (response.status !== 200) health.failures++;
      } catch {
        health.failures++;
      }
      health.probes++;
      health.worstMs = Math.max(health.worstMs, performance.now() - probeStarted);
      await delay(100);
    }
  })();

  const worker = async () => {
    while (next < planned.length && performance.now() - started < BUDGET_MS * 2) {
      const index = next++;
      const item = planned[index]!;
      let outcome: Outcome;
      const requestStarted = performance.now();
      try {
        outcome = "raw" in item ? await sendRaw(port, item.raw) : await send(test.url, item.request);
      } catch (error) {
        outcome = { status: 0, text: String(error), contentType: "" };
      }
      statuses.set(outcome.status, (statuses.get(outcome.status) ?? 0) + 1);
      const label = "raw" in item ? "raw" : item.request.label;
      const spent = timeSpent.get(label) ?? { count: 0, ms: 0 };
      timeSpent.set(label, { count: spent.count + 1, ms: spent.ms + performance.now() - requestStarted });
      const problem = problemWith(outcome, "raw" in item ? (/^\S+ (\S+)/.exec(item.raw)?.[1] ?? "") : item.request.path);
      if (problem === null) continue;
      // One example of each kind of failure (route, problem, status, code), and how often it came.
      const kind = `${problem} on ${label} → ${outcome.status} ${/"code":"([^"]*)"/.exec(outcome.text)?.[1] ?? ""}`;
      const known = failures.get(kind);
      if (known !== undefined) {
        known.count++;
        continue;
      }
      const described =
        "raw" in item
          ? `raw ${JSON.stringify(item.raw.slice(0, 120))}`
          : `${item.request.method} ${item.request.path.slice(0, 100)} headers ${JSON.stringify(item.request.headers).slice(0, 200)} body ${typeof item.request.body === "string" ? JSON.stringify(item.request.body.slice(0, 300)) : "bytes"}`;
      failures.set(kind, { count: 1, example: `#${index}: ${described} → ${outcome.text.slice(0, 300)}` });
    }
  };
  try {
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  } finally {
    probing = false;
    await prober;
  }
  const elapsedMs = performance.now() - started;

  const summary = `seed ${SEED}: ${next} requests in ${Math.round(elapsedMs)} ms; statuses ${JSON.stringify(Object.fromEntries([...statuses].sort((a, b) => a[0] - b[0])))}; /health ${health.probes} probes, ${health.failures} failed, slowest ${Math.round(health.worstMs)} ms`;
  const slowest = [...timeSpent]
    .sort((a, b) => b[1].ms - a[1].ms)
    .slice(0, 5)
    .map(([label, { count, ms }]) => `${label}: ${count} in ${Math.round(ms)} ms`);
  process.stderr.write(`fuzz: ${summary}\nfuzz: most time (summed over workers): ${slowest.join("; ")}\n`);
  const report = [...failures].map(([kind, { count, example }]) => `${kind} (×${count}), e.g. ${example}`);
  assert.deepEqual(report, [], `${summary} (replay with TURNPIKE_FUZZ_SEED=${SEED})`);
  assert.equal(next, REQUESTS, `only ${next} of ${REQUESTS} requests were sent in time; ${summary}`);
  assert.equal(health.failures, 0, `/health failed while fuzzing; ${summary}`);
  // Whatever vendor fields came, the upstream model's one member never counted a failure.
  const upstreamModel = test.server.catalog.get(UPSTREAM_MODEL).engine;
  assert.deepEqual(
    upstreamModel.members?.().map((member) => member.healthy),
    [true],
    `the upstream member was marked down; ${summary}`,
  );
  const downs = test.logs().filter((line) => typeof line.msg === "string" && /^upstream .* is down/.test(line.msg));
  assert.deepEqual(downs, [], `the upstream member went down while fuzzing; ${summary}`);
  assert.ok(elapsedMs < BUDGET_MS, `the run took longer than ${BUDGET_MS} ms; ${summary}`);
});

it("answers bodies nested too deep on every route, small and large, with or without a key, never a 5xx (issue 19 row 1)", async () => {
  const routes = registeredRoutes(test.server.app.server.printRoutes({ commonPrefix: false })).filter(
    (route) => (route.path.startsWith("/api/") || route.path.startsWith("/v1/")) && route.method !== "GET" && route.method !== "DELETE",
  );
  // Under the main thread's threshold (parsed there) and over it (parsed in the worker), and a URL without a route.
  const bodies = [`{"a":${"[".repeat(5000)}${"]".repeat(5000)}}`, "[".repeat(150_000) + "]".repeat(150_000), "{\"a\":".repeat(60_000) + "1" + "}".repeat(60_000)];
  const targets = [...routes, { method: "POST", path: "/nope" }, { method: "PUT", path: "/v1/nope" }];
  const problems: string[] = [];
  for (const route of targets) {
    for (const body of bodies) {
      for (const authorization of [`Bearer ${keys.credit}`, `Bearer ${keys.operator}`, undefined]) {
        const request: Request = { method: route.method, path: route.path.replace(/:[a-zA-Z]+/g, "x").replace(/\*$/, MODEL), headers: { "content-type": "application/json", ...(authorization === undefined ? {} : { authorization }) }, body, label: "deep" };
        let outcome: Outcome;
        try {
          outcome = await send(test.url, request);
        } catch (error) {
          // A URL without a route may close the connection while a large body is still being sent.
          if (route.path.includes("nope")) continue;
          outcome = { status: 0, text: String(error), contentType: "" };
        }
        const problem = problemWith(outcome, request.path);
        if (problem !== null) problems.push(`${route.method} ${request.path} (${body.length} bytes, ${authorization === undefined ? "no key" : "a key"}): ${problem} ${outcome.text.slice(0, 200)}`);
        // A body the route parses is refused for its depth, whatever else is wrong with it (Anthropic's body has no code: its message says it).
        const tooDeep = /"code":"json_too_deep"/.test(outcome.text) || (request.path.startsWith("/v1/messages") && /more than 128 levels deep/.test(outcome.text));
        if (outcome.status === 400 && !tooDeep) problems.push(`${route.method} ${request.path}: a 400 other than json_too_deep: ${outcome.text.slice(0, 200)}`);
      }
    }
  }
  assert.deepEqual(problems, []);
  const health = await fetch(`${test.url}/health`);
  assert.equal(health.status, 200);
});
