/**
 * The web console: static files built by Vite into `console/dist`, served at `/`. Paths that are
 * not files get `index.html` (the console routes on the client), except under `/v1` and `/api`,
 * which keep answering JSON 404s. Hashed assets are cached for good; `index.html` never.
 */
import fs from "node:fs";
import path from "node:path";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import fastifyStatic from "@fastify/static";
import { InvalidRequestError, RouteNotFoundError } from "../../../protocol/errors.ts";
import { CONSOLE_POLICY } from "../../middleware/security-headers/security-headers.ts";

export type ConsoleRouteOptions = {
  /** The built console (`console/dist`). */
  directory: string;
};

const API_PREFIXES = ["/v1/", "/api/"];

const NOT_BUILT = `<!doctype html><html lang="en"><meta charset="utf-8"><title>Turnpike</title>
<body style="font-family:system-ui;max-width:40rem;margin:4rem auto;padding:0 1rem">
<h1>Turnpike</h1><p>The API is running at <code>/v1</code>. The web console has not been built yet:
run <code>npm run build:console</code> (or restart with <code>npm start</code>, which builds it).</p></body></html>`;

/**
 * The request's path, decoded; 400 `invalid_url` for a malformed percent-encoding or a control
 * character (a NUL byte makes every file-system call throw), which no file name of ours holds.
 */
function decodedPath(url: string): string {
  let pathname: string;
  try {
    pathname = decodeURIComponent(url.split("?")[0] ?? "/");
  } catch {
    throw new InvalidRequestError("The request URL is not valid: it holds a malformed percent-encoding.", null, "invalid_url");
  }
  if (/[\u0000-\u001f\u007f]/.test(pathname)) {
    throw new InvalidRequestError("The request URL is not valid: it holds a control character.", null, "invalid_url");
  }
  return pathname;
}

/** True for a regular file; false for anything else, including names the file system refuses (too long …). */
function isFile(file: string): boolean {
  try {
    return fs.statSync(file, { throwIfNoEntry: false })?.isFile() ?? false;
  } catch {
    return false;
  }
}

export function registerConsoleRoutes(app: FastifyInstance, options: ConsoleRouteOptions): void {
  const root = path.resolve(options.directory);
  app.register(fastifyStatic, { root, serve: false });

  async function serveConsole(request: FastifyRequest, reply: FastifyReply) {
    const pathname = decodedPath(request.url);
    if (pathname === "/v1" || pathname === "/api" || API_PREFIXES.some((prefix) => pathname.startsWith(prefix))) {
      throw new RouteNotFoundError(request.method, pathname);
    }
    void reply.header("content-security-policy", CONSOLE_POLICY);
    if (!fs.existsSync(path.join(root, "index.html"))) {
      return reply.code(200).type("text/html; charset=utf-8").header("cache-control", "no-store").send(NOT_BUILT);
    }
    const relative = path.normalize(pathname).replace(/^(\.\.(\/|\\|$))+/, "").replace(/^[/\\]+/, "");
    const file = path.join(root, relative);
    const hidden = relative.split(/[/\\]/).some((segment) => segment.startsWith("."));
    if (relative !== "" && !hidden && file.startsWith(root + path.sep) && isFile(file)) {
      const hashed = relative.startsWith(`assets${path.sep}`);
      return reply.sendFile(relative, { immutable: hashed, maxAge: hashed ? "365d" : 0 });
    }
    // Client-side routes (`/keys`, `/usage` …) and unknown files: the app decides.
    return reply.header("cache-control", "no-cache").sendFile("index.html", { cacheControl: false });
  }

  app.get("/", serveConsole);
  app.get("/*", serveConsole);
}
