/**
 * Issue 19, rows 9 and 12, end to end on a real server, on SQLite and on PostgreSQL (there with a
 * second node on the same database, both counting checkouts in Redis), with Stripe's API played
 * by the local fake and webhook events signed with the stripe library's own test helper:
 * - row 9: checkouts are throttled per account (429 `too_many_checkouts` with `retry-after`), and
 *   an account's open session for a plan is handed out again: 200 checkouts at once from one
 *   account make at most a handful of calls to Stripe;
 * - row 12: a refund or dispute takes back the purchase's unspent credit (a partial refund its
 *   share), once per event or dispute, never below zero, what was spent logged at warn and shown
 *   in the billing history; a signature timestamp far in the future is refused; a request whose
 *   client went away mid-body is logged as such, never as "database unavailable".
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import Stripe from "stripe";
import { createAccount } from "../src/accounts/accounts.ts";
import { createApiKey } from "../src/auth/api-keys.ts";
import { checkLedger, placeHold, settleHold } from "../src/billing/ledger.ts";
import { startFakeStripeApi, type FakeStripeApi } from "../src/billing/stripe/fake-stripe-api.ts";
import { checkoutEvent, disputeEvent, refundEvent } from "../src/billing/stripe/test-events.ts";
import { openStore } from "../src/store/open.ts";
import { backends, freshPostgresSchema } from "./helpers/databases.ts";
import { assertConforms } from "./helpers/openapi.ts";
import { postJson, startTestServer, storiesModel, temporaryDirectory, type TestServer } from "./helpers/server.ts";

const secret = "whsec_test_round_two_0123456789";
const pro = { id: "pro", name: "Pro", price: { amount: 2000, currency: "usd" }, credit: 50000, days: 30 };
/** Six more plans, for six different new checkouts in a row. */
const extras = [1, 2, 3, 4, 5, 6].map((index) => ({ id: `extra-${index}`, name: `Extra ${index}`, price: { amount: 100 * index, currency: "usd" }, credit: 1000 * index, days: null }));
const stripe = new Stripe("sk_test_round_two_not_a_real_key");
const redisUrl = process.env.TURNPIKE_TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

