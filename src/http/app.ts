/**
 * Builds the HTTP server without listening, so tests can start it on any port.
 */
import { JsonBodyWorker, registerJsonBodyParser } from "./json-body/json-body-parser.ts";
import { unroutedRefusal } from "./transport.ts";
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from "fastify";
import type { Kysely } from "kysely";
import type { Logger } from "pino";
import type { Catalog } from "../catalog/catalog.ts";
import type { Database } from "../store/schema.ts";
import type { Metering } from "../billing/metering.ts";
import type { RequestLimits } from "../limits/request-limits.ts";
import type { Metrics } from "../metrics/metrics.ts";
import { registerMetricsRoute, type MetricsRouteOptions } from "./routes/metrics/route.ts";
import { registerOpenApiRoute } from "./routes/openapi/route.ts";
import { API_OPERATIONS } from "./routes/operations.ts";
import { registerUsageRoutes } from "./routes/usage/route.ts";
import { registerSettingsRoute } from "./routes/settings/route.ts";
import type { CreditValue } from "../protocol/credit-value.ts";
import { registerBillingRoutes } from "./routes/billing/route.ts";
import { registerBillingHistoryRoute } from "./routes/billing-history/route.ts";
import { registerUsageExportRoute } from "./routes/usage-export/route.ts";
import type Stripe from "stripe";
import type { Plan } from "../protocol/plans.ts";
import { registerStripeRoutes } from "./routes/stripe/route.ts";
import { closeCheckoutSession, findOpenCheckoutSession, grantCheckoutPurchase, recordCheckoutSession } from "../billing/stripe/purchases.ts";
import { reverseCheckoutPurchase } from "../billing/stripe/reversals.ts";
import { InvalidRequestError, RouteNotFoundError, ShuttingDownError } from "../protocol/errors.ts";
import { handleClientError, handleError, toApiError } from "./errors.ts";
import { requestIdFrom, setRequestIdHeader } from "./middleware/request-id/request-id.ts";
import { apiKeyAuth } from "./middleware/api-key-auth/api-key-auth.ts";
import { VerifiedKeys } from "../auth/verified-keys.ts";
import { accountAuth, accountIdOf, type SessionResolver } from "./middleware/account-auth/account-auth.ts";
import { registerChatCompletionsRoute } from "./routes/chat-completions/route.ts";
import { registerCompletionsRoute } from "./routes/completions/route.ts";
import { registerInfillRoute } from "./routes/infill/route.ts";
import { registerResponsesRoutes, type StoredResponses } from "./routes/responses/route.ts";
import { registerMessagesRoutes } from "./routes/messages/route.ts";
import { registerEmbeddingsRoute } from "./routes/embeddings/route.ts";
import { registerModelsRoutes } from "./routes/models/route.ts";
import { registerHealthRoutes } from "./routes/health/route.ts";
import fastifyCookie from "@fastify/cookie";
import { MemorySignInThrottle, SIGN_UP_LIMITS, type SignInThrottle } from "../auth/sign-in-throttle.ts";
import { createHostPolicy, hostRefusal, type HostPolicy } from "./middleware/allowed-hosts/allowed-hosts.ts";
import { registerAuthRoutes } from "./routes/auth/route.ts";
import { registerAccountRoute } from "./routes/account/route.ts";
import { registerKeysRoutes } from "./routes/keys/route.ts";
import { registerAdminAccountsRoutes } from "./routes/admin-accounts/route.ts";
import { registerAdminQueuesRoute } from "./routes/admin-queues/route.ts";
import { registerConsoleRoutes } from "./routes/console/route.ts";
import { registerApiModelsRoute } from "./routes/api-models/route.ts";
import { limitApiBodies, serverTimeouts, warnOfDroppedConnections, type TransportLimits } from "./transport.ts";
import type { ImageUrlGuard } from "./image-urls/image-url-guard.ts";
import { setSecurityHeaders } from "./middleware/security-headers/security-headers.ts";
import { requestLoggerFactory } from "./request-logger.ts";

declare module "fastify" {
  interface FastifyRequest {
    /** The request's rate limits were charged and their headers set (or none apply): nothing to report again. */
    rateLimitsApplied: boolean;
  }
}

