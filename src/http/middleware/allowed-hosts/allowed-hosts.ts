/**
 * Which `Host` names this server answers to, and which browser origins may act on it.
 *
 * DNS rebinding: a web page at `http://rebind.attacker.example:8080` re-points its name at
 * 127.0.0.1 and then calls the server as "same-origin" from the browser's point of view. Its
 * requests carry `Host: rebind.attacker.example:8080`, a name this server was never given. So a
 * request is answered only when its Host is
 * - the public URL's host (`--public-url`), or the listen address (`--host`);
 * - `localhost`, a name under `.localhost`, or any IP address: a browser sends an IP as Host
 *   only for a page loaded from that very address, which a rebinding page is not;
 * - one of `--allowed-hosts` (comma-separated names; `.example.com` takes the domain and every
 *   name under it; `*` takes any Host and turns the check off).
 * Others get 421 `host_not_allowed`. Every host a request names must pass: its `Host`, and behind
 * a trusted proxy its `X-Forwarded-Host` too (a client can write that header itself, and many
 * proxies pass it through, so it can never stand in for the Host).
 *
 * A browser's `Origin` is accepted when it is the public URL's origin, or the request's own
 * origin on a Host that passed the check above — never merely whatever Host the request names.
 */
import { isIP } from "node:net";
import type { FastifyRequest } from "fastify";
import { ApiError } from "../../../protocol/errors.ts";

export type HostPolicyOptions = {
  /** `--public-url` (empty: none). */
  publicUrl: string;
  /** `--host`, the listen address. */
  listenHost: string;
  /** `--allowed-hosts`, comma-separated. */
  allowedHosts: string;
};

export type HostPolicy = {
  /** The public URL's origin (`https://ai.example.com`), or null without one. */
  readonly publicOrigin: string | null;
  /** True when this server answers to a request with this `Host` header value. */
  allowsHost(host: string): boolean;
  /** True when a browser request from `origin` may act on this server; `requestOrigin` is the request's own (`protocol://host`). */
  allowsOrigin(origin: string, requestOrigin: string): boolean;
};

/** 421: the request names a host this server does not serve. */
export class HostNotAllowedError extends ApiError {
  constructor(host: string) {
    super(
      `This server does not answer to the host ${JSON.stringify(host.slice(0, 100))}. Its operator can add it with --allowed-hosts (TURNPIKE_ALLOWED_HOSTS) or --public-url.`,
      "host_not_allowed");
  }
}

/** A Host header value: a name or an IPv4 address, or a bracketed IPv6 address, and an optional port. */
const HOST_PATTERN = /^(?:\[([0-9a-f:.]+)\]|([a-z0-9_](?:[a-z0-9_.-]*[a-z0-9_.])?))(?::\d{1,5})?$/;

/** The lower-case host name of a Host header value (IPv6 without brackets), or undefined when it is not one. */
export function hostnameOf(host: string): string | undefined {
  const match = HOST_PATTERN.exec(host.trim().toLowerCase());
  if (match === null) return undefined;
  if (match[1] !== undefined) return isIP(match[1]) === 6 ? match[1] : undefined;
  return match[2]!.replace(/\.$/, "");
}

/** Listen addresses that name no host: every interface. */
export const WILDCARD_LISTEN = new Set(["", "0.0.0.0", "::", "[::]"]);

/** Builds the policy from the settings. */
export function createHostPolicy(options: HostPolicyOptions): HostPolicy {
  const exact = new Set<string>();
  const suffixes: string[] = [];
  let anyHost = false;
  let publicOrigin: string | null = null;
  if (options.publicUrl !== "") {
    const url = new URL(options.publicUrl);
    publicOrigin = url.origin;
    const name = hostnameOf(url.host);
    if (name !== undefined) exact.add(name);
  }
  const listen = options.listenHost.trim().toLowerCase();
  if (!WILDCARD_LISTEN.has(listen)) {
    const name = hostnameOf(listen.includes(":") && !listen.startsWith("[") ? `[${listen}]` : listen);
    if (name !== undefined) exact.add(name);
  }
  for (const entry of options.allowedHosts.split(",").map((item) => item.trim().toLowerCase()).filter((item) => item !== "")) {
    if (entry === "*") anyHost = true;
    else if (entry.startsWith(".")) suffixes.push(entry.replace(/\.$/, ""));
    else exact.add(hostnameOf(entry) ?? entry.replace(/\.$/, ""));
  }

  function allowsName(name: string): boolean {
    if (anyHost || exact.has(name) || isIP(name) !== 0) return true;
    if (name === "localhost" || name.endsWith(".localhost")) return true;
    return suffixes.some((suffix) => name === suffix.slice(1) || name.endsWith(suffix));
  }

  // The last Host header's verdict: a client sends the same one on every request of a connection
  // (a trim, a lower-casing, a pattern match and an address parse a request otherwise).
  let lastHost: string | undefined;
  let lastAllowed = false;
  function allowsHost(host: string): boolean {
    if (host === lastHost) return lastAllowed;
    const name = hostnameOf(host);
    const allowed = name !== undefined && allowsName(name);
    lastHost = host;
    lastAllowed = allowed;
    return allowed;
  }

  return {
    publicOrigin,
    allowsHost,
    allowsOrigin(origin, requestOrigin) {
      if (origin === publicOrigin) return true;
      if (origin !== requestOrigin) return false;
      try {
        return allowsHost(new URL(origin).host);
      } catch {
        return false;
      }
    },
  };
}

/** The refusal (421) of a request naming a host this server does not answer to; undefined when it may go on. */
export function hostRefusal(policy: HostPolicy, request: FastifyRequest): HostNotAllowedError | undefined {
  // `request.host` is X-Forwarded-Host when a trusted proxy sent one, else the Host header.
  // HTTP/1.0 without a Host: no browser sends that, so it cannot be a rebinding page.
  const header = request.headers.host;
  if (header !== undefined && header !== "" && !policy.allowsHost(header)) return new HostNotAllowedError(header);
  const host = request.host;
  if (host !== header && host !== undefined && host !== "" && !policy.allowsHost(host)) return new HostNotAllowedError(host);
  return undefined;
}
