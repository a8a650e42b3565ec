/**
 * The composition root: settings in, a listening server out. Opens the store, builds the
 * catalog and its engines (models load in the background), and listens.
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import { pino, type DestinationStream, type Logger } from "pino";
import cliProgress from "cli-progress";
import type { ResolvedSettings } from "./config/load.ts";
import { Catalog, FREE, type CatalogModel } from "./catalog/catalog.ts";
import { createEngine, type EngineEnvironment } from "./engines/registry.ts";
import type { Engine } from "./engines/engine.ts";
import type { ModelEntry } from "./config/schema.ts";
import { createRuntimeLoader } from "./engines/llamacpp/runtime.ts";
import type { DownloadProgress } from "./engines/llamacpp/model-file.ts";
import { openStore } from "./store/open.ts";
import { ChangeFeed, type ChangeFeedEvent } from "./store/change-feed.ts";
import { withChangeFeed } from "./store/changes.ts";
import { VERIFIED_KEY_MAX_AGE_MS } from "./auth/verified-keys.ts";
import { buildApp, type App } from "./http/app.ts";
import { ImageUrlGuard, type HostResolver } from "./http/image-urls/image-url-guard.ts";
import { Metering } from "./billing/metering.ts";
import { createRateLimiter } from "./limits/index.ts";
import { RequestLimits } from "./limits/request-limits.ts";
import { Metrics } from "./metrics/metrics.ts";
import { startMetricsServer } from "./http/routes/metrics/server.ts";
import { MemorySignInThrottle, SIGN_UP_LIMITS, type SignInThrottle } from "./auth/sign-in-throttle.ts";
import { RedisSignInThrottle } from "./auth/redis-sign-in-throttle.ts";
import { deadNodes, forgetNodes, heartbeat, orphanedNodes, registerNode } from "./billing/nodes.ts";
import { sweepExpiredCredit } from "./billing/ledger.ts";
import { closeStaleHolds } from "./billing/lease-store.ts";
import { listPlans, syncConfigPlans } from "./billing/plans-store.ts";
import { createStripeClient, type StripeClientSettings } from "./billing/stripe/stripe-client.ts";
import { CHECKOUT_LIMITS } from "./http/routes/stripe/route.ts";
import { moneyPrices } from "./protocol/credit-value.ts";
import { sweepSessions } from "./auth/sessions.ts";
import { ResponseStore } from "./responses/store.ts";
import { BACKGROUND_STALE_MS, type StoredResponses } from "./http/routes/responses/route.ts";
import { consoleSessions } from "./http/middleware/console-session/console-session.ts";
import { createHostPolicy, WILDCARD_LISTEN } from "./http/middleware/allowed-hosts/allowed-hosts.ts";
import { forgetSetupCodes, issueSetupCode } from "./accounts/setup-code.ts";

/** Where `npm run build:console` puts the console. */
export const CONSOLE_DIRECTORY = fileURLToPath(new URL("../console/dist", import.meta.url));

/**
 * `--trust-proxy` as Fastify's `trustProxy`: a hop count (`1`: the last proxy's X-Forwarded-For
 * entry is the client), or proxy addresses/subnets, comma-separated; empty or `false`: trust none.
 * `true` believes any X-Forwarded-For a client sends (`warning` says so).
 */
export function trustProxyFrom(value: string | undefined): { trustProxy: boolean | number | string; warning?: string } {
  const text = (value ?? "").trim();
  if (text === "" || text === "false" || text === "0") return { trustProxy: false };
  if (text === "true") {
    return {
      trustProxy: true,
      warning:
        "--trust-proxy true believes any X-Forwarded-For a client sends: throttles and logs see whatever address a client claims. Give the hop count (1 for one proxy) or the proxies' addresses instead.",
    };
  }
  if (/^\d+$/.test(text)) return { trustProxy: Number(text) };
  return { trustProxy: text };
}

