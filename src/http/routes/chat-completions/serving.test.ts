/**
 * toGenerationRequest: how a validated API request becomes the engine's neutral request
 * (sampling defaults, stop lists, token limits, roles, flattened content).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { chatCompletionRequestSchema } from "../../../protocol/chat-completions/request.ts";
import { InvalidRequestError, UnsupportedParameterError } from "../../../protocol/errors.ts";
import { parseWithSchema } from "../../../protocol/parse.ts";
import { parseChatCompletion } from "./dialect.ts";
import { toGenerationRequest, type ModelInputs } from "../../../protocol/chat-completions/to-generation.ts";
import { Catalog } from "../../../catalog/catalog.ts";
import { FakeEngine } from "../../../engines/fake/fake-engine.ts";

const hello = [{ role: "user", content: "Hi" }];

/** Validates `fields` (with a model and messages unless given) and maps them. */
function generationFor(fields: Record<string, unknown>, inputs?: ModelInputs) {
  return toGenerationRequest(parseWithSchema(chatCompletionRequestSchema, { model: "tiny", messages: hello, ...fields }), inputs);
}

function assertInvalid(fields: Record<string, unknown>, code: string, param: string, inputs?: ModelInputs): void {
  assert.throws(
    () => generationFor(fields, inputs),
    (error: unknown) => {
      assert.ok(error instanceof InvalidRequestError, `expected InvalidRequestError, got ${String(error)}`);
      assert.equal(error.status, 400);
      assert.equal(error.code, code);
      assert.equal(error.param, param);
      return true;
    },
  );
}

/** A 1×1 PNG. */
const pngBase64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
const imageMessage = (url: string) => [{ role: "user", content: [{ type: "text", text: "What is it?" }, { type: "image_url", image_url: { url, detail: "low" } }] }];

function assertUnsupported(fields: Record<string, unknown>, param: string): void {
  assert.throws(
    () => generationFor(fields),
    (error: unknown) => {
      assert.ok(error instanceof UnsupportedParameterError, `expected UnsupportedParameterError, got ${String(error)}`);
      assert.equal(error.status, 400);
      assert.equal(error.code, "unsupported_parameter");
      assert.equal(error.param, param);
      return true;
    },
  );
}

