/** ImageUrlGuard: each --image-urls policy, the allow-list, host lookups (any private address refuses), their bounds in time and count. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ApiError } from "../../protocol/errors.ts";
import { addressProblem } from "./address-class.ts";
import { IMAGE_HOSTS_PER_REQUEST, ImageUrlGuard, systemResolver, type HostResolver } from "./image-url-guard.ts";

const png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/** A resolver answering from a table; unknown names fail as DNS would (ENOTFOUND). */
function fakeResolver(table: Record<string, string[]>, calls: string[] = []): HostResolver {
  return async (hostname) => {
    calls.push(hostname);
    const addresses = table[hostname];
    if (addresses === undefined) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: "ENOTFOUND" });
    return addresses;
  };
}

const table = {
  "images.example.com": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
  "cdn.example.net": ["151.101.1.1"],
  "metadata.example.com": ["169.254.169.254"],
  "half-private.example.com": ["93.184.216.34", "10.0.0.7"],
  "mapped.example.com": ["::ffff:127.0.0.1"],
  "minio.internal": ["10.0.0.5"],
};

const parts = (...urls: string[]) => urls.map((url, index) => ({ url, param: `messages[0].content[${index}].image_url.url` }));

/** The refusal `check` throws, as the client will see it. */
async function refusal(guard: ImageUrlGuard, ...urls: string[]): Promise<ApiError> {
  const error = await guard.check(parts(...urls)).then(
    () => assert.fail(`expected ${urls.join(", ")} to be refused`),
    (caught: unknown) => caught,
  );
  assert.ok(error instanceof ApiError, String(error));
  assert.equal(error.status, 400);
  assert.equal(error.code, "image_url_not_allowed");
  return error;
}

