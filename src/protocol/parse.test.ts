/**
 * parseWithSchema with the chat completion request schema: every refusal is a 400
 * InvalidRequestError whose `param` points at the offending field, as OpenAI reports it.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { chatCompletionRequestSchema } from "./chat-completions/request.ts";
import { InvalidRequestError } from "./errors.ts";
import { formatParamPath, parseWithSchema } from "./parse.ts";

const valid = { model: "tiny", messages: [{ role: "user", content: "Hi" }] };

/** Asserts a 400 InvalidRequestError with `param`, whose message names the param. */
function assertRefused(body: unknown, param: string | null, message?: RegExp): InvalidRequestError {
  let caught: unknown;
  try {
    parseWithSchema(chatCompletionRequestSchema, body);
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof InvalidRequestError, `expected an InvalidRequestError, got ${String(caught)}`);
  assert.equal(caught.status, 400);
  assert.equal(caught.type, "invalid_request_error");
  assert.equal(caught.param, param);
  if (param !== null) assert.ok(caught.message.includes(`'${param}'`), `${JSON.stringify(caught.message)} names ${param}`);
  if (message !== undefined) assert.match(caught.message, message);
  return caught;
}

describe("formatParamPath", () => {
  it("writes array indexes in brackets and keys after dots", () => {
    assert.equal(formatParamPath(["messages", 0, "content"]), "messages[0].content");
    assert.equal(formatParamPath(["messages", 2, "content", 1, "image_url", "url"]), "messages[2].content[1].image_url.url");
  });

  it("writes a single key as it is", () => {
    assert.equal(formatParamPath(["temperature"]), "temperature");
  });

  it("writes consecutive indexes as consecutive brackets", () => {
    assert.equal(formatParamPath(["stop", 0, 1]), "stop[0][1]");
  });

  it("returns null for the empty path", () => {
    assert.equal(formatParamPath([]), null);
  });
});

describe("parseWithSchema with the chat completion request", () => {
  it("accepts a minimal request", () => {
    const request = parseWithSchema(chatCompletionRequestSchema, valid);
    assert.equal(request.model, "tiny");
    assert.deepEqual(request.messages, [{ role: "user", content: "Hi" }]);
  });

  it("drops fields it does not know", () => {
    const request = parseWithSchema(chatCompletionRequestSchema, {
      ...valid,
      some_future_field: { nested: true },
      messages: [{ role: "user", content: "Hi", extra: 1 }],
    });
    assert.ok(!("some_future_field" in request));
    assert.deepEqual(request.messages[0], { role: "user", content: "Hi" });
  });

  it("accepts null for optional fields", () => {
    const request = parseWithSchema(chatCompletionRequestSchema, {
      ...valid,
      temperature: null,
      top_p: null,
      stop: null,
      max_tokens: null,
      max_completion_tokens: null,
      seed: null,
      stream: null,
      stream_options: null,
      user: null,
      frequency_penalty: null,
      presence_penalty: null,
      messages: [{ role: "assistant", content: null, name: null }, { role: "user", content: "Hi", name: null }],
    });
    assert.equal(request.temperature, null);
    assert.equal(request.stop, null);
    assert.equal(request.messages.length, 2);
  });

  it("accepts content given as text parts and a stop given as a list", () => {
    const request = parseWithSchema(chatCompletionRequestSchema, {
      ...valid,
      messages: [{ role: "user", content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] }],
      stop: ["\n", "END"],
    });
    assert.deepEqual(request.stop, ["\n", "END"]);
  });

  it("refuses a body that is not an object, with param null", () => {
    for (const body of [null, 42, "text", [1, 2], true, undefined]) {
      const error = assertRefused(body, null);
      assert.match(error.message, /JSON object/);
    }
  });

  it("refuses a missing model", () => {
    assertRefused({ messages: valid.messages }, "model", /required/);
  });

  it("refuses an empty model", () => {
    assertRefused({ ...valid, model: "" }, "model");
  });

  it("refuses missing messages", () => {
    assertRefused({ model: "tiny" }, "messages", /required/);
  });

  it("refuses an empty list of messages", () => {
    assertRefused({ ...valid, messages: [] }, "messages", /at least 1 item/);
  });

  it("refuses content of the wrong type in the second message", () => {
    assertRefused({ ...valid, messages: [{ role: "system", content: "Be brief." }, { role: "user", content: 5 }] }, "messages[1].content");
  });

  it("refuses an unknown role", () => {
    assertRefused({ ...valid, messages: [{ role: "wizard", content: "x" }] }, "messages[0].role", /'role'/);
  });

  it("refuses a tool message without tool_call_id", () => {
    assertRefused({ ...valid, messages: [{ role: "tool", content: "42" }] }, "messages[0].tool_call_id", /required/);
  });

  it("refuses a temperature above 2, saying the limit and the value", () => {
    assertRefused({ ...valid, temperature: 3 }, "temperature", /at most 2, got 3/);
  });

  it("refuses a temperature below 0", () => {
    assertRefused({ ...valid, temperature: -0.5 }, "temperature", /at least 0/);
  });

  it("refuses a temperature given as a string", () => {
    assertRefused({ ...valid, temperature: "hot" }, "temperature", /expected number/);
  });

  it("describes the value it got in plain words", () => {
    assertRefused({ ...valid, temperature: "hot" }, "temperature", /got "hot"/);
    assertRefused({ ...valid, temperature: { hot: true } }, "temperature", /got an object\./);
    assertRefused({ ...valid, temperature: [1] }, "temperature", /got an array\./);
    assertRefused({ ...valid, stream: 1 }, "stream", /got 1\./);
  });

  it("refuses a top_p above 1", () => {
    assertRefused({ ...valid, top_p: 1.5 }, "top_p");
  });

  it("refuses more than four stop sequences", () => {
    assertRefused({ ...valid, stop: ["a", "b", "c", "d", "e"] }, "stop", /up to 4/);
  });

  it("refuses a stop that is neither a string nor a list of strings", () => {
    assertRefused({ ...valid, stop: 7 }, "stop");
  });

  it("refuses a max_tokens below 1 or not an integer", () => {
    assertRefused({ ...valid, max_tokens: 0 }, "max_tokens");
    assertRefused({ ...valid, max_tokens: 2.5 }, "max_tokens");
  });

  it("refuses a stream flag that is not a boolean", () => {
    assertRefused({ ...valid, stream: "yes" }, "stream");
  });
});