export type RunningServer = {
  app: App;
  catalog: Catalog;
  /** `http://host:port` */
  url: string;
  /** With `--metrics-listen`: `http://host:port/metrics` there. */
  metricsUrl?: string;
  /** Resolves when every model finished loading (or failed to). */
  modelsSettled: Promise<void>;
  /** The one-time code that makes the first admin in the console (`serve` prints it); null when an admin exists. */
  setupCode: string | null;
  /** The Responses API's stored responses (tests read its group-commit counter). */
  responses: StoredResponses;
  /**
   * Runs the usage group commit now and resolves once it is written: the records of finished
   * requests and the settlements of their holds, which otherwise land at most 100 ms after the
   * answer (tests that read the books right after a response wait for this).
   */
  usageWritten(): Promise<void>;
  /**
   * SIGTERM's stop: `/ready` answers 503 at once while requests are still served for `delayMs`
   * (the load balancer's health check needs that long to stop sending), then `close()`.
   */
  drain(delayMs: number): Promise<void>;
  /** Graceful stop: refuse new work, let running requests finish (bounded), free everything. Ends a drain's delay early. */
  close(): Promise<void>;
  /** Cuts running requests now (a second signal): they end as at the shutdown timeout, billed for what they generated. Starts `close()` if it was not. */
  abortNow(): Promise<void>;
};

/** The server's logger: JSON lines on standard output, or into `destination` (`serve`'s readable lines on a terminal). */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  const options = {
    level,
    base: { service: "turnpike" },
    redact: { paths: ["req.headers.authorization", "headers.authorization", "authorization", "key", "*.key"], censor: "[redacted]" },
  };
  return destination === undefined ? pino(options) : pino(options, destination);
}

/** Shows download progress: a bar on a terminal, a log line every 10% elsewhere. */
function progressReporter(modelId: string, logger: Logger): (progress: DownloadProgress) => void {
  if (process.stderr.isTTY) {
    const bar = new cliProgress.SingleBar(
      { format: `downloading ${modelId} [{bar}] {percentage}% | {value}/{total} MB`, stream: process.stderr, hideCursor: true },
      cliProgress.Presets.shades_classic,
    );
    let started = false;
    return ({ downloadedBytes, totalBytes }) => {
      const total = Math.max(1, Math.round(totalBytes / 1e6));
      const value = Math.round(downloadedBytes / 1e6);
      if (!started) {
        bar.start(total, value);
        started = true;
      }
      bar.setTotal(total);
      bar.update(value);
      if (downloadedBytes >= totalBytes && totalBytes > 0) bar.stop();
    };
  }
  let lastDecile = -1;
  return ({ downloadedBytes, totalBytes }) => {
    if (totalBytes <= 0) return;
    const decile = Math.floor((downloadedBytes / totalBytes) * 10);
    if (decile === lastDecile) return;
    lastDecile = decile;
    logger.info({ model: modelId, downloaded_bytes: downloadedBytes, total_bytes: totalBytes }, `downloading ${modelId}: ${decile * 10}%`);
  };
}

/**
 * What only tests change: where the Stripe client sends its calls (a local fake of Stripe's API);
 * how image URL hosts are resolved (a fake resolver, since tests cannot reach public DNS); which
 * engine serves a model (a full server on the fake engine, where a real model adds nothing).
 */
export type StartServerOptions = {
  stripeApi?: Omit<StripeClientSettings, "secretKey">;
  imageHostResolver?: HostResolver;
  /**
   * Engines to serve instead of those the settings' model entries name, not yet open (the server
   * opens and closes them): by model id, or a factory asked for each entry (undefined: the entry's
   * own engine). The entry still gives the model's id, pricing and other settings.
   */
  engines?: Readonly<Record<string, Engine>> | ((entry: ModelEntry) => Engine | undefined);
  /**
   * Log "turnpike listening" and where the setup code is (default true). `serve` turns it off on
   * a terminal, where its start banner says both.
   */
  announceStart?: boolean;
};

/** The engine `options.engines` gives for `entry`, if any. */
function suppliedEngine(engines: StartServerOptions["engines"], entry: ModelEntry): Engine | undefined {
  if (engines === undefined) return undefined;
  if (typeof engines === "function") return engines(entry);
  return Object.hasOwn(engines, entry.id) ? engines[entry.id] : undefined;
}

/** The change feed's log lines: its first start quietly, a loss and each recovery plainly. */
function changeFeedLog(logger: Logger): (event: ChangeFeedEvent) => void {
  let down = false;
  return (event) => {
    if (event.kind === "listening") {
      if (down) logger.info("the database change feed is listening again");
      else logger.debug("listening for the database's change notifications");
      down = false;
      return;
    }
    // One line an outage, not one each retry.
    if (down) return;
    down = true;
    const what = event.kind === "lost" ? "lost its connection" : "could not listen";
    logger.warn({ err: event.error }, `the database change feed ${what}: keys are read again after 1 s until it listens (retried in the background)`);
  };
}