describe("ImageUrlGuard", () => {
  it("public-https (the default) passes data URLs and https URLs whose hosts resolve to public addresses only", async () => {
    const calls: string[] = [];
    const guard = new ImageUrlGuard({ policy: "public-https", resolve: fakeResolver(table, calls) });
    await guard.check(parts(png, "https://images.example.com/cat.png", "https://cdn.example.net/a.jpg?size=1", "https://images.example.com/dog.png", "https://8.8.8.8/x.png", "https://[2606:4700::1111]/y.png"));
    // One lookup per name; none for literal addresses or data URLs.
    assert.deepEqual(calls.sort(), ["cdn.example.net", "images.example.com"]);
  });

  it("refuses plain http under public-https, naming the part", async () => {
    const guard = new ImageUrlGuard({ policy: "public-https", resolve: fakeResolver(table) });
    const error = await refusal(guard, png, "http://images.example.com/cat.png");
    assert.equal(error.param, "messages[0].content[1].image_url.url");
    assert.match(error.message, /plain http image URLs are not accepted; use https/);
  });

  it("refuses non-http(s) URLs", async () => {
    const guard = new ImageUrlGuard({ policy: "public", resolve: fakeResolver(table) });
    for (const url of ["ftp://images.example.com/cat.png", "file:///etc/passwd", "gopher://127.0.0.1:6379/_INFO"]) {
      assert.match((await refusal(guard, url)).message, /URLs are not accepted/, url);
    }
  });

  it("refuses literal private addresses in every notation, without a lookup", async () => {
    const calls: string[] = [];
    const guard = new ImageUrlGuard({ policy: "public", resolve: fakeResolver(table, calls) });
    for (const url of [
      "http://169.254.169.254/latest/meta-data/iam/",
      "http://2852039166/",
      "http://0xA9FEA9FE/",
      "http://0251.0376.0251.0376/",
      "http://[::ffff:169.254.169.254]/",
      "https://[fe80::1]/",
      "http://127.0.0.1:8080/admin",
      "http://127.1/",
      "http://0/",
      "http://[::]/",
      "http://[::1]/",
      "http://10.1.2.3/",
      "http://172.20.0.1/",
      "http://192.168.0.1/",
      "http://100.100.100.200/",
      "http://[fd00::1]/",
      "http://224.0.0.1/",
    ]) {
      const error = await refusal(guard, url);
      assert.match(error.message, /is an? (private|shared|loopback|link-local|unspecified|multicast).*image URLs must point to public hosts/, url);
    }
    assert.deepEqual(calls, []);
  });

  it("refuses a name when any of its addresses is not public, with one message for private and unresolvable names", async () => {
    const guard = new ImageUrlGuard({ policy: "public-https", resolve: fakeResolver(table) });
    const messages: string[] = [];
    for (const host of ["metadata.example.com", "half-private.example.com", "mapped.example.com", "no-such-host.example.com"]) {
      const error = await refusal(guard, "https://images.example.com/ok.png", `https://${host}/cat.png`);
      assert.equal(error.param, "messages[0].content[1].image_url.url");
      messages.push(error.message.replace(host, "HOST"));
    }
    // A client cannot tell an internal name from one that does not exist.
    assert.equal(new Set(messages).size, 1, messages.join("\n"));
    assert.match(messages[0]!, /does not resolve to public addresses only/);
  });

  it("names the first refused part in request order, and never echoes the URL's path or credentials", async () => {
    const guard = new ImageUrlGuard({ policy: "public-https", resolve: fakeResolver(table) });
    const error = await refusal(guard, "https://images.example.com/ok.png", "https://user:s3cret@metadata.example.com/token?sig=abc", "https://no-such-host.example.com/x.png");
    assert.equal(error.param, "messages[0].content[1].image_url.url");
    assert.doesNotMatch(error.message, /s3cret|token|sig=abc/);
  });

  it("refuses names that do not resolve within the lookup timeout", async () => {
    const guard = new ImageUrlGuard({ policy: "public-https", resolve: () => new Promise<string[]>(() => {}), lookupTimeoutMs: 50 });
    assert.match((await refusal(guard, "https://slow.example.com/cat.png")).message, /could not be resolved within 0.05 s/);
  });

  it("answers 503 image_lookup_busy with retry-after when other requests' slow lookups hold every lookup slot past the timeout", async () => {
    const resolve: HostResolver = (hostname) => (hostname.startsWith("slow") ? new Promise<string[]>(() => {}) : Promise.resolve(["93.184.216.34"]));
    const guard = new ImageUrlGuard({ policy: "public-https", resolve, lookupTimeoutMs: 50 });
    // Two names whose DNS never answers take both slots, and are refused themselves.
    await refusal(guard, "https://slow1.example.com/a.png", "https://slow2.example.com/b.png");
    const error = await guard.check(parts("https://images.example.com/cat.png")).then(
      () => assert.fail("expected a 503"),
      (caught: unknown) => caught,
    );
    assert.ok(error instanceof ApiError, String(error));
    assert.equal(error.status, 503);
    assert.equal(error.code, "image_lookup_busy");
    assert.equal(error.headers["retry-after"], "1");
  });

  it("reuses a name's verdict for a while: a name seen often costs no lookup", async () => {
    const calls: string[] = [];
    const guard = new ImageUrlGuard({ policy: "public-https", resolve: fakeResolver(table, calls) });
    for (let round = 0; round < 3; round++) {
      await guard.check(parts("https://images.example.com/cat.png"));
      await refusal(guard, "https://metadata.example.com/x.png");
      await refusal(guard, "https://no-such-host.example.com/x.png");
    }
    // Failures are looked up again; answers are remembered.
    assert.deepEqual(calls, ["images.example.com", "metadata.example.com", "no-such-host.example.com", "no-such-host.example.com", "no-such-host.example.com"]);
  });

  it(`looks up at most ${IMAGE_HOSTS_PER_REQUEST} distinct names per request, two at a time`, async () => {
    let running = 0;
    let most = 0;
    const resolve: HostResolver = async () => {
      running++;
      most = Math.max(most, running);
      await new Promise((done) => setTimeout(done, 5));
      running--;
      return ["93.184.216.34"];
    };
    const guard = new ImageUrlGuard({ policy: "public-https", resolve });
    const names = Array.from({ length: IMAGE_HOSTS_PER_REQUEST }, (_, index) => `https://host${index}.example.com/a.png`);
    await guard.check(parts(...names, ...names));
    assert.equal(most, 2);
    const error = await refusal(guard, ...names, "https://one-more.example.com/a.png");
    assert.equal(error.param, `messages[0].content[${IMAGE_HOSTS_PER_REQUEST}].image_url.url`);
    assert.match(error.message, new RegExp(`at most ${IMAGE_HOSTS_PER_REQUEST} different hosts`));
  });

  it("public passes http to public hosts; any passes everything; none passes data URLs only", async () => {
    const resolve = fakeResolver(table);
    await new ImageUrlGuard({ policy: "public", resolve }).check(parts("http://images.example.com/cat.png", "https://cdn.example.net/a.png"));
    await refusal(new ImageUrlGuard({ policy: "public", resolve }), "http://metadata.example.com/");
    await new ImageUrlGuard({ policy: "any", resolve }).check(parts("http://169.254.169.254/", "http://metadata.example.com/"));
    const none = new ImageUrlGuard({ policy: "none", resolve });
    await none.check(parts(png));
    assert.match((await refusal(none, "https://images.example.com/cat.png")).message, /data URLs only/);
  });

  it("passes hosts on the allow-list whatever they resolve to, over http too, under every policy", async () => {
    const calls: string[] = [];
    for (const policy of ["public-https", "none"] as const) {
      const guard = new ImageUrlGuard({ policy, allowedHosts: "minio.internal, .images.corp, 10.9.8.7, fd00::5, store.corp:9000", resolve: fakeResolver(table, calls) });
      await guard.check(parts("http://minio.internal:9000/bucket/cat.png", "https://a.images.corp/x.png", "http://images.corp/y.png", "http://10.9.8.7/z.png", "http://0x0a090807/z.png", "http://[fd00::5]/w.png", "http://store.corp/v.png"));
      await refusal(guard, "http://other.internal/cat.png");
      await refusal(guard, "http://10.9.8.8/cat.png");
    }
    assert.deepEqual(calls, []);
  });

  it("refuses localhost through a real lookup", async () => {
    // The system resolver answers loopback addresses, each of which is refused.
    const addresses = await systemResolver("localhost");
    assert.ok(addresses.length > 0);
    for (const address of addresses) assert.match(addressProblem(address) ?? "public", /loopback/, address);
    const guard = new ImageUrlGuard({ policy: "public" });
    const error = await refusal(guard, "http://localhost:8080/cat.png");
    assert.match(error.message, /'localhost' does not resolve to public addresses only/);
  });
});
