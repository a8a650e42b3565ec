/**
 * An HTTP proxy in front of a test server that records every exchange passing through it: the
 * request (method, path with its query, headers, body) and the answer (status, headers, body,
 * decoded when it came compressed). For clients the test cannot instrument (a CLI such as Claude
 * Code): point the client at `url` and read `exchanges` afterwards.
 */
import http from "node:http";
import zlib from "node:zlib";

export type RecordedExchange = {
  method: string;
  /** Path and query as sent (`/v1/messages?beta=true`). */
  path: string;
  requestHeaders: http.IncomingHttpHeaders;
  /** The request body as text ("" when none). */
  requestBody: string;
  status: number;
  responseHeaders: http.IncomingHttpHeaders;
  /** The answer's body as text, decompressed when it came with a `content-encoding`. */
  responseBody: string;
};

function decoded(body: Buffer, encoding: string | undefined): Buffer {
  switch (encoding) {
    case undefined:
    case "identity":
      return body;
    case "gzip":
      return zlib.gunzipSync(body);
    case "deflate":
      return zlib.inflateSync(body);
    case "br":
      return zlib.brotliDecompressSync(body);
    case "zstd":
      return zlib.zstdDecompressSync(body);
    default:
      throw new Error(`unknown content-encoding ${encoding}`);
  }
}

export class HttpRecorder {
  readonly exchanges: RecordedExchange[] = [];
  readonly #target: URL;
  #server: http.Server | undefined;
  /** Where clients connect (set by `open`). */
  url = "";

  /** @param target the server's base URL (`http://127.0.0.1:PORT`) */
  constructor(target: string) {
    this.#target = new URL(target);
  }

  async open(): Promise<void> {
    const server = http.createServer((request, response) => {
      const requestChunks: Buffer[] = [];
      request.on("data", (chunk: Buffer) => requestChunks.push(chunk));
      request.on("end", () => {
        const requestBody = Buffer.concat(requestChunks);
        const upstream = http.request(
          {
            host: this.#target.hostname,
            port: this.#target.port,
            method: request.method,
            path: request.url,
            headers: { ...request.headers, host: this.#target.host },
          },
          (answer) => {
            response.writeHead(answer.statusCode ?? 502, answer.headers);
            const answerChunks: Buffer[] = [];
            answer.on("data", (chunk: Buffer) => {
              answerChunks.push(chunk);
              response.write(chunk);
            });
            answer.on("end", () => {
              const encoding = answer.headers["content-encoding"];
              this.exchanges.push({
                method: request.method ?? "",
                path: request.url ?? "",
                requestHeaders: request.headers,
                requestBody: requestBody.toString("utf8"),
                status: answer.statusCode ?? 0,
                responseHeaders: answer.headers,
                responseBody: decoded(Buffer.concat(answerChunks), Array.isArray(encoding) ? encoding[0] : encoding).toString("utf8"),
              });
              response.end();
            });
          },
        );
        upstream.on("error", (error) => {
          this.exchanges.push({
            method: request.method ?? "",
            path: request.url ?? "",
            requestHeaders: request.headers,
            requestBody: requestBody.toString("utf8"),
            status: 0,
            responseHeaders: {},
            responseBody: `proxy error: ${error.message}`,
          });
          response.destroy(error);
        });
        upstream.end(requestBody);
      });
    });
    this.#server = server;
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    if (address === null || typeof address === "string") throw new Error("the recorder has no port");
    this.url = `http://127.0.0.1:${address.port}`;
  }

  async close(): Promise<void> {
    const server = this.#server;
    if (server === undefined) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
