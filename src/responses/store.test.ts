/**
 * Stored responses on real SQLite and this machine's real PostgreSQL: what is saved reads back
 * as it was, only to its own account; input items page like OpenAI's lists; a conversation's
 * chain is rebuilt oldest first and refused when broken or too long; saves are group-committed
 * (concurrent saves share transactions, and saves made while one is in flight join the next);
 * rows are size-capped, expire and are swept; a cancel request reaches the running node.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setImmediate as nextTurn } from "node:timers/promises";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import { QueryFaults } from "../../test/helpers/query-faults.ts";
import { newId } from "../store/ids.ts";
import {
  BrokenResponseChainError,
  InputItemCursorError,
  MAX_STORED_RESPONSE_BYTES,
  ResponseChainTooLongError,
  ResponseIdTakenError,
  ResponseStore,
  StoredResponseTooLargeError,
  type ResponseRecord,
} from "./store.ts";

const DAY_MS = 24 * 60 * 60 * 1000;

/** A clock the test moves. */
function clock(start = Date.UTC(2026, 0, 1)) {
  let time = start;
  return { now: () => time, advance: (ms: number) => (time += ms) };
}

/** A message item as the Responses API writes one. */
const message = (id: string, text: string) => ({ id, type: "message", role: "user", content: [{ type: "input_text", text }] });

function record(overrides: Partial<ResponseRecord> & { accountId: string | null; createdAt: number }): ResponseRecord {
  const id = overrides.id ?? newId("resp");
  return {
    id,
    keyId: "key_1",
    model: "stories",
    status: "completed",
    previousResponseId: null,
    background: false,
    inputItems: [message(`msg_${id}_0`, "Once upon a time")],
    response: { id, object: "response", status: overrides.status ?? "completed", output: [{ type: "message", content: [{ type: "output_text", text: "there was a café ☕" }] }] },
    ...overrides,
  };
}

