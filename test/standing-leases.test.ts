/**
 * Standing credit leases end to end (real server, real model, the openai client, SQLite and this
 * machine's PostgreSQL): a quiet key (never busy: `--lease-above` out of reach) that comes back
 * within `--standing-lease-idle` is served from a lease taken in the background, so its later
 * requests place no hold of their own before they generate; the lease closes by itself once the
 * key goes quiet, and the books are exact. An account whose balance is not many leases deep gets
 * none.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import type { Kysely } from "kysely";
import OpenAI from "openai";
import type { Database } from "../src/store/schema.ts";
import { backends, startServerOn, type ServerOnStore } from "./helpers/databases.ts";
import { billedExactly, meteredKey } from "./helpers/metered.ts";
import { storiesModel, type TestServer } from "./helpers/server.ts";

const pricing = { prompt: 1_000_000, cached_prompt: 500_000, completion: 2_000_000 };
const CREDIT = 10_000_000;
/** Four worst cases of a request below (~10 prompt tokens + 2 × 8 completion tokens, in credits) are far more than this. */
const SHALLOW_CREDIT = 2_000;

for (const backend of backends) {
  describe(`standing credit leases (${backend})`, { timeout: 120_000 }, () => {
    let server: TestServer;
    let database: Kysely<Database>;
    let started: ServerOnStore | undefined;

    before(async () => {
      started = await startServerOn(
        backend,
        {
          models: [{ id: "story", path: storiesModel, pricing }],
          plans: [
            { id: "deep", name: "Deep", price: { amount: 100, currency: "usd" }, credit: CREDIT },
            { id: "shallow", name: "Shallow", price: { amount: 1, currency: "usd" }, credit: SHALLOW_CREDIT },
          ],
        },
        { lease_above: "1000000000", standing_lease_idle: "1" },
      );
      ({ server, database } = started);
    });
    after(async () => {
      await started?.close();
    });

    const holdsOf = async (accountId: string) => database.selectFrom("holds").select(["amount", "status"]).where("account_id", "=", accountId).orderBy("created_at").execute();
    const ask = (client: OpenAI, stream: boolean) =>
      stream
        ? (async () => {
            const chunks = await client.chat.completions.create({ model: "story", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 8, temperature: 0, stream: true });
            let text = "";
            for await (const chunk of chunks) text += chunk.choices[0]?.delta.content ?? "";
            return text;
          })()
        : client.chat.completions.create({ model: "story", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 8, temperature: 0 }).then((completion) => completion.choices[0]!.message.content ?? "");

    it("serves a quiet key that comes back from a standing lease: no hold of its own after the second request, and exact books once it closes", async () => {
      const { accountId, key } = await meteredKey(database, "deep");
      const client = new OpenAI({ baseURL: server.baseURL, apiKey: key, maxRetries: 0 });
      assert.ok((await ask(client, false)).length > 0);
      assert.ok((await ask(client, true)).length > 0);
      // The second request came back within the idle time: the lease is taken after it, off its path.
      let holds = await holdsOf(accountId);
      for (let wait = 0; wait < 200 && holds.length < 3; wait++) {
        await delay(10);
        holds = await holdsOf(accountId);
      }
      assert.equal(holds.length, 3, "two requests' own holds, then the standing lease");
      const own = Number(holds[0]!.amount);
      assert.equal(Number(holds[1]!.amount), own, "the second request held its own worst case too");
      assert.ok(Number(holds[2]!.amount) >= 4 * own, "the standing lease holds four worst cases");
      for (let index = 0; index < 6; index++) assert.ok((await ask(client, index % 2 === 1)).length > 0);
      const later = await holdsOf(accountId);
      assert.equal(later.filter((hold) => Number(hold.amount) === own).length, 2, "six more requests placed no hold of their own");
      // Quiet for the idle time, the lease closes by itself: charged what its records say, the rest back.
      await billedExactly(database, accountId, CREDIT, pricing, 8);
    });

    it("gives an account whose balance is not twenty leases deep a hold of its own for every request", async () => {
      const { accountId, key } = await meteredKey(database, "shallow");
      const client = new OpenAI({ baseURL: server.baseURL, apiKey: key, maxRetries: 0 });
      for (let index = 0; index < 4; index++) assert.ok((await ask(client, index % 2 === 0)).length > 0);
      await delay(100);
      const holds = await holdsOf(accountId);
      assert.equal(holds.length, 4, "one hold a request, no lease");
      assert.equal(new Set(holds.map((hold) => Number(hold.amount))).size, 1, "each its own worst case");
      await billedExactly(database, accountId, SHALLOW_CREDIT, pricing, 4);
    });
  });
}
