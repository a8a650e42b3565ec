/**
 * Which IP addresses an image URL may point at: public unicast ones only. Everything a server
 * inside an operator's network could reach but the internet could not (private, shared/CGNAT,
 * loopback, link-local, unspecified, multicast, documentation and reserved ranges) is named, for
 * IPv4 and IPv6, including IPv6 forms that carry an IPv4 address (IPv4-mapped `::ffff:a.b.c.d`,
 * NAT64 `64:ff9b::/96`, 6to4 `2002::/16`), which are judged by the address they carry.
 *
 * Takes addresses as text in their usual notation (what `new URL(...).hostname` or `dns.lookup`
 * give); other IPv4 notations (decimal `2852039166`, hex `0xA9FEA9FE`, octal `0251.0376.0251.0376`)
 * are normalised by the WHATWG URL parser before they get here (see `image-url-guard.ts`).
 */
import net from "node:net";

/** One range and what kind of address falls in it. */
type Range = { prefix: readonly number[]; bits: number; kind: string };

const PRIVATE = "a private address";
const RESERVED = "a reserved (not publicly routable) address";

/** IPv4 ranges that are not public (IANA's special-purpose registry, RFC 6890 and successors). */
const IPV4_RANGES: readonly Range[] = [
  { prefix: [0], bits: 8, kind: "an unspecified ('this network') address" },
  { prefix: [10], bits: 8, kind: PRIVATE },
  { prefix: [100, 64], bits: 10, kind: "a shared (carrier-grade NAT) address" },
  { prefix: [127], bits: 8, kind: "a loopback address" },
  { prefix: [169, 254], bits: 16, kind: "a link-local address" },
  { prefix: [172, 16], bits: 12, kind: PRIVATE },
  { prefix: [192, 0, 0], bits: 24, kind: RESERVED },
  { prefix: [192, 0, 2], bits: 24, kind: RESERVED },
  { prefix: [192, 88, 99], bits: 24, kind: RESERVED },
  { prefix: [192, 168], bits: 16, kind: PRIVATE },
  { prefix: [198, 18], bits: 15, kind: RESERVED },
  { prefix: [198, 51, 100], bits: 24, kind: RESERVED },
  { prefix: [203, 0, 113], bits: 24, kind: RESERVED },
  { prefix: [224], bits: 4, kind: "a multicast address" },
  // 240/4 and the broadcast address 255.255.255.255.
  { prefix: [240], bits: 4, kind: RESERVED },
];

/** IPv6 ranges that are not public, checked after the forms that carry an IPv4 address. */
const IPV6_RANGES: readonly Range[] = [
  { prefix: [], bits: 128, kind: "an unspecified address" },
  { prefix: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], bits: 128, kind: "a loopback address" },
  { prefix: [0x01, 0x00, 0, 0, 0, 0, 0, 0], bits: 64, kind: RESERVED },
  { prefix: [0x00, 0x64, 0xff, 0x9b, 0x00, 0x01], bits: 48, kind: RESERVED },
  // Teredo: carries an obfuscated IPv4 address; no image host needs it.
  { prefix: [0x20, 0x01, 0x00, 0x00], bits: 32, kind: RESERVED },
  { prefix: [0x20, 0x01, 0x0d, 0xb8], bits: 32, kind: RESERVED },
  { prefix: [0xfc], bits: 7, kind: "a private (unique local) address" },
  { prefix: [0xfe, 0x80], bits: 10, kind: "a link-local address" },
  { prefix: [0xfe, 0xc0], bits: 10, kind: "a private (site-local) address" },
  { prefix: [0xff], bits: 8, kind: "a multicast address" },
];

/** Whether the first `bits` bits of `bytes` are those of `prefix` (missing prefix bytes are 0). */
function inRange(bytes: Uint8Array, range: Range): boolean {
  for (let bit = 0; bit < range.bits; bit += 8) {
    const index = bit / 8;
    const remaining = Math.min(8, range.bits - bit);
    const mask = (0xff << (8 - remaining)) & 0xff;
    if ((bytes[index]! & mask) !== ((range.prefix[index] ?? 0) & mask)) return false;
  }
  return true;
}

