/**
 * Which image URLs a request may hand to a vision upstream, checked at admission, before anything
 * is sent upstream (the upstream fetches http(s) image URLs itself, from inside the operator's
 * network: without this check any key holder could make it fetch `http://169.254.169.254/…`).
 *
 * The policy (`--image-urls`):
 * - `public-https` (default): `data:` URLs, and https URLs whose host is public;
 * - `public`: the same, over http too;
 * - `any`: every http(s) URL, unchecked (for an upstream that is firewalled on its own);
 * - `none`: `data:` URLs only.
 * Hosts on the allow-list (`--image-url-hosts`) pass under every policy, over http or https.
 *
 * "Public" means: the host, as the WHATWG URL parser normalises it (so `http://2852039166/`,
 * `http://0xA9FEA9FE/` and `http://[::ffff:a9fe:a9fe]/` are all 169.254.169.254), is a public
 * address, or a name every address of which (`dns.lookup` with `all`, as the upstream's own
 * resolver would answer) is public. A name that does not resolve in time is refused too.
 *
 * Best effort against DNS rebinding: the upstream resolves the name again when it fetches, and a
 * name can answer differently the second time (or a public host can redirect to a private one);
 * only an upstream whose own outbound traffic is firewalled is safe from that (the README says so).
 */
import dns from "node:dns";
import type { IMAGE_URL_POLICIES } from "../../config/options.ts";
import { ApiError, InvalidRequestError } from "../../protocol/errors.ts";
import { addressProblem, ipv4Bytes, ipv6Bytes } from "./address-class.ts";

export type ImageUrlPolicy = (typeof IMAGE_URL_POLICIES)[number];

/** Every address a host name resolves to (IPv4 and IPv6). */
export type HostResolver = (hostname: string) => Promise<readonly string[]>;

/** One image URL of a request and where it stands in it (`messages[2].content[1].image_url.url`). */
export type { ImageUrlPart } from "../../protocol/generation.ts";
import type { ImageUrlPart } from "../../protocol/generation.ts";

/** How long all of a request's host lookups may take together. */
export const IMAGE_HOST_LOOKUP_TIMEOUT_MS = 3000;
/** Distinct host names one request may name in image URLs (each costs a lookup). */
export const IMAGE_HOSTS_PER_REQUEST = 16;
/**
 * Lookups running at once, process-wide: `dns.lookup` runs on libuv's small thread pool (4
 * threads), which file and crypto work share, and a lookup cannot be cancelled, so a name whose
 * DNS never answers holds its thread until the system resolver gives up.
 */
const LOOKUPS_AT_ONCE = 2;
/** How long a name's verdict is reused, and how many are kept (resolved names only: failures are looked up again). */
const VERDICT_TTL_MS = 30_000;
const VERDICTS_KEPT = 1024;

type Verdict = "public" | "refused" | "slow" | "not started";

/** `dns.lookup` with `all`: what the operating system's resolver (hosts file included) answers, as an upstream's fetch would see it. */
export const systemResolver: HostResolver = async (hostname) => (await dns.promises.lookup(hostname, { all: true, verbatim: true })).map((entry) => entry.address);

export type ImageUrlGuardOptions = {
  policy: ImageUrlPolicy;
  /** Comma-separated host names that pass whatever they resolve to; `.example.com` for a domain and its subdomains. */
  allowedHosts?: string;
  /** Resolves host names; `dns.lookup` when absent (tests give a fake). */
  resolve?: HostResolver;
  /** See IMAGE_HOST_LOOKUP_TIMEOUT_MS. */
  lookupTimeoutMs?: number;
};

/** The URL parser's host name without brackets or a trailing dot, lower case. */
function bareHostname(url: URL): string {
  return url.hostname.replace(/^\[(.*)\]$/, "$1").replace(/\.+$/, "").toLowerCase();
}