export type AppOptions = {
  catalog: Catalog;
  database: Kysely<Database>;
  metering: Metering;
  limits: RequestLimits;
  metrics: Metrics;
  /** `/metrics` on this app: with a bearer token (`--metrics-token`), or not at all (`elsewhere`: `--metrics-listen`); open when absent. */
  metricsRoute?: MetricsRouteOptions;
  /** Plans on sale now. */
  plans: () => Plan[];
  /** Reloads `plans()` from the database (after an admin edits plans). */
  refreshPlans: () => Promise<void>;
  stripe: Stripe | null;
  stripeWebhookSecret: string | undefined;
  /** The server's public base URL, for payment return links. */
  publicUrl: string;
  logger: Logger;
  bodyLimit: number;
  keepAliveIntervalMs: number;
  /** A stream whose client stopped reading is cut after this (`--stall-timeout`); 30 s when not given. */
  stallTimeoutMs?: number;
  /** Transport limits (request/idle timeouts, connection cap); Node's defaults when absent. */
  transport?: TransportLimits;
  /** Console sessions for `/api` (cookies); without it `/api` takes API keys only. */
  sessions?: SessionResolver;
  /** The built web console (`console/dist`), served at `/`; without it there is no console. */
  consoleDirectory?: string;
  /** Trust `x-forwarded-*` from a reverse proxy (Fastify's `trustProxy`): true, or the proxies' addresses. */
  trustProxy?: boolean | number | string;
  /** Failed sign-ins allowed; the default throttle when absent. */
  signInThrottle?: SignInThrottle;
  /** Sign-ups allowed per address; the default (in memory) when absent. */
  signUpThrottle?: SignInThrottle;
  /** New Stripe Checkout sessions allowed per account; the default (in memory) when absent. */
  checkoutThrottle?: SignInThrottle;
  /** The Host names answered and the origins accepted; without it, the public URL's, loopback and IP addresses. */
  hosts?: HostPolicy;
  /** `--signup` (default open). */
  signup?: "open" | "closed";
  /** `--max-keys-per-account`: working keys an account may hold; absent: no cap. */
  maxKeysPerAccount?: number;
  /** What a credit is worth (`--credit-value`): prices and costs shown in money too; absent: credits only. */
  creditValue?: CreditValue | null;
  /** Which image URLs may go to vision upstreams (`--image-urls`); public https only when absent. */
  imageUrls?: ImageUrlGuard;
  /** How long a `service_tier: flex` request may wait for capacity (`--flex-max-wait`, in milliseconds); 30 s when absent. */
  flexMaxWaitMs?: number;
  /** The Responses API's stored responses; without it `/v1/responses` is not served. */
  responses?: StoredResponses;
};

export type App = {
  server: FastifyInstance;
  /** Draining: `/ready` answers 503 `draining` (load balancers stop sending), requests are still served. */
  beginDraining(): void;
  /** Stops taking requests: new ones get 503 `shutting_down`. */
  beginShutdown(): void;
  /** Aborts running generations (after the grace period). */
  abortRunning(): void;
  /** Requests whose response has not ended yet (streams included). */
  inFlight(): number;
  /** Every route registered, as Fastify saw it (the OpenAPI test checks each is documented). */
  routes(): ReadonlyArray<{ method: string; url: string }>;
};

/** Trusts the nearest `hops` addresses of X-Forwarded-For (the socket's peer is hop 0). */
function trustHops(hops: number): (address: string, hop: number) => boolean {
  return (_address, hop) => hop < hops;
}

