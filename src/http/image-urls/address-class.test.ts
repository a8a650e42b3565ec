/** addressProblem: public unicast addresses pass; every private, local or special range is named, in every notation the URL parser and resolvers write. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { addressProblem, ipv6Bytes } from "./address-class.ts";

/** The host of an http URL as the WHATWG parser normalises it, without brackets. */
const hostOf = (url: string) => new URL(url).hostname.replace(/^\[(.*)\]$/, "$1");

describe("addressProblem", () => {
  it("passes public IPv4 and IPv6 unicast addresses, IPv4 ones in IPv6 forms too", () => {
    for (const address of ["8.8.8.8", "1.1.1.1", "93.184.216.34", "172.15.255.255", "172.32.0.1", "100.63.255.255", "100.128.0.1", "192.169.0.1", "2606:4700:4700::1111", "2a00:1450:4001:80b::200e", "::ffff:8.8.8.8", "::ffff:808:808", "64:ff9b::8.8.8.8", "2002:808:808::1"]) {
      assert.equal(addressProblem(address), undefined, address);
    }
  });

  it("names private, shared, loopback, link-local, unspecified, multicast and reserved IPv4 ranges", () => {
    const cases: Array<[string, RegExp]> = [
      ["10.0.0.1", /private/],
      ["10.255.255.255", /private/],
      ["172.16.0.1", /private/],
      ["172.31.255.254", /private/],
      ["192.168.1.1", /private/],
      ["100.64.0.1", /carrier-grade NAT/],
      ["100.127.255.254", /carrier-grade NAT/],
      ["127.0.0.1", /loopback/],
      ["127.255.0.9", /loopback/],
      ["169.254.169.254", /link-local/],
      ["0.0.0.0", /unspecified/],
      ["0.1.2.3", /unspecified/],
      ["224.0.0.1", /multicast/],
      ["239.255.255.250", /multicast/],
      ["240.0.0.1", /reserved/],
      ["255.255.255.255", /reserved/],
      ["192.0.2.10", /reserved/],
      ["198.18.0.1", /reserved/],
    ];
    for (const [address, kind] of cases) assert.match(addressProblem(address) ?? "public", kind, address);
  });

  it("names private, loopback, link-local, unspecified, multicast and reserved IPv6 ranges", () => {
    const cases: Array<[string, RegExp]> = [
      ["::", /unspecified/],
      ["::1", /loopback/],
      ["0:0:0:0:0:0:0:1", /loopback/],
      ["fc00::1", /unique local/],
      ["fd12:3456:789a::1", /unique local/],
      ["fe80::1", /link-local/],
      ["febf:ffff::1", /link-local/],
      ["fe80::1%eth0", /link-local/],
      ["fec0::1", /site-local/],
      ["ff02::1", /multicast/],
      ["2001:db8::1", /reserved/],
      ["2001:0:4136:e378:8000:63bf:3fff:fdd2", /reserved/],
      ["::7f00:1", /reserved/],
      ["4000::1", /reserved/],
    ];
    for (const [address, kind] of cases) assert.match(addressProblem(address) ?? "public", kind, address);
  });

  it("judges IPv4-mapped, NAT64 and 6to4 IPv6 addresses by the IPv4 address they carry", () => {
    for (const address of ["::ffff:169.254.169.254", "::ffff:a9fe:a9fe", "0:0:0:0:0:ffff:7f00:1", "::ffff:10.0.0.1", "64:ff9b::192.168.0.1", "2002:a9fe:a9fe::1", "2002:7f00:1::"]) {
      assert.match(addressProblem(address) ?? "public", /(private|loopback|link-local).*in IPv6 form/, address);
    }
  });

  it("sees 169.254.169.254 in every notation the URL parser accepts", () => {
    for (const url of [
      "http://169.254.169.254/latest/meta-data/",
      "http://2852039166/",
      "http://0xA9FEA9FE/",
      "http://0xa9.0xfe.0xa9.0xfe/",
      "http://0251.0376.0251.0376/",
      "http://169.254.43518/",
      "http://169.16689662/",
      "http://169.254.169.254./",
      "http://[::ffff:169.254.169.254]/",
      "http://[::ffff:a9fe:a9fe]/",
      "http://[0:0:0:0:0:ffff:169.254.169.254]/",
    ]) {
      assert.match(addressProblem(hostOf(url)) ?? "public", /link-local/, url);
    }
    for (const url of ["http://127.1/", "http://0x7f.1/", "http://2130706433/", "http://017700000001/", "http://[::1]/", "http://[::ffff:127.0.0.1]/"]) {
      assert.match(addressProblem(hostOf(url)) ?? "public", /loopback/, url);
    }
    assert.match(addressProblem(hostOf("http://0/")) ?? "public", /unspecified/);
    assert.match(addressProblem(hostOf("http://[::]/")) ?? "public", /unspecified/);
  });

  it("refuses what is no IP address", () => {
    assert.equal(addressProblem("example.com"), "not an IP address");
    assert.equal(addressProblem(""), "not an IP address");
  });

  it("reads IPv6 text into its sixteen bytes", () => {
    assert.deepEqual([...ipv6Bytes("::ffff:1.2.3.4")!], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 1, 2, 3, 4]);
    assert.deepEqual([...ipv6Bytes("[2001:db8::ff00:42:8329]")!], [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0xff, 0, 0, 0x42, 0x83, 0x29]);
    assert.deepEqual([...ipv6Bytes("1::")!], [0, 1, ...new Array(14).fill(0)]);
    assert.equal(ipv6Bytes("1.2.3.4"), undefined);
  });
});
