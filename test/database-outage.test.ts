/**
 * PostgreSQL going away under a running server, through a TCP proxy this test controls in
 * front of the real server: connections cut (a restart, a proxy, pg_terminate_backend), then the
 * database unreachable, then back. The server never exits, answers 503 database_unavailable
 * with a retry while the database is away, and serves again as soon as it is back.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import { freshPostgresSchema, postgresUrl } from "./helpers/databases.ts";
import { startTestServer, type TestServer } from "./helpers/server.ts";

/** A TCP proxy to PostgreSQL that can cut every connection, refuse new ones, and come back. */
class Proxy {
  readonly #target = new URL(postgresUrl);
  readonly #sockets = new Set<net.Socket>();
  #server: net.Server | undefined;
  port = 0;

  async open(): Promise<void> {
    this.#server = net.createServer((client) => {
      const upstream = net.connect(Number(this.#target.port || 5432), this.#target.hostname);
      for (const socket of [client, upstream]) {
        this.#sockets.add(socket);
        socket.on("close", () => this.#sockets.delete(socket));
        socket.on("error", () => {});
      }
      client.pipe(upstream).pipe(client);
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
    await new Promise<void>((resolve) => this.#server!.listen(this.port, "127.0.0.1", resolve));
    this.port = (this.#server.address() as net.AddressInfo).port;
  }

  /** Cuts every open connection, as a database restart would. */
  cutAll(): void {
    for (const socket of this.#sockets) socket.destroy();
  }

  /** Cuts everything and refuses new connections until `open` again. */
  async close(): Promise<void> {
    this.cutAll();
    await new Promise<void>((resolve) => (this.#server ? this.#server.close(() => resolve()) : resolve()));
    this.#server = undefined;
  }
}

describe("a PostgreSQL outage under a running server", () => {
  const proxy = new Proxy();
  let drop: () => Promise<void>;
  let test: TestServer;
  before(async () => {
    await proxy.open();
    const schema = await freshPostgresSchema();
    drop = schema.drop;
    const viaProxy = new URL(schema.url);
    viaProxy.host = `127.0.0.1:${proxy.port}`;
    test = await startTestServer({ flags: { database_url: viaProxy.toString() } });
  });
  after(async () => {
    await test?.close();
    await proxy.close();
    await drop?.();
  });

  const ask = () => test.client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 3 });

  it("survives its connections being cut, answers 503 while the database is away, and recovers", async () => {
    assert.equal((await ask()).usage?.completion_tokens, 3);

    // Every pooled connection dies while idle: the pool drops them and connects afresh.
    proxy.cutAll();
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal((await ask()).usage?.completion_tokens, 3, "served on fresh connections");
    assert.ok(test.logs().some((entry) => entry.msg === "a database connection broke; the next query reconnects"));

    // The database is unreachable: a clear 503 with a retry, never a 500, and the process lives.
    await proxy.close();
    await assert.rejects(ask(), (error: unknown) => {
      assert.ok(error instanceof OpenAI.APIError, String(error));
      assert.equal(error.status, 503);
      assert.equal(error.code, "database_unavailable");
      assert.equal(error.type, "service_unavailable");
      assert.equal(error.headers?.get("retry-after"), "2");
      return true;
    });
    const health = await fetch(`${test.url}/health`);
    assert.equal(health.status, 200, "the process is up");
    assert.ok(!test.logs().some((entry) => entry.msg === "unhandled error"), "an outage is not logged as a bug");
    assert.ok(test.logs().some((entry) => entry.msg === "database unavailable"));

    // Back: served again with no restart.
    await proxy.open();
    assert.equal((await ask()).usage?.completion_tokens, 3);
  });
});