describe("toGenerationRequest", () => {
  it("uses OpenAI's sampling defaults when none are given", () => {
    const request = generationFor({});
    assert.deepEqual(request.sampling, {
      temperature: 1,
      topP: 1,
      seed: undefined,
      frequencyPenalty: 0,
      presencePenalty: 0,
      stop: [],
      logitBias: undefined,
    });
    assert.equal(request.maxTokens, undefined);
  });

  it("uses the defaults for fields sent as null", () => {
    const request = generationFor({
      temperature: null,
      top_p: null,
      seed: null,
      frequency_penalty: null,
      presence_penalty: null,
      stop: null,
      max_tokens: null,
      max_completion_tokens: null,
    });
    assert.equal(request.sampling.temperature, 1);
    assert.equal(request.sampling.topP, 1);
    assert.equal(request.sampling.seed, undefined);
    assert.equal(request.sampling.frequencyPenalty, 0);
    assert.equal(request.sampling.presencePenalty, 0);
    assert.deepEqual(request.sampling.stop, []);
    assert.equal(request.maxTokens, undefined);
  });

  it("passes given sampling values through, zero temperature included", () => {
    const request = generationFor({ temperature: 0, top_p: 0.5, seed: 42, frequency_penalty: -1, presence_penalty: 1.5 });
    assert.deepEqual(request.sampling, {
      temperature: 0,
      topP: 0.5,
      seed: 42,
      frequencyPenalty: -1,
      presencePenalty: 1.5,
      stop: [],
      logitBias: undefined,
    });
  });

  it("turns a stop string into a list of one", () => {
    assert.deepEqual(generationFor({ stop: "\n\n" }).sampling.stop, ["\n\n"]);
  });

  it("keeps a stop list as it is", () => {
    assert.deepEqual(generationFor({ stop: ["END", "User:"] }).sampling.stop, ["END", "User:"]);
  });

  it("drops empty stop strings", () => {
    assert.deepEqual(generationFor({ stop: "" }).sampling.stop, []);
    assert.deepEqual(generationFor({ stop: ["", "END"] }).sampling.stop, ["END"]);
  });

  it("takes max_tokens or max_completion_tokens, whichever is given", () => {
    assert.equal(generationFor({ max_tokens: 30 }).maxTokens, 30);
    assert.equal(generationFor({ max_completion_tokens: 40 }).maxTokens, 40);
  });

  it("takes the smaller of max_tokens and max_completion_tokens", () => {
    assert.equal(generationFor({ max_tokens: 100, max_completion_tokens: 50 }).maxTokens, 50);
    assert.equal(generationFor({ max_tokens: 20, max_completion_tokens: 50 }).maxTokens, 20);
  });

  it("sends a developer message as a system message", () => {
    const request = generationFor({
      messages: [
        { role: "developer", content: "Answer in French." },
        { role: "user", content: "Hi" },
      ],
    });
    assert.deepEqual(request.messages, [
      { role: "system", content: "Answer in French.", name: undefined },
      { role: "user", content: "Hi", name: undefined },
    ]);
  });

  it("keeps the roles, names and tool call ids of the other messages", () => {
    const request = generationFor({
      messages: [
        { role: "system", content: "Be brief.", name: "rules" },
        { role: "user", content: "Hi", name: "ana" },
        { role: "assistant", content: "Hello.", name: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: "{}" } }] },
        { role: "tool", content: "42", tool_call_id: "call_1" },
      ],
    });
    assert.deepEqual(request.messages, [
      { role: "system", content: "Be brief.", name: "rules" },
      { role: "user", content: "Hi", name: "ana" },
      { role: "assistant", content: "Hello.", name: undefined, toolCalls: [{ id: "call_1", name: "f", arguments: "{}" }] },
      { role: "tool", content: "42", toolCallId: "call_1" },
    ]);
  });

  it("concatenates text content parts without separators", () => {
    const request = generationFor({
      messages: [
        { role: "system", content: [{ type: "text", text: "Be " }, { type: "text", text: "brief." }] },
        { role: "user", content: [{ type: "text", text: "Hello" }, { type: "text", text: ", there" }] },
      ],
    });
    assert.equal(request.messages[0]!.content, "Be brief.");
    assert.equal(request.messages[1]!.content, "Hello, there");
  });

  it("reads an assistant refusal part as text and null content as empty", () => {
    const request = generationFor({
      messages: [
        { role: "user", content: "Do it." },
        { role: "assistant", content: [{ type: "refusal", refusal: "I can't." }] },
        { role: "assistant", content: null },
        { role: "user", content: "Fine." },
      ],
    });
    assert.equal(request.messages[1]!.content, "I can't.");
    assert.equal(request.messages[2]!.content, "");
  });

  it("refuses an image part for a text-only model, naming the part", () => {
    assertInvalid(
      { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "https://example.com/cat.png" } }] }] },
      "model_does_not_support_images",
      "messages[0].content[0]",
    );
  });

  it("names the exact message and part of a refused image", () => {
    assertInvalid(
      {
        messages: [
          { role: "system", content: "Describe images." },
          {
            role: "user",
            content: [
              { type: "text", text: "What is this?" },
              { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } },
            ],
          },
        ],
      },
      "model_does_not_support_images",
      "messages[1].content[1]",
    );
  });

  it("passes images through to a model that reads them: data URLs and http(s) URLs", () => {
    const fromData = generationFor({ messages: imageMessage(`data:image/png;base64,${pngBase64}`) }, { images: true });
    assert.equal(fromData.messages[0]!.content, "What is it?");
    assert.deepEqual(fromData.messages[0]!.images, [{ url: `data:image/png;base64,${pngBase64}`, detail: "low" }]);
    const fromWeb = generationFor({ messages: imageMessage("https://example.com/cat.jpg") }, { images: true });
    assert.deepEqual(fromWeb.messages[0]!.images, [{ url: "https://example.com/cat.jpg", detail: "low" }]);
  });

  it("refuses malformed images for a model that reads them, naming the part", () => {
    const vision = { images: true };
    for (const url of [
      "data:image/png;base64,AAAA", // valid base64, not a PNG
      "data:image/png;base64,not base64!",
      "data:image/tiff;base64,AAAA",
      "data:image/png,rawbytes",
      "ftp://example.com/cat.png",
      "cat.png",
    ]) {
      assertInvalid({ messages: imageMessage(url) }, "invalid_image_url", "messages[0].content[1]", vision);
    }
  });

  it("refuses audio and file parts, naming the part", () => {
    assertUnsupported({ messages: [{ role: "user", content: [{ type: "input_audio", input_audio: { data: "AAAA", format: "wav" } }] }] }, "messages[0].content[0]");
    assertUnsupported({ messages: [{ role: "user", content: [{ type: "file", file: { file_id: "file_1" } }] }] }, "messages[0].content[0]");
  });

  it("refuses a tool message that answers no earlier call, naming it", () => {
    assert.throws(
      () => generationFor({ messages: [{ role: "user", content: "Hi" }, { role: "tool", content: "42", tool_call_id: "call_9" }] }),
      (error: unknown) => error instanceof InvalidRequestError && error.param === "messages[1].tool_call_id",
    );
  });

  it("maps response_format and tools to the engine's neutral form", () => {
    const request = generationFor({
      response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object" }, strict: true } },
      tools: [{ type: "function", function: { name: "f", description: "F.", parameters: { type: "object" } } }, { type: "function", function: { name: "g" } }],
      tool_choice: { type: "function", function: { name: "g" } },
      parallel_tool_calls: false,
    });
    assert.deepEqual(request.responseFormat, { type: "json_schema", name: "x", schema: { type: "object" }, strict: true });
    assert.deepEqual(request.tools, [{ name: "f", description: "F.", parameters: { type: "object" } }, { name: "g" }]);
    assert.deepEqual(request.toolChoice, { name: "g" });
    assert.equal(request.parallelToolCalls, false);
    assert.equal(generationFor({ response_format: { type: "text" } }).responseFormat, undefined);
    assert.deepEqual(generationFor({ response_format: { type: "json_object" } }).responseFormat, { type: "json_object" });
  });

  it("refuses a tool_choice that names no given tool, naming tool_choice", () => {
    assert.throws(
      () => generationFor({ tools: [{ type: "function", function: { name: "f" } }], tool_choice: { type: "function", function: { name: "h" } } }),
      (error: unknown) => error instanceof InvalidRequestError && error.param === "tool_choice",
    );
  });

  it("asks for one choice unless n is given", () => {
    assert.equal(generationFor({}).choices, 1);
    assert.equal(generationFor({ n: 3 }).choices, 3);
  });

  it("asks for log probabilities only with logprobs true, with top_logprobs alternatives", () => {
    assert.equal(generationFor({}).logprobs, undefined);
    assert.equal(generationFor({ logprobs: false }).logprobs, undefined);
    assert.deepEqual(generationFor({ logprobs: true }).logprobs, { top: 0 });
    assert.deepEqual(generationFor({ logprobs: true, top_logprobs: 5 }).logprobs, { top: 5 });
  });

  it("refuses top_logprobs without logprobs", () => {
    assertInvalid({ top_logprobs: 2 }, "invalid_request_error", "top_logprobs");
  });

  it("maps logit_bias to token ids, dropping zero biases", () => {
    const bias = generationFor({ logit_bias: { "50": -100, "7": 2.5, "9": 0 } }).sampling.logitBias;
    assert.deepEqual(new Map([...bias!.entries()].sort((a, b) => a[0] - b[0])), new Map([[7, 2.5], [50, -100]]));
    assert.equal(generationFor({ logit_bias: {} }).sampling.logitBias, undefined);
  });

  it("refuses logit_bias keys that are not token ids and biases outside -100..100", () => {
    assertInvalid({ logit_bias: { hello: 1 } }, "invalid_logit_bias", "logit_bias");
    assertInvalid({ logit_bias: { "-3": 1 } }, "invalid_logit_bias", "logit_bias");
    assertInvalid({ logit_bias: { "5": 101 } }, "invalid_logit_bias", "logit_bias");
    assertInvalid({ logit_bias: { "5": -100.5 } }, "invalid_logit_bias", "logit_bias");
  });
});

