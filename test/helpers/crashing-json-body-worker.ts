/**
 * For tests: the JSON body worker, except that a body starting with "crash" makes the worker
 * thread exit at once (as a crash would), before the real worker sees it.
 */
import { parentPort } from "node:worker_threads";
import type { BodyJob } from "../../src/http/json-body/json-body-protocol.ts";

parentPort!.on("message", (job: BodyJob) => {
  if (Buffer.from(job.bytes.buffer, job.bytes.byteOffset, Math.min(5, job.bytes.byteLength)).toString("latin1") === "crash") process.exit(3);
});
// Imported after the listener above is in place, so that listener runs first.
await import("../../src/http/json-body/json-body-worker.ts");
