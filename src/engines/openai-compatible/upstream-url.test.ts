import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { memberIdOf, normalizeBaseUrl, serverRoot, withoutCredentials } from "./upstream-url.ts";

describe("upstream URLs", () => {
  it("adds /v1 when the path lacks it", () => {
    assert.equal(normalizeBaseUrl("http://10.0.0.5:8000"), "http://10.0.0.5:8000/v1");
    assert.equal(normalizeBaseUrl("http://10.0.0.5:8000/"), "http://10.0.0.5:8000/v1");
    assert.equal(normalizeBaseUrl("https://gateway.example/openai"), "https://gateway.example/openai/v1");
  });

  it("keeps a path that already ends in /v1, without trailing slashes, query or fragment", () => {
    assert.equal(normalizeBaseUrl("http://host:8080/v1/"), "http://host:8080/v1");
    assert.equal(normalizeBaseUrl("http://host:8080/v1?x=1#y"), "http://host:8080/v1");
  });

  it("strips credentials from ids but keeps them in the base URL", () => {
    assert.equal(normalizeBaseUrl("http://user:secret@host:8000"), "http://user:secret@host:8000/v1");
    assert.equal(memberIdOf("http://user:secret@host:8000"), "http://host:8000/v1");
    assert.equal(withoutCredentials("http://user:secret@host:8000/v1"), "http://host:8000/v1");
    assert.equal(withoutCredentials("not a url user:secret"), "(invalid URL)");
  });

  it("finds the server's root below /v1", () => {
    assert.equal(serverRoot("http://host:11434"), "http://host:11434");
    assert.equal(serverRoot("http://host:11434/v1"), "http://host:11434");
    assert.equal(serverRoot("https://gateway.example/openai/v1"), "https://gateway.example/openai");
  });

  it("refuses URLs that are not http(s), without echoing credentials", () => {
    assert.throws(() => normalizeBaseUrl("ftp://user:secret@host/"), (error: Error) => error instanceof TypeError && !error.message.includes("secret"));
  });
});
