/**
 * Console sessions on both stores: only the token's hash is kept, expired and deleted sessions
 * resolve to nothing, and the CSRF token belongs to one session.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createAccount } from "../accounts/accounts.ts";
import { backends, openTestDatabase, type TestDatabase } from "../../test/helpers/databases.ts";
import { createSession, csrfTokenFor, deleteAccountSessions, deleteSession, findSession, isValidCsrfToken, renewSession, sweepSessions, SESSION_TTL_MS } from "./sessions.ts";

for (const backend of backends) {
  describe(`console sessions (${backend})`, () => {
    let store: TestDatabase;
    let accountId: string;
    before(async () => {
      store = await openTestDatabase(backend);
      accountId = (await createAccount(store.database, { email: "session@example.com" })).id;
    });
    after(async () => {
      await store?.close();
    });

    it("stores only the hash of the token and finds the account by the token", async () => {
      const { token, expires } = await createSession(store.database, accountId, 1_000);
      assert.equal(expires, 1_000 + SESSION_TTL_MS);
      const rows = await store.database.selectFrom("sessions").selectAll().execute();
      assert.ok(rows.every((row) => row.token_hash !== token && !row.token_hash.includes(token)));
      const found = await findSession(store.database, token, 2_000);
      assert.deepEqual(found, { accountId, email: "session@example.com", role: "user", disabled: false });
      assert.equal(await findSession(store.database, `${token}x`, 2_000), undefined);
      assert.equal(await findSession(store.database, "", 2_000), undefined);
    });

    it("renews a session in use at most once a day, and never an expired one", async () => {
      const DAY = 24 * 60 * 60 * 1000;
      const { token } = await createSession(store.database, accountId, 0);
      assert.equal(await renewSession(store.database, token, DAY / 2), undefined, "not due within a day");
      assert.equal(await renewSession(store.database, token, 2 * DAY), 2 * DAY + SESSION_TTL_MS);
      assert.ok(await findSession(store.database, token, SESSION_TTL_MS + DAY), "alive past its first expiry");
      assert.equal(await renewSession(store.database, token, 3 * DAY + SESSION_TTL_MS), undefined, "expired sessions stay expired");
      assert.equal(await findSession(store.database, token, 3 * DAY + SESSION_TTL_MS), undefined);
    });

    it("forgets expired, signed-out and disabled-account sessions", async () => {
      const expired = await createSession(store.database, accountId, 0);
      assert.equal(await findSession(store.database, expired.token, SESSION_TTL_MS), undefined);
      await sweepSessions(store.database, SESSION_TTL_MS);
      const signedOut = await createSession(store.database, accountId);
      await deleteSession(store.database, signedOut.token);
      assert.equal(await findSession(store.database, signedOut.token), undefined);
      const first = await createSession(store.database, accountId);
      const second = await createSession(store.database, accountId);
      await deleteAccountSessions(store.database, accountId);
      assert.equal(await findSession(store.database, first.token), undefined);
      assert.equal(await findSession(store.database, second.token), undefined);
    });
  });
}

describe("CSRF tokens", () => {
  it("accept the session's own token only", () => {
    const token = csrfTokenFor("session-a");
    assert.ok(isValidCsrfToken("session-a", token));
    assert.ok(!isValidCsrfToken("session-b", token));
    assert.ok(!isValidCsrfToken("session-a", undefined));
    assert.ok(!isValidCsrfToken("session-a", `${token}x`));
    assert.ok(!isValidCsrfToken("session-a", ""));
  });
});