for (const backend of backends) {
  describe(`stored responses (${backend})`, () => {
    let store: TestDatabase;
    const time = clock();
    let responses: ResponseStore;
    before(async () => {
      store = await openTestDatabase(backend);
      responses = new ResponseStore(store.database, { now: time.now });
    });
    after(async () => {
      await store?.close();
    });

    const rowCount = async () => Number((await store.database.selectFrom("responses").select((expression) => expression.fn.countAll().as("count")).executeTakeFirstOrThrow()).count);

    it("reads back what was saved, and the latest state after saving it again", async () => {
      const saved = record({ accountId: "acct_a", createdAt: time.now(), status: "in_progress", background: true, previousResponseId: null });
      await responses.save(saved);
      const first = await responses.get("acct_a", saved.id);
      assert.ok(first);
      assert.deepEqual(first.response, saved.response);
      assert.deepEqual(first.inputItems, saved.inputItems);
      assert.equal(first.status, "in_progress");
      assert.equal(first.background, true);
      assert.equal(first.keyId, "key_1");
      assert.equal(first.createdAt, time.now());
      assert.equal(first.updatedAt, time.now());
      assert.equal(first.expiresAt, time.now() + 30 * DAY_MS, "kept 30 days by default");
      assert.equal(first.cancelRequested, false);
      assert.equal(first.sizeBytes, Buffer.byteLength(JSON.stringify(saved.inputItems)) + Buffer.byteLength(JSON.stringify(saved.response)));

      time.advance(1500);
      const finished = { ...saved, status: "completed" as const, response: { ...saved.response, status: "completed", usage: { input_tokens: 5, output_tokens: 7 } } };
      await responses.save(finished);
      const second = await responses.get("acct_a", saved.id);
      assert.ok(second);
      assert.equal(second.status, "completed");
      assert.deepEqual(second.response, finished.response);
      assert.equal(second.createdAt, first.createdAt);
      assert.equal(second.updatedAt, first.updatedAt + 1500);
      assert.equal(second.expiresAt, first.expiresAt, "retention counts from creation");
    });

    it("shows a response to its own account only, the operator's (null) included", async () => {
      const ours = record({ accountId: "acct_a", createdAt: time.now() });
      const operators = record({ accountId: null, createdAt: time.now() });
      await Promise.all([responses.save(ours), responses.save(operators)]);
      assert.equal(await responses.get("acct_b", ours.id), undefined);
      assert.equal(await responses.get(null, ours.id), undefined);
      assert.equal(await responses.get("acct_a", operators.id), undefined);
      assert.equal((await responses.get(null, operators.id))?.id, operators.id);
      assert.equal(await responses.inputItems("acct_b", ours.id), undefined);
      assert.equal(await responses.chain("acct_b", ours.id, { maxResponses: 10 }), undefined);
      assert.equal(await responses.requestCancel("acct_b", ours.id), undefined);
      assert.equal(await responses.delete("acct_b", ours.id), false);
      assert.ok(await responses.get("acct_a", ours.id), "another account's delete left it alone");
    });

    it("refuses to overwrite another account's response of the same id, and still writes the rest of its batch", async () => {
      const theirs = record({ accountId: "acct_a", createdAt: time.now() });
      await responses.save(theirs);
      const intruder = { ...theirs, accountId: "acct_b", response: { overwritten: true } };
      const neighbour = record({ accountId: "acct_b", createdAt: time.now() });
      const [refused, written] = await Promise.allSettled([responses.save(intruder), responses.save(neighbour)]);
      assert.equal(refused.status, "rejected");
      assert.ok(refused.reason instanceof ResponseIdTakenError);
      assert.equal(written.status, "fulfilled");
      assert.deepEqual((await responses.get("acct_a", theirs.id))?.response, theirs.response);
      assert.equal(await responses.get("acct_b", theirs.id), undefined);
      assert.ok(await responses.get("acct_b", neighbour.id));
    });

    it("deletes a response once", async () => {
      const saved = record({ accountId: "acct_a", createdAt: time.now() });
      await responses.save(saved);
      assert.equal(await responses.delete("acct_a", saved.id), true);
      assert.equal(await responses.get("acct_a", saved.id), undefined);
      assert.equal(await responses.delete("acct_a", saved.id), false);
      assert.equal(await responses.inputItems("acct_a", saved.id), undefined);
    });

    describe("input items", () => {
      const saved = record({ accountId: "acct_a", createdAt: Date.UTC(2026, 0, 1), inputItems: [1, 2, 3, 4, 5].map((n) => message(`item_${n}`, `part ${n}`)) });
      const ids = (page: { data: Array<{ id: string }> } | undefined) => page?.data.map((item) => item.id);
      before(async () => {
        await responses.save(saved);
      });

      it("pages newest first by default, 20 a page", async () => {
        const page = await responses.inputItems("acct_a", saved.id);
        assert.deepEqual(page, { object: "list", data: saved.inputItems.toReversed(), first_id: "item_5", last_id: "item_1", has_more: false });
      });

      it("pages newest first with after cursors", async () => {
        const first = await responses.inputItems("acct_a", saved.id, { limit: 2, order: "desc" });
        assert.deepEqual(ids(first), ["item_5", "item_4"]);
        assert.equal(first?.first_id, "item_5");
        assert.equal(first?.last_id, "item_4");
        assert.equal(first?.has_more, true);
        const second = await responses.inputItems("acct_a", saved.id, { limit: 2, order: "desc", after: first!.last_id! });
        assert.deepEqual(ids(second), ["item_3", "item_2"]);
        assert.equal(second?.has_more, true);
        const third = await responses.inputItems("acct_a", saved.id, { limit: 2, order: "desc", after: second!.last_id! });
        assert.deepEqual(ids(third), ["item_1"]);
        assert.equal(third?.has_more, false);
        const past = await responses.inputItems("acct_a", saved.id, { limit: 2, order: "desc", after: "item_1" });
        assert.deepEqual(past, { object: "list", data: [], first_id: null, last_id: null, has_more: false });
      });

      it("pages oldest first with after cursors", async () => {
        const first = await responses.inputItems("acct_a", saved.id, { limit: 3, order: "asc" });
        assert.deepEqual(ids(first), ["item_1", "item_2", "item_3"]);
        assert.equal(first?.has_more, true);
        const second = await responses.inputItems("acct_a", saved.id, { limit: 3, order: "asc", after: "item_3" });
        assert.deepEqual(ids(second), ["item_4", "item_5"]);
        assert.equal(second?.first_id, "item_4");
        assert.equal(second?.last_id, "item_5");
        assert.equal(second?.has_more, false);
        const exact = await responses.inputItems("acct_a", saved.id, { limit: 2, order: "asc", after: "item_3" });
        assert.equal(exact?.has_more, false, "a page that ends on the last item has no more");
      });

      it("refuses a cursor that is not an item of the response, and a limit outside 1..100", async () => {
        await assert.rejects(responses.inputItems("acct_a", saved.id, { after: "item_9" }), InputItemCursorError);
        await assert.rejects(responses.inputItems("acct_a", saved.id, { limit: 0 }), RangeError);
        await assert.rejects(responses.inputItems("acct_a", saved.id, { limit: 101 }), RangeError);
        assert.equal((await responses.inputItems("acct_a", saved.id, { limit: 100 }))?.data.length, 5);
      });

      it("answers undefined for an unknown response", async () => {
        assert.equal(await responses.inputItems("acct_a", "resp_unknown"), undefined);
      });
    });

    describe("chains", () => {
      const first = record({ accountId: "acct_a", createdAt: Date.UTC(2026, 0, 1) });
      const second = record({ accountId: "acct_a", createdAt: Date.UTC(2026, 0, 1), previousResponseId: first.id });
      const third = record({ accountId: "acct_a", createdAt: Date.UTC(2026, 0, 1), previousResponseId: second.id });
      before(async () => {
        await Promise.all([first, second, third].map((saved) => responses.save(saved)));
      });

      it("rebuilds a conversation of three responses oldest first", async () => {
        const chain = await responses.chain("acct_a", third.id, { maxResponses: 3 });
        assert.deepEqual(
          chain?.map((link) => link.id),
          [first.id, second.id, third.id],
        );
        assert.deepEqual(chain?.[1]?.inputItems, second.inputItems);
        assert.deepEqual(
          (await responses.chain("acct_a", first.id, { maxResponses: 1 }))?.map((link) => link.id),
          [first.id],
        );
      });

      it("refuses a chain longer than its bound", async () => {
        await assert.rejects(responses.chain("acct_a", third.id, { maxResponses: 2 }), (error: unknown) => {
          assert.ok(error instanceof ResponseChainTooLongError);
          assert.equal(error.maxResponses, 2);
          return true;
        });
      });

      it("answers undefined for an unknown head, and names the ancestor that is gone", async () => {
        assert.equal(await responses.chain("acct_a", "resp_unknown", { maxResponses: 10 }), undefined);
        const orphan = record({ accountId: "acct_a", createdAt: time.now(), previousResponseId: "resp_never_stored" });
        await responses.save(orphan);
        await assert.rejects(responses.chain("acct_a", orphan.id, { maxResponses: 10 }), (error: unknown) => {
          assert.ok(error instanceof BrokenResponseChainError);
          assert.equal(error.missingId, "resp_never_stored");
          return true;
        });
      });

      it("refuses a chain through another account's response, naming it as gone", async () => {
        const foreign = record({ accountId: "acct_b", createdAt: time.now() });
        const continuing = record({ accountId: "acct_a", createdAt: time.now(), previousResponseId: foreign.id });
        await Promise.all([responses.save(foreign), responses.save(continuing)]);
        await assert.rejects(responses.chain("acct_a", continuing.id, { maxResponses: 10 }), (error: unknown) => error instanceof BrokenResponseChainError && error.missingId === foreign.id);
      });

      it("breaks where an ancestor was deleted", async () => {
        assert.equal(await responses.delete("acct_a", second.id), true);
        await assert.rejects(responses.chain("acct_a", third.id, { maxResponses: 10 }), (error: unknown) => error instanceof BrokenResponseChainError && error.missingId === second.id);
      });
    });

    describe("group commit", () => {
      it("writes 200 concurrent saves in one transaction", async () => {
        const before = responses.commits;
        const records = Array.from({ length: 200 }, (_, index) => record({ accountId: `acct_${index % 7}`, createdAt: time.now() }));
        await Promise.all(records.map((saved) => responses.save(saved)));
        assert.equal(responses.commits - before, 1);
        assert.equal(responses.pending, 0);
        const rows = await store.database.selectFrom("responses").select(["id", "account_id"]).where("id", "in", records.map((saved) => saved.id)).execute();
        assert.equal(rows.length, 200);
        for (const row of rows) assert.equal(row.account_id, records.find((saved) => saved.id === row.id)?.accountId);
      });

      it("gathers the saves made while a commit is in flight into the next one, the latest state of each", async () => {
        const faults = new QueryFaults(store.database);
        const gated = new ResponseStore(faults.database, { now: time.now });
        const pause = faults.pauseAfter(/^insert into "responses"/i);
        const head = record({ accountId: "acct_a", createdAt: time.now() });
        const headSaved = gated.save(head);
        await pause.reached;
        // Saves spread over many turns of the event loop, while the first commit is held open.
        const waiting: Array<Promise<void>> = [];
        const records = Array.from({ length: 100 }, () => record({ accountId: "acct_a", createdAt: time.now(), status: "in_progress" }));
        for (const saved of records) {
          waiting.push(gated.save(saved));
          await nextTurn();
        }
        // The same responses again, finished: only their latest state is written.
        for (const saved of records) waiting.push(gated.save({ ...saved, status: "completed" }));
        assert.equal(gated.pending, 100);
        pause.release();
        await Promise.all([headSaved, ...waiting]);
        assert.equal(gated.commits, 2, "one commit for the first save, one for the 200 made while it was in flight");
        const statuses = await store.database.selectFrom("responses").select("status").where("id", "in", records.map((saved) => saved.id)).execute();
        assert.deepEqual(new Set(statuses.map((row) => row.status)), new Set(["completed"]));
        assert.equal(statuses.length, 100);
      });

      it("rejects the saves of a commit that failed, and writes the next ones", async () => {
        const faults = new QueryFaults(store.database);
        const failing = new ResponseStore(faults.database, { now: time.now });
        faults.failAt(/^insert into "responses"/i);
        const lost = [record({ accountId: "acct_a", createdAt: time.now() }), record({ accountId: "acct_a", createdAt: time.now() })];
        const results = await Promise.allSettled(lost.map((saved) => failing.save(saved)));
        assert.deepEqual(
          results.map((result) => result.status),
          ["rejected", "rejected"],
        );
        for (const saved of lost) assert.equal(await failing.get("acct_a", saved.id), undefined, "nothing of the failed commit was written");
        const later = record({ accountId: "acct_a", createdAt: time.now() });
        await failing.save(later);
        assert.ok(await failing.get("acct_a", later.id));
      });
    });

    it("refuses a response over MAX_STORED_RESPONSE_BYTES and stores one just under it", async () => {
      const before = await rowCount();
      const filler = (bytes: number) => "x".repeat(bytes);
      const tooLarge = record({ accountId: "acct_a", createdAt: time.now(), response: { text: filler(MAX_STORED_RESPONSE_BYTES) } });
      await assert.rejects(responses.save(tooLarge), (error: unknown) => {
        assert.ok(error instanceof StoredResponseTooLargeError);
        assert.equal(error.maxBytes, 8 * 1024 * 1024);
        assert.ok(error.sizeBytes > MAX_STORED_RESPONSE_BYTES);
        return true;
      });
      assert.equal(await rowCount(), before, "nothing written");
      const fits = record({ accountId: "acct_a", createdAt: time.now(), response: { text: "" } });
      const overhead = Buffer.byteLength(JSON.stringify(fits.inputItems)) + Buffer.byteLength(JSON.stringify(fits.response));
      const exact = { ...fits, response: { text: filler(MAX_STORED_RESPONSE_BYTES - overhead) } };
      await responses.save(exact);
      const read = await responses.get("acct_a", exact.id);
      assert.equal(read?.sizeBytes, MAX_STORED_RESPONSE_BYTES);
      assert.equal((read?.response.text as string).length, MAX_STORED_RESPONSE_BYTES - overhead);
      assert.equal(await responses.delete("acct_a", exact.id), true);
    });

    it("hides responses past their retention, and the sweep deletes them, in batches", async () => {
      // The other tests' rows, kept 30 days from about this time, outlive this test's clock.
      const retained = clock(time.now());
      const shortLived = new ResponseStore(store.database, { now: retained.now, retentionSeconds: 60 });
      const old = Array.from({ length: 1500 }, () => record({ accountId: "acct_sweep", createdAt: retained.now() }));
      await Promise.all(old.map((saved) => shortLived.save(saved)));
      retained.advance(30_000);
      const young = record({ accountId: "acct_sweep", createdAt: retained.now() });
      await shortLived.save(young);
      retained.advance(30_000);
      assert.equal(await shortLived.get("acct_sweep", old[0]!.id), undefined, "expired: gone before it is swept");
      assert.equal(await shortLived.isCancelRequested(old[0]!.id), true, "a running node stops working on an expired response");
      assert.ok(await shortLived.get("acct_sweep", young.id));
      const before = await rowCount();
      assert.equal(await shortLived.sweep(), 1500);
      assert.equal(await rowCount(), before - 1500);
      assert.ok(await shortLived.get("acct_sweep", young.id), "not expired yet: kept");
      assert.equal(await shortLived.sweep(), 0);
      retained.advance(30_000);
      assert.equal(await shortLived.sweep(), 1);
    });

    it("flags a running background response cancelled for the node that runs it", async () => {
      const running = record({ accountId: "acct_a", createdAt: time.now(), background: true, status: "in_progress" });
      const finished = record({ accountId: "acct_a", createdAt: time.now(), background: true, status: "completed" });
      const foreground = record({ accountId: "acct_a", createdAt: time.now(), background: false, status: "in_progress" });
      await Promise.all([running, finished, foreground].map((saved) => responses.save(saved)));
      assert.equal(await responses.isCancelRequested(running.id), false);

      const cancelled = await responses.requestCancel("acct_a", running.id);
      assert.equal(cancelled?.cancelRequested, true);
      assert.equal(await responses.isCancelRequested(running.id), true);
      // The runner's next save (its progress) leaves the flag set.
      await responses.save({ ...running, response: { ...running.response, output: [] } });
      assert.equal(await responses.isCancelRequested(running.id), true);

      assert.equal((await responses.requestCancel("acct_a", finished.id))?.cancelRequested, false, "a finished response has nothing to stop");
      assert.equal((await responses.requestCancel("acct_a", foreground.id))?.cancelRequested, false, "only background responses are cancelled");
      assert.equal(await responses.isCancelRequested(finished.id), false);

      assert.equal(await responses.delete("acct_a", foreground.id), true);
      assert.equal(await responses.isCancelRequested(foreground.id), true, "a deleted response is not worth finishing");
    });

    it("tells a runner whether to go on, stop and save its cancelled state, or stop saving (deleted)", async () => {
      const running = record({ accountId: "acct_state", createdAt: time.now(), background: true, status: "in_progress" });
      await responses.save(running);
      assert.equal(await responses.runState(running.id), "running");
      await responses.requestCancel("acct_state", running.id);
      assert.equal(await responses.runState(running.id), "cancel");
      await responses.delete("acct_state", running.id);
      assert.equal(await responses.runState(running.id), "gone");
      assert.equal(await responses.runState("resp_never_saved"), "gone");
    });

    it("fails background responses whose node stopped saving them, and only those", async () => {
      const staleMs = 30_000;
      const owner = "acct_stale";
      // Earlier tests' running rows go stale first, out of the way of the counts below.
      time.advance(staleMs + 1);
      await responses.failStale(staleMs, "earlier tests");
      const saved = (overrides: Partial<ResponseRecord>) => record({ accountId: owner, createdAt: time.now(), background: true, status: "in_progress", ...overrides });
      const dead = saved({});
      const deadQueued = saved({ status: "queued" });
      const finished = saved({ status: "completed" });
      const foreground = saved({ background: false });
      await Promise.all([dead, deadQueued, finished, foreground].map((row) => responses.save(row)));
      time.advance(staleMs - 1);
      const alive = saved({});
      await responses.save(alive);
      assert.equal(await responses.failStale(staleMs, "the node running it stopped"), 0, "nothing is stale yet");
      time.advance(2);
      assert.equal(await responses.failStale(staleMs, "the node running it stopped"), 2);
      for (const row of [dead, deadQueued]) {
        const stored = (await responses.get(owner, row.id))!;
        assert.equal(stored.status, "failed");
        assert.equal(stored.response.status, "failed");
        assert.deepEqual(stored.response.error, { code: "server_error", message: "the node running it stopped" });
        assert.deepEqual(stored.response.output, row.response.output, "what it had generated stays");
        assert.equal(stored.sizeBytes, Buffer.byteLength(JSON.stringify(stored.inputItems)) + Buffer.byteLength(JSON.stringify(stored.response)));
      }
      for (const row of [finished, foreground, alive]) assert.equal((await responses.get(owner, row.id))!.status, row.status, `${row.status} ${row.background ? "background" : "foreground"} left alone`);
      // A heartbeat keeps a running one alive past the stale age.
      time.advance(staleMs - 10);
      await responses.save(alive);
      time.advance(20);
      assert.equal(await responses.failStale(staleMs, "gone"), 0);
      assert.equal((await responses.get(owner, alive.id))!.status, "in_progress");
      assert.equal(await responses.failStale(staleMs, "gone"), 0, "a failed one is failed once");
    });

    describe("deferred saves (the commit window)", () => {
      /** A store whose window stays open until the test ends it (`drain`), or a save that may not wait does. */
      let windowed: ResponseStore;
      before(() => {
        windowed = new ResponseStore(store.database, { now: time.now, commitWindowMs: 1000 });
      });
      const inDatabase = async (id: string) => (await store.database.selectFrom("responses").select("id").where("id", "=", id).executeTakeFirst()) !== undefined;

      it("keeps deferred saves in memory for the window: this node reads them, only for their account, and one commit writes them all", async () => {
        const commits = windowed.commits;
        const rows = Array.from({ length: 5 }, () => record({ accountId: "acct_window", createdAt: time.now() }));
        const saved = rows.map((row) => windowed.save(row, { deferred: true }));
        await new Promise((resolve) => setTimeout(resolve, 50));
        assert.equal(windowed.pending, 5, "still waiting for the window");
        for (const row of rows) {
          assert.equal(await inDatabase(row.id), false, "not written yet");
          const read = await windowed.get("acct_window", row.id);
          assert.deepEqual(read?.response, row.response, "read from memory");
          assert.equal(read?.cancelRequested, false);
          assert.equal(await windowed.get("acct_other", row.id), undefined, "never another account's");
          assert.equal(await windowed.get(null, row.id), undefined, "nor the operator's");
          assert.deepEqual((await windowed.inputItems("acct_window", row.id))?.data, row.inputItems.toReversed());
          assert.equal(await windowed.inputItems("acct_other", row.id), undefined);
        }
        await windowed.drain();
        await Promise.all(saved);
        assert.equal(windowed.commits - commits, 1, "drain wrote them in one commit");
        for (const row of rows) assert.ok(await inDatabase(row.id));
        assert.equal(windowed.pending, 0);
      });

      it("closes the window when it ends on its own, and at once for a save that may not wait", async () => {
        const short = new ResponseStore(store.database, { now: time.now, commitWindowMs: 20 });
        const row = record({ accountId: "acct_window", createdAt: time.now() });
        const started = performance.now();
        await short.save(row, { deferred: true });
        assert.ok(performance.now() - started >= 15, "waited for the window");
        assert.ok(await inDatabase(row.id));
        const deferred = record({ accountId: "acct_window", createdAt: time.now() });
        const urgent = record({ accountId: "acct_window", createdAt: time.now(), background: true, status: "queued" });
        const commits = windowed.commits;
        const deferredSaved = windowed.save(deferred, { deferred: true });
        await windowed.save(urgent);
        await deferredSaved;
        assert.equal(windowed.commits - commits, 1, "the waiting deferred save went with the urgent one");
        assert.ok(await inDatabase(deferred.id));
      });

      it("rebuilds a chain whose newest links are not written yet, and refuses another account's", async () => {
        const first = record({ accountId: "acct_chain", createdAt: time.now() });
        await windowed.save(first);
        const second = record({ accountId: "acct_chain", createdAt: time.now(), previousResponseId: first.id });
        const third = record({ accountId: "acct_chain", createdAt: time.now(), previousResponseId: second.id });
        const saved = [windowed.save(second, { deferred: true }), windowed.save(third, { deferred: true })];
        const chain = await windowed.chain("acct_chain", third.id, { maxResponses: 10 });
        assert.deepEqual(chain?.map((link) => link.id), [first.id, second.id, third.id], "oldest first, across memory and the database");
        assert.deepEqual((await windowed.chain("acct_chain", second.id, { maxResponses: 10 }))?.map((link) => link.id), [first.id, second.id]);
        await assert.rejects(windowed.chain("acct_chain", third.id, { maxResponses: 2 }), ResponseChainTooLongError);
        await assert.rejects(windowed.chain("acct_chain", third.id, { maxResponses: 1 }), ResponseChainTooLongError);
        assert.equal(await windowed.chain("acct_other", third.id, { maxResponses: 10 }), undefined);
        // A deferred response continuing another account's, or a deleted one, is a broken chain.
        const orphan = record({ accountId: "acct_chain", createdAt: time.now(), previousResponseId: "resp_missing" });
        const orphanSaved = windowed.save(orphan, { deferred: true });
        await assert.rejects(windowed.chain("acct_chain", orphan.id, { maxResponses: 10 }), (error: unknown) => error instanceof BrokenResponseChainError && error.missingId === "resp_missing" && error.responseId === orphan.id);
        await windowed.drain();
        await Promise.all([...saved, orphanSaved]);
        assert.deepEqual((await windowed.chain("acct_chain", third.id, { maxResponses: 10 }))?.map((link) => link.id), [first.id, second.id, third.id], "the same once written");
      });

      it("deletes a response not written yet for good: it is written first, so no later commit brings it back", async () => {
        const row = record({ accountId: "acct_window", createdAt: time.now() });
        const saved = windowed.save(row, { deferred: true });
        assert.equal(await windowed.delete("acct_other", row.id), false, "not another account's to delete");
        assert.equal(await windowed.delete("acct_window", row.id), true);
        await saved;
        await windowed.drain();
        assert.equal(await windowed.get("acct_window", row.id), undefined);
        assert.equal(await inDatabase(row.id), false);
      });

      it("answers a failed commit's deferred saves with its error and stops reading them from memory", async () => {
        const faults = new QueryFaults(store.database);
        const failing = new ResponseStore(faults.database, { now: time.now, commitWindowMs: 1000 });
        const row = record({ accountId: "acct_window", createdAt: time.now() });
        faults.failAt(/^insert into "responses"/i);
        const saved = failing.save(row, { deferred: true });
        assert.ok(await failing.get("acct_window", row.id), "in memory while it waits");
        await failing.drain();
        await assert.rejects(saved);
        assert.equal(await failing.get("acct_window", row.id), undefined, "not there: the commit failed");
      });
    });
  });
}
