import { test } from "node:test";
import assert from "node:assert/strict";
import type { GenerationRequest } from "../engine.ts";
import { affinityKey } from "./affinity.ts";

const request = (messages: GenerationRequest["messages"], tools?: GenerationRequest["tools"]): GenerationRequest => ({
  messages,
  sampling: { temperature: 1, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [] },
  choices: 1,
  ...(tools ? { tools } : {}),
});

test("requests that begin alike share a key, whatever follows", () => {
  const start = [
    { role: "system" as const, content: "You are terse." },
    { role: "user" as const, content: "Hi" },
  ];
  const a = affinityKey(request([...start, { role: "assistant", content: "Hello" }, { role: "user", content: "More" }]));
  const b = affinityKey(request(start));
  assert.equal(a, b);
  assert.match(a, /^[0-9a-f]{16}$/);
});

test("a different system prompt, first message or tool set changes the key", () => {
  const base = affinityKey(request([{ role: "system", content: "A" }, { role: "user", content: "Hi" }]));
  assert.notEqual(base, affinityKey(request([{ role: "system", content: "B" }, { role: "user", content: "Hi" }])));
  assert.notEqual(base, affinityKey(request([{ role: "system", content: "A" }, { role: "user", content: "Yo" }])));
  assert.notEqual(base, affinityKey(request([{ role: "system", content: "A" }, { role: "user", content: "Hi" }], [{ name: "f" }])));
});

test("a client's own cache key (prompt_cache_key) decides the key, whatever the prompt", () => {
  const keyed = (content: string) => affinityKey({ ...request([{ role: "user", content }]), affinityKey: "conversation-42" });
  assert.equal(keyed("Hi"), keyed("Something else entirely"));
  assert.match(keyed("Hi"), /^[0-9a-f]{16}$/);
  assert.notEqual(keyed("Hi"), affinityKey({ ...request([{ role: "user", content: "Hi" }]), affinityKey: "conversation-43" }));
  assert.notEqual(keyed("Hi"), affinityKey(request([{ role: "user", content: "Hi" }])));
});
