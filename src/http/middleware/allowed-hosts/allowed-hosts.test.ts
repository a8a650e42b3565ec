import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { createHostPolicy, hostnameOf } from "./allowed-hosts.ts";

describe("allowed hosts", () => {
  it("reads the host name of a Host header, refusing anything else", () => {
    assert.equal(hostnameOf("Example.COM:8080"), "example.com");
    assert.equal(hostnameOf("example.com."), "example.com");
    assert.equal(hostnameOf("[::1]:8080"), "::1");
    assert.equal(hostnameOf("127.0.0.1"), "127.0.0.1");
    for (const bad of ["user@127.0.0.1", "127.0.0.1/x", "a b", "[::1", "[zz::1]", "example.com:99999999", "", ":80", "-x.example"]) {
      assert.equal(hostnameOf(bad), undefined, bad);
    }
  });

  it("answers the public URL's host, the listen address, loopback names and IP addresses, and nothing else by default", () => {
    const policy = createHostPolicy({ publicUrl: "https://ai.example.com", listenHost: "gpu-box.lan", allowedHosts: "" });
    for (const host of ["ai.example.com", "AI.example.com:443", "gpu-box.lan:8080", "localhost:8080", "app.localhost", "127.0.0.1:8080", "10.1.2.3", "[::1]:8080", "[2001:db8::1]"]) {
      assert.equal(policy.allowsHost(host), true, host);
    }
    for (const host of ["rebind.attacker.example:8080", "example.com", "ai.example.com.attacker.example", "localhost.attacker.example", "127.0.0.1.nip.io"]) {
      assert.equal(policy.allowsHost(host), false, host);
    }
  });

  it("gives the same verdict for a host asked again, whatever was asked in between (the last verdict is kept)", () => {
    const policy = createHostPolicy({ publicUrl: "https://ai.example.com", listenHost: "", allowedHosts: "" });
    const hosts = ["ai.example.com", "ai.example.com", "rebind.attacker.example", "rebind.attacker.example", "ai.example.com", "rebind.attacker.example", "localhost:1"];
    assert.deepEqual(
      hosts.map((host) => policy.allowsHost(host)),
      [true, true, false, false, true, false, true],
    );
  });

  it("adds --allowed-hosts: exact names, .domain for a domain and its names, * for any", () => {
    const policy = createHostPolicy({ publicUrl: "", listenHost: "0.0.0.0", allowedHosts: "Turnpike.internal, .corp.example" });
    assert.equal(policy.allowsHost("turnpike.internal:8080"), true);
    assert.equal(policy.allowsHost("corp.example"), true);
    assert.equal(policy.allowsHost("ai.corp.example"), true);
    assert.equal(policy.allowsHost("evilcorp.example"), false);
    assert.equal(policy.allowsHost("0.0.0.0"), true, "an IP address");
    assert.equal(createHostPolicy({ publicUrl: "", listenHost: "::", allowedHosts: "*" }).allowsHost("anything.example"), true);
  });

  it("accepts as Origin the public URL's, or the request's own on an allowed host, never another", () => {
    const policy = createHostPolicy({ publicUrl: "https://ai.example.com/", listenHost: "127.0.0.1", allowedHosts: "" });
    assert.equal(policy.publicOrigin, "https://ai.example.com");
    assert.equal(policy.allowsOrigin("https://ai.example.com", "http://127.0.0.1:8080"), true, "the public URL behind a proxy");
    assert.equal(policy.allowsOrigin("http://127.0.0.1:8080", "http://127.0.0.1:8080"), true);
    assert.equal(policy.allowsOrigin("http://localhost:3000", "http://localhost:8080"), false, "another port is another site");
    assert.equal(policy.allowsOrigin("http://rebind.attacker.example:8080", "http://rebind.attacker.example:8080"), false, "a rebinding page's own origin");
    assert.equal(policy.allowsOrigin("null", "http://127.0.0.1:8080"), false);
  });
});
