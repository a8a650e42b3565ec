/**
 * Issue 19 row 2: only the network, an HTTP status or a malformed stream count against a member.
 * A body that cannot be written is the request's 400 when it is prepared; a request the HTTP
 * client refuses to send for a reason of ours is a 500 for that request and leaves every member
 * as healthy as it was (it used to count as a connect failure on each member tried).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { FaultUpstream } from "../../../test/helpers/fault-upstream.ts";
import { ApiError, InvalidRequestError } from "../../protocol/errors.ts";
import type { StreamPart } from "../engine.ts";
import { createUpstreamPool } from "./pool.ts";
import type { MemberOutcome } from "./pool-types.ts";
import { serializeRequestBody } from "./request-body.ts";
import { UpstreamClient, UpstreamRequestError, isNetworkFailure } from "./upstream-client.ts";
import { startUpstreamGeneration } from "./upstream-generation.ts";

describe("failures that are not a member's", () => {
  let upstream: FaultUpstream;
  before(async () => {
    upstream = await FaultUpstream.start();
  });
  after(() => upstream.close());

  it("refuses a body that cannot be written with a 400 naming the vendor field", () => {
    const kwargs: Record<string, unknown> = { enable_thinking: true };
    kwargs.self = kwargs;
    assert.throws(
      () => serializeRequestBody({ model: "m", messages: [], chat_template_kwargs: kwargs }),
      (error: unknown) => error instanceof InvalidRequestError && error.status === 400 && error.param === "chat_template_kwargs",
    );
    assert.equal(serializeRequestBody({ model: "m", chat_template_kwargs: { enable_thinking: false } }), '{"model":"m","chat_template_kwargs":{"enable_thinking":false}}');
  });

  it("tells network failures from our own", () => {
    assert.equal(isNetworkFailure(Object.assign(new Error("refused"), { code: "ECONNREFUSED" })), true);
    assert.equal(isNetworkFailure(Object.assign(new Error("closed"), { code: "UND_ERR_SOCKET" })), true);
    assert.equal(isNetworkFailure(new RangeError("Maximum call stack size exceeded")), false);
    assert.equal(isNetworkFailure(Object.assign(new Error("invalid header"), { code: "UND_ERR_INVALID_ARG" })), false);
  });

  it("never counts a request the HTTP client would not send against the member, however often", async () => {
    const outcomes: MemberOutcome["kind"][] = [];
    const events: Array<{ level: string; message: string; fields: Record<string, unknown> }> = [];
    const pool = createUpstreamPool({ urls: [upstream.baseUrl], maxInFlight: 4, health: { failureThreshold: 3 }, onOutcome: (_member, outcome) => outcomes.push(outcome.kind) });
    // A header value undici refuses to send: our configuration's fault, not the member's.
    const client = new UpstreamClient({ connectTimeoutMs: 1000, connectionsPerOrigin: 4, apiKey: "bad\r\nkey" });
    try {
      const sent = upstream.requests.length;
      for (let attempt = 0; attempt < 6; attempt++) {
        const generation = startUpstreamGeneration(
          {
            pool,
            client,
            body: serializeRequestBody({ model: "fault-model", messages: [{ role: "user", content: "hi" }], stream: true }),
            choices: 1,
            promptTokens: 10,
            logprobs: false,
            buffered: false,
            affinity: "a",
            maxAttempts: 3,
            firstTokenTimeoutMs: 5000,
            idleTimeoutMs: 5000,
            secrets: [],
            onEvent: (level, message, fields) => events.push({ level, message, fields }),
            closing: new AbortController().signal,
          },
          AbortSignal.timeout(10_000),
        );
        const parts: StreamPart[] = [];
        await assert.rejects(
          (async () => {
            for await (const part of generation.parts) parts.push(part);
          })(),
          (error: unknown) => error instanceof ApiError && error.status === 500 && error.cause instanceof UpstreamRequestError,
        );
      }
      assert.equal(pool.state(), "ready", "the member is still healthy");
      assert.ok(outcomes.length > 0 && outcomes.every((kind) => kind === "neutral"), `outcomes: ${outcomes.join(", ")}`);
      assert.equal(upstream.requests.length, sent, "nothing reached the upstream");
      const logged = events.filter((event) => event.level === "error");
      assert.equal(logged.length, 6, "each is logged at error, as ours");
      assert.match(logged[0]!.message, /reason of ours; not counted against the member/);
      assert.doesNotMatch(JSON.stringify(events), /bad\\r\\nkey|bad\r\nkey/, "the key never reaches the log");
    } finally {
      pool.close();
      await client.close();
    }
  });
});