export function buildApp(options: AppOptions): App {
  const server = Fastify({
    loggerInstance: options.logger as FastifyBaseLogger,
    // One log line per request is written by `logResponse` below, with the fields we want.
    logController: new LogController({ disableRequestLogging: true }),
    // A request's logger is made when it first writes (`request-logger.ts`).
    childLoggerFactory: requestLoggerFactory,
    genReqId: requestIdFrom,
    bodyLimit: options.bodyLimit,
    return503OnClosing: false,
    // A URL that cannot be decoded gets the same error shape as everything else.
    frameworkErrors: (error, request, reply) => {
      const bad = error.code === "FST_ERR_BAD_URL";
      handleError(bad ? new InvalidRequestError("The request URL is not valid: it holds a malformed percent-encoding.", null, "invalid_url") : error, request, reply);
    },
    clientErrorHandler: handleClientError,
    forceCloseConnections: "idle",
    ...serverTimeouts(options.transport),
    // A hop count trusts that many proxies in front of us (Fastify's types lack the number form).
    trustProxy: typeof options.trustProxy === "number" ? trustHops(options.trustProxy) : (options.trustProxy ?? false),
  });
  let closing = false;
  let draining = false;
  const shutdown = new AbortController();
  const routes: Array<{ method: string; url: string }> = [];
  server.addHook("onRoute", function collectRoute(route) {
    for (const method of [route.method].flat()) routes.push({ method, url: route.url });
  });

  // Large JSON bodies are parsed (chat requests validated too) in a worker thread.
  registerJsonBodyParser(server, new JsonBodyWorker({ logger: options.logger }));
  server.decorateRequest("apiKey", null);
  server.decorateRequest("principal", null);
  server.decorateRequest("rateLimitsApplied", false);
  server.addHook("onRoute", limitApiBodies(options.bodyLimit));
  // Connections past the cap are closed as soon as they are accepted (a monitoring probe needs a free slot too).
  if (options.transport !== undefined && options.transport.maxConnections > 0) {
    server.server.maxConnections = options.transport.maxConnections;
    server.server.on("drop", warnOfDroppedConnections(options.logger, options.transport.maxConnections));
  }
  const hosts = options.hosts ?? createHostPolicy({ publicUrl: options.publicUrl, listenHost: "", allowedHosts: "" });
  // Every request's own work, in one synchronous hook (each hook is a step of Fastify's runner, and
  // an async one a promise: the gateway bench's profile counted them):
  // - the request id and the security headers, first, so that every refusal carries them;
  // - one log line and one count per request, however it ended: answered (streams included, which
  //   Fastify's onResponse does not see; refusals while shutting down too) or cut by a client that
  //   left (status 499);
  // - the Host check (421), then refusals while shutting down (503), then a URL without a route
  //   (404), all on the headers alone.
  let inFlight = 0;
  server.addHook("onRequest", function everyRequest(request, reply, done) {
    setRequestIdHeader(request, reply);
    setSecurityHeaders(reply);
    const started = performance.now();
    inFlight++;
    reply.raw.once("close", () => {
      inFlight--;
      const status = reply.raw.writableFinished ? reply.raw.statusCode : 499;
      const elapsedMs = performance.now() - started;
      request.log.info({ method: request.method, url: request.url, status, latency_ms: Math.round(elapsedMs) }, "request");
      const route = request.routeOptions.url ?? "unmatched";
      options.metrics.countHttp(request.method, route, status, elapsedMs / 1000);
    });
    const refusal =
      hostRefusal(hosts, request) ??
      (closing && request.url !== "/health" && request.url !== "/ready" ? new ShuttingDownError() : undefined) ??
      unroutedRefusal(request, reply);
    done(refusal);
  });
  // Every /v1 response of a key with limits carries its x-ratelimit-* headers: chat completions
  // set them when they charge the limits; other responses (the model list, errors) report them
  // without charging anything.
  // Synchronous (no promise) for the responses that need nothing: those of generations, which set the headers themselves.
  server.addHook("onSend", function rateLimitHeadersOnV1(request, reply, payload, done) {
    const key = request.apiKey;
    if (key === null || request.rateLimitsApplied || !request.url.startsWith("/v1/")) return done(null, payload);
    // A 429 from the limiter carries the headers already.
    if (reply.hasHeader("x-ratelimit-limit-requests") || reply.hasHeader("x-ratelimit-limit-tokens")) return done(null, payload);
    if (key.rpm === null && key.tpm === null && key.accountId === null && (key.ancestorLimits ?? []).length === 0) return done(null, payload);
    void (async () => {
      try {
        // The plan as admissions read it (`standingOf`): kept for a busy or leased key, not read again per response.
        void reply.headers(await options.limits.peek({ key, plan: (await options.metering.standingOf(key)).plan }));
      } catch (error) {
        request.log.warn({ err: error }, "could not read rate limits for the response headers");
      }
      done(null, payload);
    })();
  });
  server.setErrorHandler(function countAndHandleError(error, request, reply) {
    const { code } = toApiError(error);
    if (code === "rate_limit_exceeded" || code === "insufficient_quota" || code === "engine_overloaded") options.metrics.rateLimited.inc({ reason: code });
    handleError(error, request, reply);
  });
  server.setNotFoundHandler(function notFound(request) {
    throw new RouteNotFoundError(request.method, request.url.split("?")[0] ?? request.url);
  });

  // One cache of verified keys for every route that takes keys (see `verified-keys.ts` for what holds exactly).
  const keys = new VerifiedKeys(options.database);
  const authenticate = apiKeyAuth({ database: options.database, keys });
  // Anthropic's clients send the key as `x-api-key`: the Messages routes and the model list take it too.
  const authenticateAnthropic = apiKeyAuth({ database: options.database, keys, xApiKey: true });
  const authenticateAccount = accountAuth({ database: options.database, keys, sessions: options.sessions });
  registerHealthRoutes(server, { catalog: options.catalog, isClosing: () => closing, isDraining: () => draining });
  registerMetricsRoute(server, options.metrics, options.metricsRoute);
  registerOpenApiRoute(server, { operations: API_OPERATIONS });
  registerModelsRoutes(server, { catalog: options.catalog, authenticate: authenticateAnthropic });
  const generationOptions = {
    catalog: options.catalog,
    authenticate,
    metering: options.metering,
    limits: options.limits,
    metrics: options.metrics,
    shutdownSignal: shutdown.signal,
    keepAliveIntervalMs: options.keepAliveIntervalMs,
    stallTimeoutMs: options.stallTimeoutMs ?? 30_000,
    ...(options.imageUrls !== undefined ? { imageUrls: options.imageUrls } : {}),
    ...(options.flexMaxWaitMs !== undefined ? { flexMaxWaitMs: options.flexMaxWaitMs } : {}),
  };
  registerChatCompletionsRoute(server, generationOptions);
  registerCompletionsRoute(server, generationOptions);
  registerInfillRoute(server, generationOptions);
  registerMessagesRoutes(server, { ...generationOptions, authenticate: authenticateAnthropic });
  registerEmbeddingsRoute(server, generationOptions);
  if (options.responses !== undefined) registerResponsesRoutes(server, { ...generationOptions, responses: options.responses });

  // The console's routes (`/api`, sign-in) and nothing else read and set cookies: the cookie
  // plugin's hooks run for them only, not for every `/v1` request.
  server.register(async function cookieRoutes(scope) {
    await scope.register(fastifyCookie);
    registerUsageRoutes(scope, { database: options.database, authenticate: authenticateAccount, creditValue: options.creditValue ?? null });
    registerSettingsRoute(scope, { creditValue: options.creditValue ?? null });
    registerUsageExportRoute(scope, { database: options.database, authenticate: authenticateAccount });
    registerBillingHistoryRoute(scope, { database: options.database, authenticate: authenticateAccount });
    registerBillingRoutes(scope, { database: options.database, authenticate: authenticateAccount, onPlansChanged: options.refreshPlans });
    registerStripeRoutes(scope, {
      stripe: options.stripe,
      webhookSecret: options.stripeWebhookSecret,
      plans: options.plans,
      authenticate: authenticateAccount,
      publicUrl: options.publicUrl,
      accountIdOf: (request) => accountIdOf(request, "Buying a plan"),
      recordCheckoutSession: (session) => recordCheckoutSession(options.database, session),
      grantPurchase: (purchase) => grantCheckoutPurchase(options.database, purchase),
      findOpenCheckoutSession: (input) => findOpenCheckoutSession(options.database, input),
      checkoutThrottle: options.checkoutThrottle,
      reversePurchase: (reversal) => reverseCheckoutPurchase(options.database, reversal),
      closeCheckoutSession: (closed) => closeCheckoutSession(options.database, closed),
    });

    registerAuthRoutes(scope, {
      database: options.database,
      throttle: options.signInThrottle ?? new MemorySignInThrottle(),
      signUpThrottle: options.signUpThrottle ?? new MemorySignInThrottle(SIGN_UP_LIMITS),
      hosts,
      signup: options.signup ?? "open",
    });
    registerAccountRoute(scope, { database: options.database, authenticate: authenticateAccount });
    registerKeysRoutes(scope, { database: options.database, catalog: options.catalog, authenticate: authenticateAccount, maxKeysPerAccount: options.maxKeysPerAccount });
    registerApiModelsRoute(scope, { catalog: options.catalog, authenticate: authenticateAccount });
    registerAdminAccountsRoutes(scope, { database: options.database, plans: options.plans, authenticate: authenticateAccount });
    registerAdminQueuesRoute(scope, { catalog: options.catalog, authenticate: authenticateAccount });
  });
  if (options.consoleDirectory !== undefined) registerConsoleRoutes(server, { directory: options.consoleDirectory });

  return {
    server,
    beginDraining: () => {
      draining = true;
    },
    beginShutdown: () => {
      closing = true;
    },
    inFlight: () => inFlight,
    routes: () => routes,
    abortRunning: () => {
      shutdown.abort(new ShuttingDownError());
      // Streams end on their own once aborted; connections still open after that are cut.
      setTimeout(() => server.server.closeAllConnections(), 1000).unref();
    },
  };
}
