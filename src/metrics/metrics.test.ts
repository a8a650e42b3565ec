import { test } from "node:test";
import assert from "node:assert/strict";
import { Metrics } from "./metrics.ts";

/** The value of one series in the registry's exposition text, or undefined when it is not there. */
async function series(metrics: Metrics, line: RegExp): Promise<number | undefined> {
  const text = await metrics.registry.metrics();
  const found = text.split("\n").find((entry) => line.test(entry));
  return found === undefined ? undefined : Number(found.slice(found.lastIndexOf(" ") + 1));
}

test("per-request counts reach each scrape once: tallied between reads, summed across them, by label set", async () => {
  const metrics = new Metrics({ rateLimiterDegraded: () => false });
  metrics.countHttp("POST", "/v1/chat/completions", 200, 0.01);
  metrics.countHttp("POST", "/v1/chat/completions", 200, 0.02);
  metrics.countHttp("POST", "/v1/chat/completions", 429, 0.001);
  metrics.countCompletion("tiny", "stop", { promptTokens: 12, cachedPromptTokens: 0, completionTokens: 9 });
  metrics.countUpstream("tiny", "a", "ok");
  const ok = /^turnpike_http_requests_total\{method="POST",route="\/v1\/chat\/completions",status="200"\}/;
  const limited = /^turnpike_http_requests_total\{method="POST",route="\/v1\/chat\/completions",status="429"\}/;
  const completionTokens = /^turnpike_tokens_total\{model="tiny",kind="completion"\}/;
  assert.equal(await series(metrics, ok), 2);
  assert.equal(await series(metrics, limited), 1);
  assert.equal(await series(metrics, completionTokens), 9);
  assert.equal(await series(metrics, /^turnpike_chat_completions_total\{model="tiny",finish_reason="stop"\}/), 1);
  assert.equal(await series(metrics, /^turnpike_upstream_requests_total\{model="tiny",member="a",outcome="ok"\}/), 1);
  // A second scrape with nothing new reads the same; counts after it add to what was read.
  assert.equal(await series(metrics, ok), 2);
  metrics.countHttp("POST", "/v1/chat/completions", 200, 0.01);
  metrics.countCompletion("tiny", "stop", { promptTokens: 1, cachedPromptTokens: 0, completionTokens: 5 });
  assert.equal(await series(metrics, ok), 3);
  assert.equal(await series(metrics, completionTokens), 14);
  // The counter's own read (prom-client's get()) sees them too.
  const values = (await metrics.httpRequests.get()).values;
  assert.equal(values.find((value) => value.labels.status === "200")?.value, 3);
});

test("a count that is not a finite number ≥ 0 is refused where it is made, as prom-client refuses it", () => {
  const metrics = new Metrics({ rateLimiterDegraded: () => false });
  assert.throws(() => metrics.countTokens("tiny", "prompt", -1), TypeError);
  assert.throws(() => metrics.countTokens("tiny", "prompt", Number.NaN), TypeError);
  assert.throws(() => metrics.countTokens("tiny", "prompt", Infinity), TypeError);
});
