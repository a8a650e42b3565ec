/**
 * What bench/memory.ts reads from Turnpike's process without an endpoint of Turnpike's own: the
 * kernel's view (`/proc/<pid>/status`, `/proc/<pid>/smaps_rollup`) and, through the V8 inspector
 * the child was started with (`--inspect=127.0.0.1:PORT`), `process.memoryUsage()`, a full
 * garbage collection and heap snapshots.
 */
import fs from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

/** Bytes, as `process.memoryUsage()` gives them. */
export type NodeMemory = { rss: number; heapTotal: number; heapUsed: number; external: number; arrayBuffers: number };

/** The kernel's figures for a process, in bytes: resident now, its high-water mark, and the anonymous part of resident. */
export type KernelMemory = { rss: number; hwm: number; anonymous: number };

/** Reads VmRSS and VmHWM from `/proc/<pid>/status` and Anonymous from `smaps_rollup` (Linux). */
export function readKernelMemory(pid: number): KernelMemory | undefined {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
    const field = (text: string, name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? NaN) * 1024;
    let anonymous = NaN;
    try {
      anonymous = field(fs.readFileSync(`/proc/${pid}/smaps_rollup`, "utf8"), "Anonymous");
    } catch {
      // Older kernels have no smaps_rollup.
    }
    return { rss: field(status, "VmRSS"), hwm: field(status, "VmHWM"), anonymous };
  } catch {
    return undefined;
  }
}

type Pending = { resolve: (result: unknown) => void; reject: (error: Error) => void };

/** A Chrome DevTools Protocol session on one Node process (Node 24's global WebSocket). */
export class Inspector {
  readonly #socket: WebSocket;
  readonly #pending = new Map<number, Pending>();
  readonly #listeners = new Map<string, (params: Record<string, unknown>) => void>();
  #nextId = 1;

  private constructor(socket: WebSocket) {
    this.#socket = socket;
    socket.addEventListener("message", (event) => {
      const message = JSON.parse(String(event.data)) as { id?: number; result?: unknown; error?: { message: string }; method?: string; params?: Record<string, unknown> };
      if (message.id !== undefined) {
        const pending = this.#pending.get(message.id);
        this.#pending.delete(message.id);
        if (message.error) pending?.reject(new Error(message.error.message));
        else pending?.resolve(message.result);
      } else if (message.method !== undefined) this.#listeners.get(message.method)?.(message.params ?? {});
    });
  }

  /** Connects to the inspector listening on 127.0.0.1:`port`, polling its target list until `timeoutMs`. */
  static async connect(port: number, timeoutMs = 30_000): Promise<Inspector> {
    const deadline = Date.now() + timeoutMs;
    let url: string | undefined;
    while (url === undefined) {
      try {
        const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as Array<{ webSocketDebuggerUrl: string }>;
        url = targets[0]?.webSocketDebuggerUrl;
      } catch {
        // Not listening yet.
      }
      if (url === undefined) {
        if (Date.now() > deadline) throw new Error(`no inspector on port ${port} within ${timeoutMs} ms`);
        await sleep(100);
      }
    }
    const socket = new WebSocket(url);
    await new Promise<void>((resolve, reject) => {
      socket.addEventListener("open", () => resolve(), { once: true });
      socket.addEventListener("error", () => reject(new Error(`could not open ${url}`)), { once: true });
    });
    return new Inspector(socket);
  }

  /** Sends one command and resolves with its result. */
  send<Result>(method: string, params: Record<string, unknown> = {}): Promise<Result> {
    const id = this.#nextId++;
    return new Promise<Result>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (result: unknown) => void, reject });
      this.#socket.send(JSON.stringify({ id, method, params }));
    });
  }

  /** `process.memoryUsage()` in the child's main thread. */
  async memoryUsage(): Promise<NodeMemory> {
    const { result } = await this.send<{ result: { value: string } }>("Runtime.evaluate", { expression: "JSON.stringify(process.memoryUsage())", returnByValue: true });
    return JSON.parse(result.value) as NodeMemory;
  }

  /** A full, compacting garbage collection of the main thread's heap. */
  async collectGarbage(): Promise<void> {
    await this.send("HeapProfiler.collectGarbage");
  }

  /** Takes a heap snapshot (after a GC, as V8 does) and returns it parsed. */
  async heapSnapshot(): Promise<HeapSnapshot> {
    const chunks: string[] = [];
    this.#listeners.set("HeapProfiler.addHeapSnapshotChunk", (params) => chunks.push(params.chunk as string));
    try {
      await this.send("HeapProfiler.takeHeapSnapshot", { reportProgress: false });
    } finally {
      this.#listeners.delete("HeapProfiler.addHeapSnapshotChunk");
    }
    return JSON.parse(chunks.join("")) as HeapSnapshot;
  }

  close(): void {
    this.#socket.close();
  }
}

/** The parts of V8's `.heapsnapshot` format read here. */
export type HeapSnapshot = {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
};

/** Objects in a snapshot grouped by type and constructor (or string/code kind): count and self size in bytes. */
export type HeapSummary = Map<string, { count: number; size: number }>;

export function summarizeSnapshot(snapshot: HeapSnapshot): HeapSummary {
  const fields = snapshot.snapshot.meta.node_fields;
  const types = snapshot.snapshot.meta.node_types[0];
  const width = fields.length;
  const typeAt = fields.indexOf("type");
  const nameAt = fields.indexOf("name");
  const sizeAt = fields.indexOf("self_size");
  const summary: HeapSummary = new Map();
  for (let index = 0; index < snapshot.nodes.length; index += width) {
    const type = types[snapshot.nodes[index + typeAt]!]!;
    // Strings are grouped by type alone (their names are their contents).
    const name = type === "object" || type === "closure" || type === "native" ? `${type} ${snapshot.strings[snapshot.nodes[index + nameAt]!]}` : type;
    const entry = summary.get(name) ?? { count: 0, size: 0 };
    entry.count++;
    entry.size += snapshot.nodes[index + sizeAt]!;
    summary.set(name, entry);
  }
  return summary;
}

/** The groups that grew most between two summaries, by self size. */
export function growth(before: HeapSummary, after: HeapSummary, top = 15): Array<{ name: string; count: number; size: number }> {
  const rows: Array<{ name: string; count: number; size: number }> = [];
  for (const [name, entry] of after) {
    const previous = before.get(name) ?? { count: 0, size: 0 };
    rows.push({ name, count: entry.count - previous.count, size: entry.size - previous.size });
  }
  return rows.sort((a, b) => b.size - a.size).slice(0, top);
}