describe("parseChatCompletion: what a model supports", () => {
  const limited = new FakeEngine({ capabilities: { supportedParameters: ["max_tokens", "temperature", "stream"], vendorFields: ["top_k"] } });
  const catalog = new Catalog([
    {
      id: "narrow",
      ownedBy: "test",
      created: 0,
      engine: limited,
      configuredContextLength: 2048,
      pricing: { prompt: 0, cachedPrompt: 0, completion: 0 },
      outputModalities: ["text"],
    },
  ]);
  const parse = (fields: Record<string, unknown>) => parseChatCompletion(catalog, { model: "narrow", messages: hello, ...fields });

  it("refuses a parameter the model's engine would ignore, naming it", () => {
    for (const [param, value] of [["logprobs", true], ["n", 2], ["seed", 7], ["logit_bias", { "1": 5 }], ["stop", ["x"]], ["top_p", 0.5]] as const) {
      assert.throws(
        () => parse({ [param]: value }),
        (error: unknown) => error instanceof UnsupportedParameterError && error.param === param && error.message.includes("does not support"),
        param,
      );
    }
  });

  it("lets the neutral value of an unsupported parameter through (n: 1, logprobs: false, an empty stop list)", () => {
    assert.equal(parse({ n: 1, logprobs: false, stop: [], temperature: 0.2 }).request.choices, 1);
  });

  it("passes the vendor fields the model allows and refuses the others, naming them", () => {
    assert.deepEqual(parse({ top_k: 40 }).request.vendor, { top_k: 40 });
    assert.equal(parse({}).request.vendor, undefined);
    assert.throws(() => parse({ min_p: 0.1 }), (error: unknown) => error instanceof UnsupportedParameterError && error.param === "min_p");
  });

  it("keeps the content parts of a message with images in the order they were sent", () => {
    const vision = new Catalog([{ ...catalog.get("narrow"), id: "vision", engine: new FakeEngine({ capabilities: { inputModalities: ["text", "image"] } }) }]);
    const url = `data:image/png;base64,${pngBase64}`;
    const parsed = parseChatCompletion(vision, {
      model: "vision",
      messages: [{ role: "user", content: [{ type: "text", text: "Before" }, { type: "image_url", image_url: { url } }, { type: "text", text: "after" }] }],
    });
    assert.deepEqual(parsed.request.messages[0]!.parts, [{ type: "text", text: "Before" }, { type: "image", image: { url } }, { type: "text", text: "after" }]);
    assert.equal(parsed.request.messages[0]!.content, "Beforeafter");
  });
});