export async function startServer(settings: ResolvedSettings, logger: Logger = createLogger(settings.log_level), options: StartServerOptions = {}): Promise<RunningServer> {
  // On a terminal (the banner announces the start) a first start's migrations are one line, not one each.
  const announce = options.announceStart !== false;
  const migrations: string[] = [];
  const database = await openStore({
    dataDir: settings.data_dir,
    databaseUrl: settings.database_url,
    onMigration: (name) => {
      migrations.push(name);
      logger[announce ? "info" : "debug"]({ migration: name }, "applied database migration");
    },
    onConnectionError: (error) => logger.warn({ err: error }, "a database connection broke; the next query reconnects"),
    queryTimeoutMs: settings.database_timeout * 1000,
    migrate: settings.auto_migrate ? "apply" : "verify",
  });
  if (!announce && migrations.length > 0) {
    logger.info(`applied ${migrations.length} database migration${migrations.length === 1 ? "" : "s"} (${migrations.length === 1 ? migrations[0] : `${migrations[0]} … ${migrations.at(-1)}`})`);
  }
  // PostgreSQL: the notifications of changed keys and accounts (`store/change-feed.ts`), which let
  // caches of keys keep them past their 1 s bound while the feed proves itself live.
  const changeFeed = settings.database_url !== "" && settings.change_feed ? new ChangeFeed({ url: settings.database_url, onEvent: changeFeedLog(logger) }) : undefined;
  if (changeFeed !== undefined) {
    await changeFeed.start();
    withChangeFeed(database, changeFeed);
  }
  await syncConfigPlans(database, settings.plans);
  let plans = await listPlans(database);
  const nodeId = await registerNode(database);
  /** The Responses API's stored responses: kept `responses_retention_days` from their creation. */
  const responses: StoredResponses = new ResponseStore(database, { retentionSeconds: settings.responses_retention_days * 24 * 60 * 60, commitWindowMs: settings.responses_commit_window });
  /** Releases holds of dead nodes (e.g. a previous process killed mid-stream), expired credit and expired stored responses; fails background responses of dead nodes. */
  const sweep = async () => {
    await heartbeat(database, nodeId);
    const dead = [...(await deadNodes(database, nodeId, Date.now(), settings.dead_node_after * 1000)), ...(await orphanedNodes(database))];
    // Holds with usage recorded against them (leases, checkpointed streams) are charged it; the rest released.
    const { charged, released } = await closeStaleHolds(database, { deadNodes: dead });
    await forgetNodes(database, dead);
    const expired = await sweepExpiredCredit(database);
    await sweepSessions(database);
    const expiredResponses = await responses.sweep();
    // A background response whose node stopped saving it (killed) ends failed; its delivered tokens were billed by its checkpoints above.
    const staleResponses = await responses.failStale(BACKGROUND_STALE_MS, "The node running this background response stopped before it finished.");
    plans = await listPlans(database);
    if (charged > 0 || released > 0 || expired > 0) logger.info({ charged_holds: charged, released_holds: released, expired_credit: expired }, "ledger sweep");
    if (expiredResponses > 0) logger.info({ deleted_responses: expiredResponses }, "expired stored responses deleted");
    if (staleResponses > 0) logger.warn({ failed_responses: staleResponses }, "background responses whose node stopped were marked failed");
  };
  await sweep();
  const sweeper = setInterval(() => sweep().catch((error: unknown) => logger.error({ err: error }, "ledger sweep failed")), settings.sweep_interval * 1000);
  sweeper.unref();
  const metering = new Metering({
    database,
    nodeId: () => nodeId,
    holdTtlMs: settings.hold_ttl * 1000,
    leases: { hotRequestsPerSecond: settings.lease_above, standingIdleMs: settings.standing_lease_idle * 1000, checkpointIntervalMs: settings.checkpoint_interval * 1000 },
    onDeferred: (event) => {
      if (event.kind === "deferred") logger.warn({ request_id: event.requestId, err: event.error }, "the database is unavailable: this request's charge will be retried until it is back");
      else if (event.kind === "settled") logger.info({ request_id: event.requestId, cost: event.cost, attempts: event.attempts }, "deferred charge settled");
      else logger.error({ request_id: event.requestId, err: event.error, attempts: event.attempts }, "gave up on a deferred charge: its hold will be released uncharged");
    },
    onBatch: (event) => {
      if (event.kind === "deferred") {
        logger.warn(
          { records: event.records, checkpoints: event.checkpoints, err: event.error },
          "the database is unavailable: usage records and checkpoints wait in memory and are retried until it is back",
        );
      }
      else if (event.kind === "written") logger.info({ records: event.records, attempts: event.attempts }, "waiting usage records written");
      else if (event.kind === "late") {
        logger.warn(
          { hold_id: event.holdId, account_id: event.accountId, key_id: event.keyId, records: event.records, charged: event.charged, short: event.short },
          "usage records landed after their credit lease was closed (swept during an outage): charged to the account directly, as far as the balance covers",
        );
      } else logger.warn({ hold_id: event.holdId, err: event.error }, "could not close a credit lease; retried at the next group commit");
    },
    onOverage: (event) =>
      logger.warn(
        { request_id: event.requestId, account_id: event.accountId, key_id: event.keyId, model: event.model, reserved: event.reserved, cost: event.cost, charged: event.charged },
        "reported usage cost more than the request's hold: the difference is charged as far as the balance covers",
      ),
  });
  const limits = new RequestLimits(createRateLimiter({ redisUrl: settings.redis_url, logger }));
  const metrics = new Metrics({
    rateLimiterDegraded: () => limits.degraded,
    deferredCharges: () => metering.deferred,
    leases: () => ({ open: metering.leases.openLeases, pendingRecords: metering.leases.pending }),
    members: () => catalog.list().map((model) => ({ model: model.id, members: model.engine.members() })),
    ...(changeFeed === undefined ? {} : { changeFeedLive: () => changeFeed.watched(VERIFIED_KEY_MAX_AGE_MS) }),
  });
  const signInThrottle: SignInThrottle = settings.redis_url === "" ? new MemorySignInThrottle() : new RedisSignInThrottle({ url: settings.redis_url, logger });
  const signUpThrottle: SignInThrottle =
    settings.redis_url === ""
      ? new MemorySignInThrottle(SIGN_UP_LIMITS)
      : new RedisSignInThrottle({ url: settings.redis_url, logger, limits: SIGN_UP_LIMITS, keyPrefix: "turnpike:signup:" });
  const checkoutThrottle: SignInThrottle =
    settings.redis_url === ""
      ? new MemorySignInThrottle(CHECKOUT_LIMITS)
      : new RedisSignInThrottle({ url: settings.redis_url, logger, limits: CHECKOUT_LIMITS, keyPrefix: "turnpike:checkout:", counted: "new checkouts" });
  const runtime = createRuntimeLoader({
    threads: settings.threads,
    gpu: settings.gpu,
    log: (level, message) => logger[level]({ source: "llama.cpp" }, message),
  });
  const startedAt = Math.floor(Date.now() / 1000);
  const reporters = new Map<string, (progress: DownloadProgress) => void>();
  const environment: EngineEnvironment = {
    dataDir: settings.data_dir,
    llama: runtime,
    contextSize: settings.context_size,
    parallel: settings.parallel,
    queueSize: settings.queue_size,
    queuePerAccount: settings.queue_per_account,
    queuePolicy: settings.queue_policy,
    threads: settings.threads,
    upstreamApiKeys: Object.fromEntries(Object.entries(settings.upstream_api_keys).map(([variable, key]) => [variable, key.reveal()])),
    hub: { endpoint: settings.hf_endpoint, ...(settings.hf_token === null ? {} : { token: settings.hf_token.reveal() }) },
    onProgress: (modelId, progress) => {
      let report = reporters.get(modelId);
      if (report === undefined) reporters.set(modelId, (report = progressReporter(modelId, logger)));
      report(progress);
    },
    onStatus: (modelId, status, source) => {
      const level = status.state === "unavailable" ? "error" : status.state === "degraded" ? "warn" : "info";
      logger[level]({ model: modelId, state: status.state, detail: "detail" in status ? status.detail : undefined, source }, `model ${modelId}: ${status.state}`);
    },
    onUpstreamEvent: (modelId, level, message, fields) => logger[level]({ model: modelId, ...fields }, message),
    onUpstreamOutcome: (modelId, memberId, outcome) => {
      metrics.countUpstream(modelId, memberId, outcome.kind, outcome.kind === "ok" && outcome.timeToFirstTokenMs !== undefined ? outcome.timeToFirstTokenMs / 1000 : undefined);
    },
    onQueueWait: (modelId, tier, waitedMs, outcome) => metrics.queueWait.child(modelId, tier, outcome).observe(waitedMs / 1000),
  };
  const creditValue = settings.credit_value;
  const models: CatalogModel[] = settings.models.map((entry) => {
    const engine = suppliedEngine(options.engines, entry) ?? createEngine(entry, environment);
    const pricing = entry.pricing
      ? { prompt: entry.pricing.prompt, cachedPrompt: entry.pricing.cached_prompt ?? entry.pricing.prompt, completion: entry.pricing.completion }
      : FREE;
    return {
      id: entry.id,
      ownedBy: entry.owned_by ?? "turnpike",
      created: startedAt,
      engine,
      configuredContextLength: entry.context_length ?? entry.context_size ?? settings.context_size,
      pricing,
      ...(creditValue === null
        ? {}
        : { moneyPricing: { currency: creditValue.currency, perMillionTokens: moneyPrices({ prompt: pricing.prompt, cached_prompt: pricing.cachedPrompt, completion: pricing.completion }, creditValue) } }),
      outputModalities: ["text"],
      ...(entry.serves === undefined ? {} : { serves: entry.serves }),
      ...(entry.pricing?.embeddings === undefined ? {} : { embeddingsPrice: entry.pricing.embeddings }),
      ...(entry.embeddings?.matryoshka === undefined ? {} : { matryoshka: entry.embeddings.matryoshka }),
    };
  });
  const catalog = new Catalog(models);
  const modelsSettled = Promise.all(models.map(({ engine }) => engine.open())).then(() => undefined);

  const publicUrl = settings.public_url !== "" ? settings.public_url.replace(/\/$/, "") : `http://${settings.host}:${settings.port}`;
  const proxies = trustProxyFrom(settings.trust_proxy);
  if (proxies.warning !== undefined) logger.warn(proxies.warning);
  // Made before listening: a failure here leaves no server behind.
  const setupCode = await issueSetupCode(database);
  const hosts = createHostPolicy({ publicUrl: settings.public_url, listenHost: settings.host, allowedHosts: settings.allowed_hosts });
  if (WILDCARD_LISTEN.has(settings.host.trim()) && settings.public_url === "" && settings.allowed_hosts === "") {
    logger.warn(
      { host: settings.host },
      "listening on every interface: requests are answered by IP address and localhost only; to reach this server by name, set --public-url (TURNPIKE_PUBLIC_URL) or --allowed-hosts (TURNPIKE_ALLOWED_HOSTS)",
    );
  }
  const metricsToken = settings.metrics_token?.reveal();
  const app = buildApp({
    catalog,
    database,
    metering,
    limits,
    metrics,
    metricsRoute: settings.metrics_listen !== "" ? { elsewhere: true } : metricsToken !== undefined ? { token: metricsToken } : {},
    signInThrottle,
    signUpThrottle,
    checkoutThrottle,
    plans: () => plans,
    refreshPlans: async () => {
      plans = await listPlans(database);
    },
    stripe: createStripeClient({ ...options.stripeApi, secretKey: settings.stripe_secret_key?.reveal() }),
    stripeWebhookSecret: settings.stripe_webhook_secret?.reveal(),
    publicUrl,
    sessions: consoleSessions({ database, hosts }),
    hosts,
    signup: settings.signup,
    maxKeysPerAccount: settings.max_keys_per_account,
    creditValue,
    responses,
    imageUrls: new ImageUrlGuard({
      policy: settings.image_urls,
      allowedHosts: settings.image_url_hosts,
      ...(options.imageHostResolver !== undefined ? { resolve: options.imageHostResolver } : {}),
    }),
    consoleDirectory: CONSOLE_DIRECTORY,
    trustProxy: proxies.trustProxy,
    logger,
    bodyLimit: settings.body_limit,
    keepAliveIntervalMs: settings.keep_alive_interval * 1000,
    stallTimeoutMs: settings.stall_timeout * 1000,
    flexMaxWaitMs: settings.flex_max_wait * 1000,
    transport: { requestTimeoutMs: settings.request_timeout * 1000, idleTimeoutMs: settings.idle_timeout * 1000, maxConnections: settings.max_connections },
  });
  const address = await app.server.listen({ host: settings.host, port: settings.port });
  const metricsServer =
    settings.metrics_listen === ""
      ? undefined
      : await startMetricsServer({
          metrics,
          listen: settings.metrics_listen,
          ...(metricsToken !== undefined ? { token: metricsToken } : {}),
          onError: (error) => logger.error({ err: error }, "could not collect the metrics"),
        }).catch(async (error: unknown) => {
          await app.server.close();
          throw error;
        });
  if (metricsServer !== undefined) logger.info({ url: metricsServer.url }, "metrics listening");
  if (announce) logger.info({ url: address, data_dir: path.resolve(settings.data_dir), models: settings.models.map((model) => model.id), threads: settings.threads }, "turnpike listening");
  if (setupCode !== null && announce) logger.info({ signup_url: `${publicUrl}/signup` }, "no admin account yet: sign up in the console with the one-time setup code printed at start-up to become the admin (or run `turnpike accounts create --admin`)");

  let closed: Promise<void> | undefined;
  let drained: Promise<void> | undefined;
  /** Ends the drain delay early (`close()` called during it). */
  let endDelay = () => {};
  let cut = false;
  /** Cuts what still runs (at the shutdown timeout, or at once on `abortNow`), once. */
  const cutRunning = (reason: string) => {
    if (cut) return;
    cut = true;
    const running = app.inFlight();
    if (running > 0) logger.warn({ requests: running, reason }, `cutting ${running} running request(s): streams end with a shutting_down error event, billed for what they generated`);
    app.abortRunning();
  };
  const drain = (delayMs: number) => {
    drained ??= (async () => {
      if (closed === undefined && delayMs > 0) {
        app.beginDraining();
        logger.info({ drain_delay_seconds: delayMs / 1000, running: app.inFlight() }, "draining: /ready answers 503 so load balancers stop sending; new requests are still served during the drain delay");
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, delayMs);
          endDelay = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
      await close();
    })();
    return drained;
  };
  const close = () => {
    endDelay();
    closed ??= (async () => {
      app.beginShutdown();
      logger.info(
        { running: app.inFlight(), shutdown_timeout_seconds: settings.shutdown_timeout },
        `stopped accepting: new requests get 503; ${app.inFlight()} request(s) still running may finish within the shutdown timeout`,
      );
      const timer = setTimeout(() => cutRunning("shutdown timeout"), settings.shutdown_timeout * 1000);
      // Connections whose last response just ended would otherwise hold the close until the
      // client's own keep-alive timeout. Once no response is pending, every connection left is
      // idle, whatever Node's bookkeeping says (a client that abandoned a request but kept its
      // connection open leaves it marked active), so all of them are closed.
      const sweep = setInterval(() => {
        if (app.inFlight() === 0) app.server.server.closeAllConnections();
        else app.server.server.closeIdleConnections();
      }, 100);
      try {
        await Promise.all([app.server.close(), metricsServer?.close()]);
      } finally {
        clearTimeout(timer);
        clearInterval(sweep);
      }
      clearInterval(sweeper);
      logger.info("no request running: flushing usage records, credit leases and stored responses");
      const unwritten = await metering.drain();
      if (unwritten > 0) logger.error({ unwritten }, "stopping with usage records or leases the database did not take: the sweeper charges what was written and releases the rest");
      const unsettled = metering.stop();
      if (unsettled > 0) logger.error({ settlements: unsettled }, "stopping with charges the database never took: their holds will be released uncharged");
      // Stored responses saved by the last requests are written before the database closes.
      await responses.drain();
      // No request runs any more: a hold of this node still active is one nobody will settle (its
      // placing commit went through while the answer was lost, or its charge was given up on).
      await closeStaleHolds(database, { deadNodes: [nodeId] }).catch((error: unknown) => logger.warn({ err: error }, "could not close this node's last holds; the other nodes' sweepers will"));
      await catalog.close();
      await limits.close();
      await signInThrottle.close?.();
      await signUpThrottle.close?.();
      await checkoutThrottle.close?.();
      if (setupCode !== null) await forgetSetupCodes(database, setupCode).catch((error: unknown) => logger.warn({ err: error }, "could not forget this node's setup code"));
      await forgetNodes(database, [nodeId]).catch((error: unknown) => logger.warn({ err: error }, "could not deregister this node; the others will once its heartbeat lapses"));
      await changeFeed?.close();
      await database.destroy();
    })();
    return closed;
  };
  const url = address.replace("[::1]", "127.0.0.1");
  const abortNow = () => {
    const closing = close();
    cutRunning("second signal");
    return closing;
  };
  const usageWritten = () => metering.leases.flush();
  return { app, catalog, url, ...(metricsServer !== undefined ? { metricsUrl: metricsServer.url } : {}), modelsSettled, setupCode, responses, usageWritten, drain, close, abortNow };
}
