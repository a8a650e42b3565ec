/**
 * A TCP proxy in front of a real server (PostgreSQL, Redis) that a test controls: it can cut every
 * connection, refuse new ones, come back, and turn into a black hole (connections stay open,
 * nothing gets through either way: a dead route or a firewall dropping packets, with no reset).
 */
import net from "node:net";

const DEFAULT_PORTS: Record<string, number> = { "postgres:": 5432, "postgresql:": 5432, "redis:": 6379 };

export class TcpProxy {
  readonly #target: URL;
  readonly #sockets = new Set<net.Socket>();
  #server: net.Server | undefined;
  #blackHole = false;
  #loseAnswerTo: { pattern: RegExp; done: () => void } | undefined;
  /** Where clients connect: chosen on the first `open`, kept when it opens again. */
  port = 0;

  /** @param target the server's URL (`postgres://…`, `redis://…`); its host and port are used */
  constructor(target: string) {
    this.#target = new URL(target);
  }

  /** The target's URL with the proxy's address in place of the server's. */
  url(target: string): string {
    const through = new URL(target);
    through.host = `127.0.0.1:${this.port}`;
    return through.toString();
  }

  async open(): Promise<void> {
    this.#server = net.createServer((client) => {
      this.#track(client);
      // A connection opened into the black hole is held open and never answered.
      if (this.#blackHole) return;
      const upstream = net.connect(Number(this.#target.port) || DEFAULT_PORTS[this.#target.protocol] || 0, this.#target.hostname);
      this.#track(upstream);
      const forward = (from: net.Socket, to: net.Socket) => from.on("data", (chunk: Buffer) => void (this.#blackHole || to.write(chunk)));
      // A connection whose client sent what `loseNextAnswer` waits for: the server's answer is dropped and the connection cut.
      let answerLost: (() => void) | undefined;
      client.on("data", (chunk: Buffer) => {
        const waiting = this.#loseAnswerTo;
        if (waiting === undefined || !waiting.pattern.test(chunk.toString("latin1"))) return;
        this.#loseAnswerTo = undefined;
        answerLost = waiting.done;
      });
      upstream.on("data", () => {
        if (answerLost === undefined) return;
        const done = answerLost;
        answerLost = undefined;
        client.destroy();
        upstream.destroy();
        done();
      });
      forward(client, upstream);
      upstream.on("data", (chunk: Buffer) => void (this.#blackHole || client.destroyed || client.write(chunk)));
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
    await new Promise<void>((resolve) => this.#server!.listen(this.port, "127.0.0.1", resolve));
    this.port = (this.#server.address() as net.AddressInfo).port;
  }

  #track(socket: net.Socket): void {
    this.#sockets.add(socket);
    socket.on("close", () => this.#sockets.delete(socket));
    socket.on("error", () => {});
  }

  /**
   * The next time a client sends bytes matching `pattern` (PostgreSQL's `commit`, say), they reach
   * the server, but its answer is dropped and the connection cut: the server did the work, the
   * client never learns it (a reset after COMMIT). Resolves once that happened.
   */
  loseNextAnswer(pattern: RegExp): Promise<void> {
    const { promise, resolve } = Promise.withResolvers<void>();
    this.#loseAnswerTo = { pattern, done: resolve };
    return promise;
  }

  /** Cuts every open connection, as a database restart would. */
  cutAll(): void {
    for (const socket of this.#sockets) socket.destroy();
  }

  /** From now on every byte is dropped, both ways, and no socket is closed. */
  startBlackHole(): void {
    this.#blackHole = true;
  }

  /**
   * The route is back. The connections that lost bytes in the hole cannot be resumed: they are cut,
   * as a restarted firewall or NAT would.
   */
  endBlackHole(): void {
    this.#blackHole = false;
    this.cutAll();
  }

  /** Cuts everything and refuses new connections until `open` again. */
  async close(): Promise<void> {
    this.cutAll();
    await new Promise<void>((resolve) => (this.#server ? this.#server.close(() => resolve()) : resolve()));
    this.#server = undefined;
  }
}

