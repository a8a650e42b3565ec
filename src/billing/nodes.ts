/**
 * Serving nodes: each `turnpike serve` process registers itself and beats a heartbeat.
 * Holds placed by a node that is gone (a stale heartbeat, or a process on this host that no
 * longer runs, as after `kill -9`) are released by the sweeper.
 */
import os from "node:os";
import type { Kysely } from "kysely";
import type { Database } from "../store/schema.ts";
import { newId } from "../store/ids.ts";

/** A node whose heartbeat is older than this is considered gone (the default of `--dead-node-after`). */
export const NODE_STALE_MS = 60_000;

export async function registerNode(database: Kysely<Database>, now = Date.now()): Promise<string> {
  const id = newId("node", now);
  await database.insertInto("nodes").values({ id, hostname: os.hostname(), pid: process.pid, started_at: now, last_seen_at: now }).execute();
  return id;
}

export async function heartbeat(database: Kysely<Database>, nodeId: string, now = Date.now()): Promise<void> {
  await database.updateTable("nodes").set({ last_seen_at: now }).where("id", "=", nodeId).execute();
}

function processRuns(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Ids of nodes that are gone; their rows are removed once their holds are released. */
export async function deadNodes(database: Kysely<Database>, selfId: string, now = Date.now(), staleMs = NODE_STALE_MS): Promise<string[]> {
  const nodes = await database.selectFrom("nodes").selectAll().where("id", "!=", selfId).execute();
  const hostname = os.hostname();
  return nodes
    .filter((node) => Number(node.last_seen_at) < now - staleMs || (node.hostname === hostname && !processRuns(node.pid)))
    .map((node) => node.id);
}

export async function forgetNodes(database: Kysely<Database>, ids: readonly string[]): Promise<void> {
  if (ids.length > 0) await database.deleteFrom("nodes").where("id", "in", [...ids]).execute();
}

/**
 * Nodes that still own active holds but are no longer registered: they shut down (or were
 * forgotten) with a hold open — one whose commit went through while its answer was lost to a
 * cut connection, say. Their holds are swept like a dead node's.
 */
export async function orphanedNodes(database: Kysely<Database>): Promise<string[]> {
  const rows = await database
    .selectFrom("holds")
    .select("node_id")
    .distinct()
    .where("status", "=", "active")
    .where((expression) => expression.not(expression.exists(expression.selectFrom("nodes").select("nodes.id").whereRef("nodes.id", "=", "holds.node_id"))))
    .execute();
  return rows.map((row) => row.node_id);
}

