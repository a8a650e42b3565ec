/**
 * A model entry's `chat_template_kwargs` declaration (issue 19 row 3): the keys and JSON types
 * requests may pass, on upstream models whose requests may pass `chat_template_kwargs` at all.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { modelEntrySchema } from "./model-entry.ts";

const upstream = { urls: ["http://127.0.0.1:8000/v1"] };

describe("a model entry's chat_template_kwargs", () => {
  it("takes declared keys with their JSON types on an upstream model", () => {
    const entry = modelEntrySchema.parse({ id: "qwen3", upstream, chat_template_kwargs: { enable_thinking: "boolean", budget: "integer" } });
    assert.deepEqual(entry.chat_template_kwargs, { enable_thinking: "boolean", budget: "integer" });
  });

  it("refuses an unknown type, a key that is no template variable, an embedded model, and a model whose requests cannot pass the kwargs", () => {
    const refused = (entry: unknown, path: RegExp) => {
      const result = modelEntrySchema.safeParse(entry);
      assert.equal(result.success, false);
      assert.match(result.error!.issues.map((issue) => issue.path.join(".")).join(" "), path);
    };
    refused({ id: "m", upstream, chat_template_kwargs: { enable_thinking: "bool" } }, /chat_template_kwargs\.enable_thinking/);
    refused({ id: "m", upstream, chat_template_kwargs: { "not a name": "string" } }, /chat_template_kwargs/);
    refused({ id: "m", path: "/models/m.gguf", chat_template_kwargs: { enable_thinking: "boolean" } }, /chat_template_kwargs/);
    refused({ id: "m", upstream, vendor_fields: ["top_k"], chat_template_kwargs: { enable_thinking: "boolean" } }, /chat_template_kwargs/);
  });
});
