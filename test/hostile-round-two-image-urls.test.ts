/**
 * Issue 19 row 8: image URLs reach a vision upstream only when they are data URLs or https URLs
 * whose hosts are public. A key holder cannot make the upstream fetch the cloud metadata service,
 * loopback or private addresses in any notation: such a request is a 400 `image_url_not_allowed`
 * naming the part, and nothing reaches the upstream. Public host names cannot be resolved here
 * (no internet), so the server gets a fake resolver for `*.example.com`; `localhost` goes to the
 * system's real resolver.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import { FaultUpstream } from "./helpers/fault-upstream.ts";
import { postJson, startTestServer, temporaryDirectory, type TestServer } from "./helpers/server.ts";
import { systemResolver, type HostResolver } from "../src/http/image-urls/image-url-guard.ts";

type Message = OpenAI.Chat.Completions.ChatCompletionMessageParam;

/** A 1×1 PNG. */
const png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/** Public names answer public addresses, the others what an attacker's DNS would; anything else is really looked up. */
const resolver: HostResolver = async (hostname) => {
  const table: Record<string, string[]> = {
    "images.example.com": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
    "metadata.example.com": ["169.254.169.254"],
    "rebind.example.com": ["93.184.216.34", "127.0.0.1"],
    "minio.internal": ["10.0.0.5"],
  };
  return table[hostname] ?? systemResolver(hostname);
};

const withImage = (url: string): Message[] => [
  { role: "system", content: "Describe pictures." },
  {
    role: "user",
    content: [
      { type: "text", text: "What is in this picture?" },
      { type: "image_url", image_url: { url, detail: "low" } },
    ],
  },
];

/** Starts a gateway in front of `upstream` serving the vision model `eyes`. */
async function startGateway(upstream: FaultUpstream, configDirectory: string, flags: Record<string, string> = {}): Promise<TestServer> {
  const configFile = path.join(configDirectory, `turnpike-${Object.keys(flags).length}.json`);
  fs.writeFileSync(
    configFile,
    JSON.stringify({ models: [{ id: "eyes", upstream: { kind: "vllm", urls: [upstream.baseUrl], health_interval: 60 }, input_modalities: ["text", "image"] }] }),
  );
  return startTestServer({ configFile, flags, imageHostResolver: resolver });
}

/** The image URL of the upstream's last request. */
function lastUpstreamImage(upstream: FaultUpstream): string {
  const messages = upstream.requests.at(-1)!.body.messages as Array<{ content: unknown }>;
  const parts = messages[1]!.content as Array<{ type: string; image_url?: { url: string } }>;
  return parts.find((part) => part.type === "image_url")!.image_url!.url;
}