for (const backend of backends) {
  describe(`Stripe hardening (${backend})`, () => {
    let test: TestServer;
    /** PostgreSQL only: a second node on the same database, both counting checkouts in Redis. */
    let second: TestServer | undefined;
    let stripeApi: FakeStripeApi;
    let document: Record<string, any>;
    let databaseUrl = "";
    let dropSchema: (() => Promise<void>) | undefined;

    before(async () => {
      stripeApi = await startFakeStripeApi();
      const configFile = path.join(temporaryDirectory(), "turnpike.json");
      fs.writeFileSync(configFile, JSON.stringify({ plans: [pro, ...extras] }));
      if (backend === "postgres") {
        const schema = await freshPostgresSchema();
        databaseUrl = schema.url;
        dropSchema = schema.drop;
      }
      const start = (flags: Record<string, string>) =>
        startTestServer({
          flags: { models: [storiesModel], ...flags },
          configFile,
          env: { STRIPE_SECRET_KEY: "sk_test_round_two_not_a_real_key", STRIPE_WEBHOOK_SECRET: secret },
          stripeApi: { apiHost: "127.0.0.1", apiPort: stripeApi.port, apiProtocol: "http" },
        });
      if (backend === "postgres") {
        test = await start({ database_url: databaseUrl, redis_url: redisUrl });
        second = await start({ database_url: databaseUrl, redis_url: redisUrl });
      } else {
        test = await start({});
      }
      document = (await (await fetch(`${test.url}/openapi.json`)).json()) as Record<string, any>;
    });
    after(async () => {
      await test?.close();
      await second?.close();
      await stripeApi?.close();
      await dropSchema?.();
    });

    /** Runs `action` on the server's own database (SQLite in WAL mode lets both use the file at once). */
    async function withStore<T>(action: (database: Awaited<ReturnType<typeof openStore>>) => Promise<T>): Promise<T> {
      const database = await openStore({ dataDir: test.dataDir, databaseUrl });
      try {
        return await action(database);
      } finally {
        await database.destroy();
      }
    }

    /** A new account and an account-scope key for it. */
    async function newBuyer(name: string): Promise<{ accountId: string; key: string }> {
      return withStore(async (database) => {
        const accountId = (await createAccount(database, { email: `${name}@example.com` })).id;
        return { accountId, key: (await createApiKey(database, { accountId })).key };
      });
    }

    async function checkout(key: string, plan: string, node: TestServer = test) {
      const response = await postJson(`${node.url}/api/billing/checkout`, { plan }, { authorization: `Bearer ${key}` });
      assertConforms(document, "post", "/api/billing/checkout", response.status, response.body);
      return response;
    }

    /** Signs and delivers an event; the answer must be as the document says. */
    async function deliver(event: Record<string, unknown>, timestamp?: number) {
      const payload = JSON.stringify(event);
      const signature = stripe.webhooks.generateTestHeaderString({ payload, secret, timestamp });
      const response = await postJson(`${test.url}/api/billing/stripe/webhook`, payload, { "stripe-signature": signature });
      assertConforms(document, "post", "/api/billing/stripe/webhook", response.status, response.body);
      return response;
    }

    /** The account's balance, checked against its ledger entries and its lots (no request runs). */
    async function balance(accountId: string): Promise<number> {
      const check = await withStore((database) => checkLedger(database, accountId));
      assert.equal(check.sumOfEntries, check.balance, "balance = Σ ledger entries");
      assert.equal(check.lotsRemaining, check.balance + check.heldActive, "balance = Σ credit lots");
      return check.balance;
    }

    /** Buys `pro` through checkout and a signed `checkout.session.completed` paid by `paymentIntent`. */
    async function buyPro(buyer: { accountId: string; key: string }, paymentIntent: string): Promise<string> {
      const started = await checkout(buyer.key, "pro");
      assert.equal(started.status, 200, started.text);
      const event = checkoutEvent({ id: `evt_paid_${paymentIntent}`, sessionId: started.body.id, accountId: buyer.accountId, planId: "pro", amountTotal: 2000, paymentIntent });
      const granted = await deliver(event);
      assert.equal(granted.status, 200, granted.text);
      assert.equal(granted.body.granted, true);
      return started.body.id;
    }

    /** Spends `amount` of the account's credit as a request would: a hold, then its settlement. */
    async function spend(accountId: string, amount: number): Promise<void> {
      await withStore(async (database) => {
        const holdId = await placeHold(database, { accountId, keyId: null, amount, nodeId: "test-spender", ttlMs: 60_000 });
        await settleHold(database, holdId, amount);
      });
    }

    async function history(key: string): Promise<Array<Record<string, any>>> {
      const response = await fetch(`${test.url}/api/billing/history?limit=50`, { headers: { authorization: `Bearer ${key}` } });
      assert.equal(response.status, 200);
      return ((await response.json()) as { data: Array<Record<string, any>> }).data;
    }

    describe("row 9: checkout creation is throttled per account, and an open session is reused", () => {
      it("answers 200 checkouts sent at once by one account with at most a handful of calls to Stripe", async () => {
        const buyer = await newBuyer("flood");
        const callsBefore = stripeApi.requests.length;
        const answers = await Promise.all(Array.from({ length: 200 }, () => checkout(buyer.key, "pro")));
        const calls = stripeApi.requests.length - callsBefore;
        assert.ok(calls >= 1 && calls <= 5, `${calls} calls to Stripe for 200 checkouts`);
        for (const answer of answers) assert.ok(answer.status === 200 || answer.status === 429, `${answer.status} ${answer.text}`);
        const sessions = new Set(answers.filter((answer) => answer.status === 200).map((answer) => answer.body.id));
        assert.ok(sessions.size >= 1 && sessions.size <= calls, `${sessions.size} sessions handed out`);
      });

      it("hands out the account's open session for the same plan again, without calling Stripe", async () => {
        const buyer = await newBuyer("twice");
        const first = await checkout(buyer.key, "pro");
        assert.equal(first.status, 200, first.text);
        const callsBefore = stripeApi.requests.length;
        const second = await checkout(buyer.key, "pro");
        assert.equal(second.status, 200, second.text);
        assert.deepEqual(second.body, first.body);
        assert.equal(stripeApi.requests.length, callsBefore);
        // Another account gets a session of its own.
        const other = await checkout((await newBuyer("twice-other")).key, "pro");
        assert.notEqual(other.body.id, first.body.id);
      });

      it("refuses a sixth new checkout within a minute with a 429 too_many_checkouts and retry-after, for that account only", async () => {
        const buyer = await newBuyer("many-plans");
        for (const plan of extras.slice(0, 5)) {
          const answer = await checkout(buyer.key, plan.id);
          assert.equal(answer.status, 200, answer.text);
        }
        const callsBefore = stripeApi.requests.length;
        const refused = await checkout(buyer.key, extras[5]!.id);
        assert.equal(refused.status, 429, refused.text);
        assert.equal(refused.body.error.code, "too_many_checkouts");
        assert.equal(refused.body.error.type, "rate_limit_error");
        const retryAfter = Number(refused.headers.get("retry-after"));
        assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `retry-after ${refused.headers.get("retry-after")}`);
        assert.equal(stripeApi.requests.length, callsBefore, "a refused checkout does not call Stripe");
        // The open sessions are still handed out, and other accounts are not held back.
        assert.equal((await checkout(buyer.key, extras[0]!.id)).status, 200);
        assert.equal((await checkout((await newBuyer("many-plans-other")).key, extras[5]!.id)).status, 200);
      });

      it("counts new checkouts across nodes through Redis (--redis-url)", { skip: backend === "sqlite" && "one node on SQLite" }, async () => {
        const buyer = await newBuyer(`two-nodes-${Math.random().toString(36).slice(2)}`);
        const statuses: number[] = [];
        for (const [index, plan] of extras.entries()) statuses.push((await checkout(buyer.key, plan.id, index % 2 === 0 ? test : second!)).status);
        assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429]);
      });

      it("does not hand out a session that can no longer be paid: expired, or completed with its payment clearing", async () => {
        const buyer = await newBuyer("expired");
        const first = await checkout(buyer.key, "pro");
        const expired = await deliver(checkoutEvent({ id: "evt_expired_1", type: "checkout.session.expired", paymentStatus: "unpaid", sessionId: first.body.id, accountId: buyer.accountId, planId: "pro" }));
        assert.equal(expired.status, 200, expired.text);
        const second = await checkout(buyer.key, "pro");
        assert.equal(second.status, 200, second.text);
        assert.notEqual(second.body.id, first.body.id);
        // Paid by a bank debit that has not cleared: granted later, never handed out again meanwhile.
        const pending = await deliver(checkoutEvent({ id: "evt_pending_1", paymentStatus: "unpaid", sessionId: second.body.id, accountId: buyer.accountId, planId: "pro", amountTotal: 2000, paymentIntent: "pi_pending" }));
        assert.equal(pending.status, 200, pending.text);
        const third = await checkout(buyer.key, "pro");
        assert.notEqual(third.body.id, second.body.id);
        const cleared = await deliver(checkoutEvent({ id: "evt_cleared_1", type: "checkout.session.async_payment_succeeded", sessionId: second.body.id, accountId: buyer.accountId, planId: "pro", amountTotal: 2000, paymentIntent: "pi_pending" }));
        assert.equal(cleared.body.granted, true);
        assert.equal(await balance(buyer.accountId), 50_000);
      });
    });

    describe("row 12: refunds and disputes take back the purchase's unspent credit", () => {
      it("a full refund takes back what is left, reports what was spent (log at warn, history entry), and counts once", async () => {
        const buyer = await newBuyer("refund-full");
        await buyPro(buyer, "pi_full");
        await spend(buyer.accountId, 10_000);
        assert.equal(await balance(buyer.accountId), 40_000);

        const event = refundEvent({ id: "evt_refund_full", paymentIntent: "pi_full", amount: 2000, amountRefunded: 2000 });
        for (let delivery = 0; delivery < 3; delivery++) {
          const answer = await deliver(event);
          assert.equal(answer.status, 200, answer.text);
          assert.equal(await balance(buyer.accountId), 0);
        }
        const warned = test.logs().filter((line) => line.event_id === "evt_refund_full" && line.level === 40);
        assert.equal(warned.length, 1, JSON.stringify(warned));
        assert.equal(warned[0]!.credit_spent, 10_000);
        assert.equal(warned[0]!.credit_taken, 40_000);
        assert.equal(warned[0]!.account_id, buyer.accountId);

        const refunds = (await history(buyer.key)).filter((entry) => entry.kind === "refund");
        assert.equal(refunds.length, 1);
        assert.equal(refunds[0]!.amount, -40_000);
        assert.equal(refunds[0]!.balance_after, 0);
        assert.equal(refunds[0]!.source, "refund");
        assert.match(refunds[0]!.description, /10,?000 credits? .*spent/);
      });

      it("a partial refund takes back its share of the credit; the next takes only what its running total adds", async () => {
        const buyer = await newBuyer("refund-partial");
        await buyPro(buyer, "pi_partial");
        // A quarter of the price refunded: a quarter of the credit.
        assert.equal((await deliver(refundEvent({ id: "evt_partial_1", paymentIntent: "pi_partial", amount: 2000, amountRefunded: 500 }))).status, 200);
        assert.equal(await balance(buyer.accountId), 37_500);
        // Half refunded so far: another quarter. The first event again changes nothing.
        assert.equal((await deliver(refundEvent({ id: "evt_partial_2", paymentIntent: "pi_partial", amount: 2000, amountRefunded: 1000 }))).status, 200);
        assert.equal((await deliver(refundEvent({ id: "evt_partial_1", paymentIntent: "pi_partial", amount: 2000, amountRefunded: 500 }))).status, 200);
        assert.equal(await balance(buyer.accountId), 25_000);
      });

      it("never goes below zero: credit spent from the purchase is not taken from other credit", async () => {
        const buyer = await newBuyer("refund-spent");
        await buyPro(buyer, "pi_spent");
        await spend(buyer.accountId, 50_000);
        assert.equal((await deliver(refundEvent({ id: "evt_refund_spent", paymentIntent: "pi_spent", amount: 2000, amountRefunded: 2000 }))).status, 200);
        assert.equal(await balance(buyer.accountId), 0);
        const refund = (await history(buyer.key)).find((entry) => entry.kind === "refund");
        assert.equal(refund?.amount, 0);
        assert.match(refund?.description ?? "", /50,?000 credits? .*spent/);
      });

      it("a dispute takes the credit back when it opens, and its loss takes nothing twice; a dispute won is reported", async () => {
        const buyer = await newBuyer("dispute");
        await buyPro(buyer, "pi_dispute");
        await spend(buyer.accountId, 1_000);
        const opened = await deliver(disputeEvent({ id: "evt_dispute_opened", disputeId: "dp_1", paymentIntent: "pi_dispute", amount: 2000 }));
        assert.equal(opened.status, 200, opened.text);
        assert.equal(await balance(buyer.accountId), 0);
        const lost = await deliver(disputeEvent({ id: "evt_dispute_lost", disputeId: "dp_1", paymentIntent: "pi_dispute", amount: 2000, type: "charge.dispute.closed", status: "lost" }));
        assert.equal(lost.status, 200, lost.text);
        assert.equal(await balance(buyer.accountId), 0);
        assert.equal((await history(buyer.key)).filter((entry) => entry.kind === "refund").length, 1);

        // A lost dispute whose opening was never delivered takes the credit back too.
        const other = await newBuyer("dispute-lost-only");
        await buyPro(other, "pi_dispute_2");
        await deliver(disputeEvent({ id: "evt_dispute_2_lost", disputeId: "dp_2", paymentIntent: "pi_dispute_2", amount: 2000, type: "charge.dispute.closed", status: "lost" }));
        assert.equal(await balance(other.accountId), 0);

        const won = await deliver(disputeEvent({ id: "evt_dispute_won", disputeId: "dp_1", paymentIntent: "pi_dispute", amount: 2000, type: "charge.dispute.closed", status: "won" }));
        assert.equal(won.status, 200, won.text);
        assert.ok(test.logs().some((line) => line.event_id === "evt_dispute_won" && line.level === 40));
      });

      it("acknowledges a refund of a payment Turnpike does not know, taking nothing", async () => {
        const answer = await deliver(refundEvent({ id: "evt_refund_stranger", paymentIntent: "pi_not_ours", amount: 999, amountRefunded: 999 }));
        assert.equal(answer.status, 200, answer.text);
        assert.ok(test.logs().some((line) => line.event_id === "evt_refund_stranger" && line.result === "unknown_payment"));
      });
    });

    describe("row 12: webhook signatures and aborted uploads", () => {
      it("refuses a signature timestamp ten minutes in the future", async () => {
        const buyer = await newBuyer("future");
        const started = await checkout(buyer.key, "pro");
        const event = checkoutEvent({ id: "evt_future", sessionId: started.body.id, accountId: buyer.accountId, planId: "pro", amountTotal: 2000 });
        const answer = await deliver(event, Math.floor(Date.now() / 1000) + 600);
        assert.equal(answer.status, 400, answer.text);
        assert.equal(answer.body.error.code, "invalid_signature");
        assert.equal(await balance(buyer.accountId), 0);
        // A minute ahead (clocks differ) is still fine.
        const fine = await deliver(event, Math.floor(Date.now() / 1000) + 60);
        assert.equal(fine.status, 200, fine.text);
        assert.equal(await balance(buyer.accountId), 50_000);
      });

      /** Sends the headers and part of a body, then closes the connection; returns the log lines of that request. */
      async function abortUpload(requestPath: string, headers: Record<string, string>): Promise<Array<Record<string, unknown>>> {
        const marker = `abort-${Math.random().toString(36).slice(2)}`;
        const { port } = new URL(test.url);
        const socket = net.connect(Number(port), "127.0.0.1");
        await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject));
        const head = [`POST ${requestPath} HTTP/1.1`, `Host: 127.0.0.1:${port}`, "Content-Type: application/json", "Content-Length: 100000", `x-request-id: ${marker}`, ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`)];
        socket.write(`${head.join("\r\n")}\r\n\r\n{"messages": [`);
        await new Promise((resolve) => setTimeout(resolve, 200));
        socket.destroy();
        // The server notices the close and logs the request's end; wait for that (bounded).
        const deadline = Date.now() + 10_000;
        for (;;) {
          const lines = test.logs().filter((line) => JSON.stringify(line).includes(marker));
          const reqIds = new Set(lines.map((line) => line.reqId));
          const all = test.logs().filter((line) => reqIds.has(line.reqId));
          if (all.some((line) => line.msg === "request aborted by the client" || line.msg === "database unavailable") || Date.now() > deadline) return all;
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      }

      it("logs an upload the client abandoned as client-aborted, never as a database failure", async () => {
        const buyer = await newBuyer("abort");
        for (const [requestPath, headers] of [
          ["/api/billing/stripe/webhook", {}],
          ["/v1/chat/completions", { authorization: `Bearer ${buyer.key}` }],
        ] as const) {
          const lines = await abortUpload(requestPath, headers);
          assert.ok(lines.length > 0, `no log lines for the aborted ${requestPath}`);
          assert.ok(!lines.some((line) => line.msg === "database unavailable"), `${requestPath}: ${JSON.stringify(lines)}`);
          const aborted = lines.find((line) => line.msg === "request aborted by the client");
          assert.ok(aborted !== undefined, `${requestPath}: ${JSON.stringify(lines)}`);
          assert.ok((aborted.level as number) <= 30, "logged at info or below");
        }
      });
    });
  });
}