/** An allow-list entry as the URL parser would write its host (`0x7f.1` → `127.0.0.1`; a port is dropped). */
function normalisedEntry(entry: string): string {
  const suffix = entry.startsWith(".");
  const name = suffix ? entry.slice(1) : entry;
  // A bare IPv6 address needs its brackets; a name with a port does not.
  for (const host of [name, `[${name}]`]) {
    try {
      const normalised = bareHostname(new URL(`http://${host}/`));
      return suffix ? `.${normalised}` : normalised;
    } catch {
      // Try the next form.
    }
  }
  return entry.toLowerCase();
}

/**
 * Lets at most `limit` calls run at once; the others wait in order. Work whose `signal` was
 * aborted while it waited does not run (its request stopped waiting for it).
 */
function limitConcurrency(limit: number): <T>(work: () => Promise<T>, signal: AbortSignal) => Promise<T> {
  let running = 0;
  const waiting: Array<() => void> = [];
  return async (work, signal) => {
    // A waiter is woken with the finished call's slot handed over.
    if (running >= limit) await new Promise<void>((resolve) => waiting.push(resolve));
    else running++;
    try {
      if (signal.aborted) throw signal.reason;
      return await work();
    } finally {
      const next = waiting.shift();
      if (next !== undefined) next();
      else running--;
    }
  };
}

/** A refusal naming the URL's place in the request (never the URL itself: it may hold credentials). */
function refused(part: ImageUrlPart, reason: string): InvalidRequestError {
  return new InvalidRequestError(`Image URL refused in '${part.param}': ${reason}`, part.param, "image_url_not_allowed");
}

const SEND_DATA = "Send the image as a base64 data URL (data:image/png;base64,...) instead.";

/** Checks a request's image URLs against the operator's policy (see the file's comment). */
export class ImageUrlGuard {
  readonly #policy: ImageUrlPolicy;
  readonly #exactHosts = new Set<string>();
  readonly #hostSuffixes: string[] = [];
  readonly #resolve: HostResolver;
  readonly #lookupTimeoutMs: number;
  readonly #limit = limitConcurrency(LOOKUPS_AT_ONCE);
  /** Recent lookups' verdicts by name: names seen often (a CDN) cost no lookup, so no slot. */
  readonly #verdicts = new Map<string, { verdict: Verdict; expiresAt: number }>();

  constructor(options: ImageUrlGuardOptions) {
    this.#policy = options.policy;
    this.#resolve = options.resolve ?? systemResolver;
    this.#lookupTimeoutMs = options.lookupTimeoutMs ?? IMAGE_HOST_LOOKUP_TIMEOUT_MS;
    for (const entry of (options.allowedHosts ?? "").split(",").map((item) => item.trim()).filter((item) => item !== "")) {
      const normalised = normalisedEntry(entry);
      if (normalised.startsWith(".")) this.#hostSuffixes.push(normalised);
      else this.#exactHosts.add(normalised);
    }
  }