/** The four bytes of a dotted-quad IPv4 address, or undefined when it is not one. */
export function ipv4Bytes(text: string): Uint8Array | undefined {
  if (!net.isIPv4(text)) return undefined;
  return Uint8Array.from(text.split(".").map(Number));
}

/**
 * The sixteen bytes of an IPv6 address (with or without brackets, a zone, or a dotted IPv4 tail),
 * or undefined when it is not one.
 */
export function ipv6Bytes(text: string): Uint8Array | undefined {
  const bare = text.replace(/^\[(.*)\]$/, "$1").replace(/%.*$/, "");
  if (!net.isIPv6(bare)) return undefined;
  const groupsOf = (side: string): number[] => {
    if (side === "") return [];
    const groups: number[] = [];
    for (const group of side.split(":")) {
      const tail = ipv4Bytes(group);
      if (tail !== undefined) groups.push((tail[0]! << 8) | tail[1]!, (tail[2]! << 8) | tail[3]!);
      else groups.push(Number.parseInt(group, 16));
    }
    return groups;
  };
  const [head = "", tail] = bare.split("::");
  const first = groupsOf(head);
  const last = tail === undefined ? [] : groupsOf(tail);
  const groups = [...first, ...new Array<number>(8 - first.length - last.length).fill(0), ...last];
  const bytes = new Uint8Array(16);
  groups.forEach((group, index) => {
    bytes[index * 2] = group >> 8;
    bytes[index * 2 + 1] = group & 0xff;
  });
  return bytes;
}

function ipv4Problem(bytes: Uint8Array): string | undefined {
  return IPV4_RANGES.find((range) => inRange(bytes, range))?.kind;
}

/** The IPv4 address an IPv6 address carries where it is routed as that IPv4 address. */
function embeddedIpv4(bytes: Uint8Array): Uint8Array | undefined {
  // ::ffff:a.b.c.d (IPv4-mapped): a dual-stack socket connects to a.b.c.d.
  if (inRange(bytes, { prefix: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff], bits: 96, kind: "" })) return bytes.subarray(12);
  // 64:ff9b::a.b.c.d (NAT64, RFC 6052): the translator connects to a.b.c.d.
  if (inRange(bytes, { prefix: [0x00, 0x64, 0xff, 0x9b], bits: 96, kind: "" })) return bytes.subarray(12);
  // 2002:AABB:CCDD::/48 (6to4): a relay reaches a.b.c.d.
  if (inRange(bytes, { prefix: [0x20, 0x02], bits: 16, kind: "" })) return bytes.subarray(2, 6);
  return undefined;
}

/**
 * Why an image URL may not point at `address` ("a link-local address", ...), or undefined when
 * it is a public unicast address. Text that is no IP address at all is refused too.
 */
export function addressProblem(address: string): string | undefined {
  const v4 = ipv4Bytes(address);
  if (v4 !== undefined) return ipv4Problem(v4);
  const v6 = ipv6Bytes(address);
  if (v6 === undefined) return "not an IP address";
  const carried = embeddedIpv4(v6);
  if (carried !== undefined) {
    const problem = ipv4Problem(carried);
    return problem === undefined ? undefined : `${problem} (in IPv6 form)`;
  }
  // IPv4-compatible (::a.b.c.d, deprecated) and every other address of ::/96.
  if (inRange(v6, { prefix: [], bits: 96, kind: "" }) && !inRange(v6, IPV6_RANGES[0]!) && !inRange(v6, IPV6_RANGES[1]!)) return RESERVED;
  const known = IPV6_RANGES.find((range) => inRange(v6, range))?.kind;
  if (known !== undefined) return known;
  // Global unicast is 2000::/3; everything outside it is unassigned or special.
  return inRange(v6, { prefix: [0x20], bits: 3, kind: "" }) ? undefined : RESERVED;
}
