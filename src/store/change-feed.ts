/**
 * PostgreSQL's notifications of writes that caches must honour (migration 0015: a trigger sends
 * `turnpike_changes` with `schema.table` when a key or an account changes in a way a cache
 * keeps), on one connection of the node's own, so that a cache can keep what it read for longer
 * than its age bound and still drop it as soon as another node (or the CLI, or an operator's SQL)
 * changes it.
 *
 * Why a cache may trust it, and only while it is proven live: every `HEARTBEAT_MS` the feed sends
 * a notification on a channel of its own through the same connection, and notes when it sent it.
 * PostgreSQL delivers notifications to a session in the order their transactions committed, so
 * once a heartbeat sent at time `t` came back, every change committed before `t` has come back
 * before it. `watched(boundMs)` is true while a heartbeat sent within the last `boundMs` has come
 * back: then every change committed more than `boundMs` ago has been counted (`received`), and a
 * cache that starts over whenever the count moves holds nothing older than its own bound would
 * have let it. A connection that breaks, hangs or never hears its heartbeats (a pooler in
 * transaction mode drops LISTEN) stops proving it within `boundMs`, and the caches fall back to
 * their own bounds; a reconnect counts as a change (what was written meanwhile was not heard).
 */
import { randomBytes } from "node:crypto";
import pg from "pg";

/** The channel the migration's trigger notifies. */
export const CHANGES_CHANNEL = "turnpike_changes";
/** How often the feed proves itself live. */
export const HEARTBEAT_MS = 200;
/** The longest wait before connecting again after a failure. */
const MAX_RECONNECT_MS = 5_000;
/** Heartbeats whose return is still awaited, at most (a silent connection is replaced long before). */
const MAX_UNANSWERED = 64;

/** `listening`: it listens (again); `lost`: the connection it listened on broke; `failed`: an attempt to listen failed (tried again, up to every 5 s). */
export type ChangeFeedEvent = { kind: "listening" } | { kind: "lost"; error: Error } | { kind: "failed"; error: Error };

export type ChangeFeedOptions = {
  /** The connection string (the store's). */
  url: string;
  /** Told when the feed starts listening and when it loses its connection. */
  onEvent?: (event: ChangeFeedEvent) => void;
  heartbeatMs?: number;
};

export class ChangeFeed {
  readonly #url: string;
  readonly #onEvent: (event: ChangeFeedEvent) => void;
  readonly #heartbeatMs: number;
  /** This feed's heartbeat channel: no other node hears it. */
  readonly #beatChannel = `turnpike_beat_${randomBytes(8).toString("hex")}`;
  #client: pg.Client | undefined;
  #schema = "";
  #received = 0;
  /** Heartbeats sent and not yet back: sequence number → when sent (performance.now). */
  readonly #unanswered = new Map<number, number>();
  #sequence = 0;
  /** When the latest heartbeat that came back was sent; -Infinity before one did. */
  #confirmedSentAt = -Infinity;
  #timer: NodeJS.Timeout | undefined;
  #reconnectMs = 250;
  #closed = false;

  constructor(options: ChangeFeedOptions) {
    this.#url = options.url;
    this.#onEvent = options.onEvent ?? (() => {});
    this.#heartbeatMs = options.heartbeatMs ?? HEARTBEAT_MS;
  }

  /** Starts listening; resolves once it listens or failed once (it keeps trying in the background). */
  async start(): Promise<void> {
    await this.#connect();
  }

  /** Changes heard so far (a reconnect counts as one): a cache starts over when this moves. */
  get received(): number {
    return this.#received;
  }

  /** Whether every change committed more than `boundMs` ago has been heard (see the file's comment). */
  watched(boundMs: number, now = performance.now()): boolean {
    return this.#confirmedSentAt >= now - boundMs;
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    const client = this.#client;
    this.#client = undefined;
    await client?.end().catch(() => undefined);
  }

  async #connect(): Promise<void> {
    if (this.#closed) return;
    const client = new pg.Client({ connectionString: this.#url, keepAlive: true, connectionTimeoutMillis: 5_000, application_name: "turnpike-change-feed" });
    // Never an unhandled 'error': a broken connection is replaced.
    client.on("error", (error) => this.#lost(client, error));
    client.on("end", () => this.#lost(client, new Error("the connection ended")));
    client.on("notification", (message) => this.#heard(client, message));
    try {
      await client.connect();
      const { rows } = await client.query<{ schema: string | null }>("SELECT current_schema() AS schema");
      this.#schema = rows[0]?.schema ?? "public";
      await client.query(`LISTEN ${CHANGES_CHANNEL}`);
      await client.query(`LISTEN ${this.#beatChannel}`);
    } catch (error) {
      this.#lost(client, error instanceof Error ? error : new Error(String(error)));
      return;
    }
    if (this.#closed) {
      await client.end().catch(() => undefined);
      return;
    }
    this.#client = client;
    // What was written while nobody listened was not heard: caches start over.
    this.#received++;
    this.#reconnectMs = 250;
    this.#onEvent({ kind: "listening" });
    this.#beat();
  }

  #beat(): void {
    const client = this.#client;
    if (client === undefined || this.#closed) return;
    if (this.#unanswered.size >= MAX_UNANSWERED) {
      // Heartbeats go out and none come back: the connection is not what it seems.
      this.#lost(client, new Error("the change feed's heartbeats stopped coming back"));
      return;
    }
    const sequence = ++this.#sequence;
    this.#unanswered.set(sequence, performance.now());
    client.query(`NOTIFY ${this.#beatChannel}, '${sequence}'`).catch((error: unknown) => this.#lost(client, error instanceof Error ? error : new Error(String(error))));
    this.#timer = setTimeout(() => this.#beat(), this.#heartbeatMs);
    this.#timer.unref();
  }

  #heard(client: pg.Client, message: pg.Notification): void {
    if (client !== this.#client) return;
    if (message.channel === this.#beatChannel) {
      const sequence = Number(message.payload);
      const sentAt = this.#unanswered.get(sequence);
      if (sentAt === undefined) return;
      // Every heartbeat sent before it has come back too, or never will (dropped with them).
      for (const earlier of this.#unanswered.keys()) if (earlier <= sequence) this.#unanswered.delete(earlier);
      this.#confirmedSentAt = Math.max(this.#confirmedSentAt, sentAt);
      return;
    }
    if (message.channel !== CHANGES_CHANNEL) return;
    // Another deployment's schema in the same database is not ours.
    const payload = message.payload ?? "";
    if (payload.includes(".") && !payload.startsWith(`${this.#schema}.`)) return;
    this.#received++;
  }

  /** Connections given up on ('error', 'end' and a failed query may each report one). */
  readonly #dead = new WeakSet<pg.Client>();

  #lost(client: pg.Client, error: Error): void {
    if (this.#dead.has(client)) return;
    this.#dead.add(client);
    const wasListening = this.#client === client;
    if (this.#client !== undefined && !wasListening) return;
    this.#client = undefined;
    this.#unanswered.clear();
    clearTimeout(this.#timer);
    client.removeAllListeners("end");
    client.end().catch(() => undefined);
    if (this.#closed) return;
    this.#onEvent({ kind: wasListening ? "lost" : "failed", error });
    const wait = this.#reconnectMs;
    this.#reconnectMs = Math.min(MAX_RECONNECT_MS, this.#reconnectMs * 2);
    this.#timer = setTimeout(() => void this.#connect(), wait);
    this.#timer.unref();
  }
}
