/**
 * Test support: a local HTTP server that plays Stripe's `POST /v1/checkout/sessions`, so tests
 * drive the real `stripe` library without the network. It records what the library sent.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export type RecordedStripeRequest = {
  method: string;
  path: string;
  authorization: string | undefined;
  /** The form-encoded body, e.g. `form.get("line_items[0][price_data][currency]")`. */
  form: URLSearchParams;
};

export type FakeStripeApi = {
  port: number;
  requests: RecordedStripeRequest[];
  /** Makes the next answers an error with this status and Stripe error body; `null` restores success. */
  failWith(failure: { status: number; body: unknown } | null): void;
  close(): Promise<void>;
};

async function readBody(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

function sendJson(response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text), "request-id": "req_fake" });
  response.end(text);
}

/** Starts the fake API on 127.0.0.1 at a free port. */
export async function startFakeStripeApi(): Promise<FakeStripeApi> {
  const requests: RecordedStripeRequest[] = [];
  let failure: { status: number; body: unknown } | null = null;
  let sessionCount = 0;

  const server = createServer(async (request, response) => {
    const text = await readBody(request);
    const path = (request.url ?? "/").split("?")[0] ?? "/";
    requests.push({ method: request.method ?? "", path, authorization: request.headers.authorization, form: new URLSearchParams(text) });
    if (failure !== null) {
      sendJson(response, failure.status, failure.body);
      return;
    }
    if (request.method !== "POST" || path !== "/v1/checkout/sessions") {
      sendJson(response, 404, { error: { type: "invalid_request_error", message: `Unrecognized request URL (${request.method}: ${path}).` } });
      return;
    }
    sessionCount += 1;
    const id = `cs_test_fake${sessionCount}`;
    sendJson(response, 200, {
      id,
      object: "checkout.session",
      mode: "payment",
      status: "open",
      payment_status: "unpaid",
      url: `https://checkout.stripe.com/c/pay/${id}`,
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;

  return {
    port,
    requests,
    failWith(next) {
      failure = next;
    },
    close() {
      // The stripe library keeps connections alive; cut them so the test process can exit.
      server.closeAllConnections();
      return new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve())));
    },
  };
}