describe("image URLs under the default policy (public https)", () => {
  let upstream: FaultUpstream;
  let gateway: TestServer;
  const configDirectory = temporaryDirectory("turnpike-image-urls-");

  before(async () => {
    upstream = await FaultUpstream.start({ model: "eyes", maxModelLen: 4096 });
    gateway = await startGateway(upstream, configDirectory);
  });
  after(async () => {
    await gateway?.close();
    await upstream?.close();
    fs.rmSync(configDirectory, { recursive: true, force: true });
  });

  const refusedUrls = [
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "https://169.254.169.254/latest/meta-data/",
    "https://2852039166/latest/meta-data/",
    "https://0xA9FEA9FE/",
    "https://0251.0376.0251.0376/",
    "https://[::ffff:169.254.169.254]/",
    "https://[::ffff:a9fe:a9fe]/",
    "https://127.0.0.1/",
    "https://[::1]/",
    "https://10.0.0.1/x.png",
    "https://192.168.1.1/x.png",
    "https://172.16.0.1/x.png",
    "https://100.64.0.1/x.png",
    "https://[fd00::1]/x.png",
    "https://[fe80::1]/x.png",
    "https://0.0.0.0/x.png",
    "https://localhost/cat.png",
    "https://localhost:8080/cat.png",
    "https://metadata.example.com/cat.png",
    "https://rebind.example.com/cat.png",
    "https://minio.internal/cat.png",
    "http://images.example.com/cat.png",
  ];

  for (const stream of [false, true]) {
    it(`refuses private, loopback, link-local and plain-http image URLs with 400 image_url_not_allowed naming the part, before the upstream sees them (${stream ? "streaming" : "non-streaming"})`, async () => {
      const before = upstream.requests.length;
      for (const url of refusedUrls) {
        const error = await gateway.client.chat.completions.create({ model: "eyes", messages: withImage(url), max_tokens: 4, stream }).then(
          () => assert.fail(`expected ${url} to be refused`),
          (caught: unknown) => caught,
        );
        assert.ok(error instanceof OpenAI.BadRequestError, `${url}: ${String(error)}`);
        assert.equal(error.code, "image_url_not_allowed", url);
        assert.equal(error.type, "invalid_request_error", url);
        assert.equal(error.param, "messages[1].content[1].image_url.url", url);
        assert.match(error.message, /Image URL refused in 'messages\[1\]\.content\[1\]\.image_url\.url'/, url);
      }
      assert.equal(upstream.requests.length, before, "no refused URL reached the upstream");
    });
  }

  it("answers the OpenAI error body, and refuses localhost as its real lookup answers (loopback)", async () => {
    assert.ok((await systemResolver("localhost")).length > 0, "this machine resolves localhost");
    const response = await postJson(`${gateway.baseURL}/chat/completions`, { model: "eyes", messages: withImage("https://localhost/cat.png") }, { authorization: `Bearer ${gateway.key}` });
    assert.equal(response.status, 400);
    assert.deepEqual(Object.keys(response.body.error).sort(), ["code", "message", "param", "type"]);
    assert.equal(response.body.error.code, "image_url_not_allowed");
    assert.match(response.body.error.message, /host 'localhost' does not resolve to public addresses only/);
  });

  it("refuses non-http(s) URLs naming the part", async () => {
    const before = upstream.requests.length;
    for (const url of ["file:///etc/passwd", "gopher://127.0.0.1:6379/_INFO", "ftp://images.example.com/cat.png"]) {
      const response = await postJson(`${gateway.baseURL}/chat/completions`, { model: "eyes", messages: withImage(url) }, { authorization: `Bearer ${gateway.key}` });
      assert.equal(response.status, 400, url);
      assert.equal(response.body.error.code, "invalid_image_url", url);
      assert.match(response.body.error.param, /^messages\[1\]\.content\[1\]/, url);
    }
    assert.equal(upstream.requests.length, before);
  });

  it("names the first refused part when a request holds several images", async () => {
    const response = await postJson(
      `${gateway.baseURL}/chat/completions`,
      {
        model: "eyes",
        messages: [
          { role: "user", content: [{ type: "image_url", image_url: { url: "https://images.example.com/a.png" } }] },
          { role: "assistant", content: "A cat." },
          { role: "user", content: [{ type: "text", text: "And these?" }, { type: "image_url", image_url: { url: png } }, { type: "image_url", image_url: { url: "https://metadata.example.com/b.png" } }] },
        ],
      },
      { authorization: `Bearer ${gateway.key}` },
    );
    assert.equal(response.status, 400);
    assert.equal(response.body.error.param, "messages[2].content[2].image_url.url");
  });

  for (const stream of [false, true]) {
    it(`passes data URLs and public https URLs to the upstream as sent (${stream ? "streaming" : "non-streaming"})`, async () => {
      for (const url of [png, "https://images.example.com/cat.png?size=large", "https://93.184.216.34/cat.png", "https://[2606:4700::1111]/cat.png"]) {
        const before = upstream.requests.length;
        if (stream) {
          const chunks = await gateway.client.chat.completions.create({ model: "eyes", messages: withImage(url), max_tokens: 4, stream: true });
          let text = "";
          for await (const chunk of chunks) text += chunk.choices[0]?.delta.content ?? "";
          assert.equal(text, "Hello there!");
        } else {
          const completion = await gateway.client.chat.completions.create({ model: "eyes", messages: withImage(url), max_tokens: 4 });
          assert.equal(completion.choices[0]!.message.content, "Hello there!");
        }
        assert.equal(upstream.requests.length, before + 1, url.slice(0, 40));
        assert.equal(lastUpstreamImage(upstream), url);
      }
    });
  }
});

describe("image URLs under an operator's policy", () => {
  let upstream: FaultUpstream;
  let gateway: TestServer;
  const configDirectory = temporaryDirectory("turnpike-image-urls-");

  before(async () => {
    upstream = await FaultUpstream.start({ model: "eyes", maxModelLen: 4096 });
    gateway = await startGateway(upstream, configDirectory, { image_urls: "none", image_url_hosts: "minio.internal" });
  });
  after(async () => {
    await gateway?.close();
    await upstream?.close();
    fs.rmSync(configDirectory, { recursive: true, force: true });
  });

  it("--image-urls none takes data URLs and the allow-listed hosts only", async () => {
    const before = upstream.requests.length;
    const error = await gateway.client.chat.completions.create({ model: "eyes", messages: withImage("https://images.example.com/cat.png"), max_tokens: 4 }).then(
      () => assert.fail("expected a 400"),
      (caught: unknown) => caught,
    );
    assert.ok(error instanceof OpenAI.BadRequestError, String(error));
    assert.equal(error.code, "image_url_not_allowed");
    assert.match(error.message, /data URLs only/);
    assert.equal(upstream.requests.length, before);

    await gateway.client.chat.completions.create({ model: "eyes", messages: withImage(png), max_tokens: 4 });
    assert.equal(lastUpstreamImage(upstream), png);
    // The operator's own image store, private address and plain http included.
    await gateway.client.chat.completions.create({ model: "eyes", messages: withImage("http://minio.internal:9000/bucket/cat.png"), max_tokens: 4 });
    assert.equal(lastUpstreamImage(upstream), "http://minio.internal:9000/bucket/cat.png");
    assert.equal(upstream.requests.length, before + 2);
  });
});