  /** Whether the operator listed this host (or its domain). */
  #listed(hostname: string): boolean {
    return this.#exactHosts.has(hostname) || this.#hostSuffixes.some((suffix) => hostname === suffix.slice(1) || hostname.endsWith(suffix));
  }

  /**
   * Throws a 400 `image_url_not_allowed` naming the first part (in request order) whose URL the
   * policy refuses, or a 503 `image_lookup_busy` when other requests' lookups kept this one's
   * from starting in time. `data:` URLs always pass (their content was checked when the request
   * was read).
   */
  async check(parts: readonly ImageUrlPart[]): Promise<void> {
    if (this.#policy === "any") return;
    /** Host names to look up, with the first part that named each. */
    const lookups = new Map<string, ImageUrlPart>();
    for (const part of parts) {
      if (part.url.startsWith("data:")) continue;
      let url: URL;
      try {
        url = new URL(part.url);
      } catch {
        throw refused(part, `it is not a URL. ${SEND_DATA}`);
      }
      const hostname = bareHostname(url);
      if (url.protocol !== "http:" && url.protocol !== "https:") throw refused(part, `'${url.protocol}' URLs are not accepted; use https or a data URL.`);
      if (this.#listed(hostname)) continue;
      if (this.#policy === "none") throw refused(part, `this server takes images as data URLs only. ${SEND_DATA}`);
      if (url.protocol === "http:" && this.#policy === "public-https") throw refused(part, `plain http image URLs are not accepted; use https. ${SEND_DATA}`);
      if (ipv4Bytes(hostname) !== undefined || ipv6Bytes(hostname) !== undefined) {
        const problem = addressProblem(hostname);
        if (problem !== undefined) throw refused(part, `its host ${url.hostname} is ${problem}; image URLs must point to public hosts. ${SEND_DATA}`);
        continue;
      }
      if (!lookups.has(hostname)) {
        if (lookups.size === IMAGE_HOSTS_PER_REQUEST) throw refused(part, `a request may name images on at most ${IMAGE_HOSTS_PER_REQUEST} different hosts. ${SEND_DATA}`);
        lookups.set(hostname, part);
      }
    }
    if (lookups.size === 0) return;
    const verdicts = await this.#lookUp([...lookups.keys()]);
    // The first refused part in request order, whichever lookup finished first.
    for (const [hostname, part] of lookups) {
      const verdict = verdicts.get(hostname)!;
      if (verdict === "public" || verdict === "not started") continue;
      // One message for a private address, no answer and a slow answer: the refusal must not
      // tell a client which internal names exist.
      throw refused(part, `its host '${hostname}' does not resolve to public addresses only (or could not be resolved within ${this.#lookupTimeoutMs / 1000} s); image URLs must point to public hosts. ${SEND_DATA}`);
    }
    // Every lookup slot was taken by other requests' (slow) lookups until the deadline: our capacity, not the client's fault.
    if ([...verdicts.values()].includes("not started")) {
      throw new ApiError("The server is busy looking up other requests' image hosts; retry in a moment, or send the image as a base64 data URL.", "image_lookup_busy", {
        headers: { "retry-after": "1" },
      });
    }
  }

  /**
   * Each name's verdict, all within the lookup timeout: `public` where every address is public;
   * `refused` where one is not, or the name does not resolve; `slow` where the lookup ran past the
   * timeout; `not started` where it waited for a lookup slot until the timeout.
   */
  async #lookUp(hostnames: readonly string[]): Promise<Map<string, Verdict>> {
    const verdicts = new Map<string, Verdict>();
    const late = new AbortController();
    const started = new Set<string>();
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, this.#lookupTimeoutMs);
    });
    const all = Promise.all(
      hostnames.map(async (hostname) => {
        const remembered = this.#remembered(hostname);
        if (remembered !== undefined) {
          verdicts.set(hostname, remembered);
          return;
        }
        let addresses: readonly string[];
        try {
          addresses = await this.#limit(() => {
            started.add(hostname);
            return this.#resolve(hostname);
          }, late.signal);
        } catch {
          if (started.has(hostname)) verdicts.set(hostname, "refused");
          return;
        }
        const verdict = addresses.length > 0 && addresses.every((address) => addressProblem(address) === undefined) ? "public" : "refused";
        this.#remember(hostname, verdict);
        verdicts.set(hostname, verdict);
      }),
    );
    try {
      await Promise.race([all, deadline]);
    } finally {
      clearTimeout(timer);
      // Lookups still queued behind other requests' are dropped.
      late.abort(new Error("image host lookups no longer needed"));
    }
    // Read now: answers arriving after the deadline change nothing.
    return new Map(hostnames.map((hostname) => [hostname, verdicts.get(hostname) ?? (started.has(hostname) ? "slow" : "not started")]));
  }

  /** A verdict looked up less than VERDICT_TTL_MS ago. */
  #remembered(hostname: string): Verdict | undefined {
    const entry = this.#verdicts.get(hostname);
    if (entry === undefined) return undefined;
    if (entry.expiresAt > Date.now()) return entry.verdict;
    this.#verdicts.delete(hostname);
    return undefined;
  }

  #remember(hostname: string, verdict: Verdict): void {
    this.#verdicts.delete(hostname);
    // The oldest entry makes room (a Map iterates in insertion order).
    if (this.#verdicts.size >= VERDICTS_KEPT) this.#verdicts.delete(this.#verdicts.keys().next().value!);
    this.#verdicts.set(hostname, { verdict, expiresAt: Date.now() + VERDICT_TTL_MS });
  }
}
