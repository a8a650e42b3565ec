/**
 * Admission of one generation request of any dialect (and, through `admitInOrder`, of any metered
 * request: embeddings), cheapest refusal first, free of HTTP: nothing the request
 * controls is translated (schemas), built (grammars), rendered (templates) or tokenized before
 * the key may use the model, its rate limits admit it and its account could pay. In order:
 *
 * 1. parse and map (linear in the body, which the request caps bound);
 * 2. model permission, then the service tier (403: the plan must offer the tier asked for; `auto`
 *    is `default`), which sets the request's queue ticket and the price multiplier the quota
 *    pre-check, the hold and the charge are at;
 * 3. rate limits on a lower bound of the tokens (429), from the engine's cheap `boundPrompt`;
 * 4. a quota pre-check on the lower bounds, writing nothing (429 `insufficient_quota`);
 * 5. the image URL policy (400 `image_url_not_allowed`; looks up image hosts, a few seconds at
 *    most): before `prepare`, which may already send the messages upstream to count them;
 * 6. the engine's `prepare` (the expensive work), then the exact rate-limit charge and the hold.
 *
 * Rate limits charge the lower bound first and are raised to the exact count once the prompt is
 * tokenized (or, when every limit can take it, a likelier count learnt from the engine's recent
 * prompts, brought to the exact one after: usually a give-back off the path instead of a second
 * charge on it; see `likelyPromptTokens`). Not the upper bound: it counts every byte as a token
 * plus the template's overheads, so it would refuse as "too large" requests that fit a small
 * tokens-per-minute limit, and crowd out concurrent requests until the refund. The lower bound already refuses a key over its
 * request limit or out of tokens before the expensive work; what it lets through is bounded by
 * the request caps, and the raise still refuses it over the limit. A request refused after its
 * limits admitted it (a 400 from `prepare`, a quota refusal) gets its tokens back but keeps its
 * request counted: a flood of bad requests is rate limited too.
 */
import type { ApiKeyRecord } from "../../auth/api-keys.ts";
import type { Admission, Metering } from "../../billing/metering.ts";
import type { QueueTicket } from "../../engines/fair-queue.ts";
import type { RequestedServiceTier, ServiceTier } from "../../protocol/service-tiers.ts";
import type { Catalog, CatalogModel } from "../../catalog/catalog.ts";
import type { LimitAdmission, RequestLimits } from "../../limits/request-limits.ts";
import { ImageUrlGuard } from "../image-urls/image-url-guard.ts";
import { cheapBound, notePromptCount, type CheapBound } from "./cheap-bound.ts";
import type { GenerationJob, ParsedGeneration } from "./dialect.ts";

export type AdmitDependencies = {
  catalog: Catalog;
  metering: Metering;
  limits: RequestLimits;
  /** Which image URLs may go upstream (`--image-urls`); the default policy (public https) when absent. */
  imageUrls?: ImageUrlGuard;
  /** How long a `flex` request may wait for capacity (`--flex-max-wait`, in milliseconds); 30 s when absent. */
  flexMaxWaitMs?: number;
};

const DEFAULT_FLEX_MAX_WAIT_MS = 30_000;

const DEFAULT_IMAGE_URLS = new ImageUrlGuard({ policy: "public-https" });

export type AdmitRequest = {
  /** The request body as received (validated here). */
  body: unknown;
  key: ApiKeyRecord;
  requestId: string;
  /** The request was counted against the requests-per-minute limits on its headers already (a large body). */
  requestCounted?: boolean;
  /** Called once rate limits admitted the request, before anything else may refuse it (for response headers). */
  onLimited?: (limited: LimitAdmission) => void;
  /** Told of a rate-limit refund that failed (the request goes on). */
  onRefundError?: (error: unknown) => void;
};

export type AdmittedGeneration<Shape> = {
  job: GenerationJob<Shape>;
  /** The rate-limit charge: `finish` it with the tokens used when the request ends. */
  limited: LimitAdmission;
  /** The hold: `settle` it when the request ends. */
  admission: Admission;
  /** Whose share it draws on and in which band it waits: handed to the engine with `start`. */
  ticket: QueueTicket;
  /** The tier it is served in (what the reply's `service_tier` says). */
  serviceTier: ServiceTier;
};

/** What `admitInOrder` admitted: the work, the rate-limit charge, the hold, the queue ticket and the served tier. */
export type Admitted<Work> = { work: Work; limited: LimitAdmission; admission: Admission; ticket: QueueTicket; serviceTier: ServiceTier };

/**
 * What one admission needs of its request, whatever the endpoint (a generation of any dialect, an
 * embeddings request): the steps `admitInOrder` runs in the file's order.
 */
export type AdmissionSteps<Work> = {
  /** The model the request is billed for (its prices are the hold's; its id the permission's). */
  model: CatalogModel;
  /** The service tier asked for; absent: `auto` (the default tier). */
  serviceTier?: RequestedServiceTier;
  /** The cheap lower bounds (may throw `ModelNotReadyError`): run once the key may use the model. */
  least(): { tokens: number; promptTokens: number; completionTokens: number; likelyTokens?: number };
  /** The expensive work (checks that must precede it included), once the limits and the quota pre-check admitted the request. */
  prepare(): Promise<Work>;
  /** What the prepared work holds: the exact rate-limit charge, and the hold's prompt, per-choice completion and choices. */
  charge(work: Work): { tokens: number; promptTokens: number; maxTokens: number; choices: number; stream: boolean };
};

/**
 * Admits a request in the file's order, over any endpoint's steps: permission, rate limits on
 * the lower bound, the quota pre-check, the expensive work, the exact charge and the hold. Throws
 * the typed API error of the first check that refuses it; a refusal after the rate limits
 * admitted it gives their tokens back.
 */
export async function admitInOrder<Work>(
  dependencies: Pick<AdmitDependencies, "metering" | "limits" | "flexMaxWaitMs">,
  input: AdmitRequest,
  steps: AdmissionSteps<Work>,
): Promise<Admitted<Work>> {
  const { metering, limits } = dependencies;
  const { key } = input;
  // The plan and balance in one query: the quota pre-check below costs no round trip of its own.
  const standing = await metering.standingOf(key);
  const { plan } = standing;
  let { balance } = standing;
  metering.checkModel(key, plan, steps.model);
  const served = metering.serviceTierOf(key, plan, steps.serviceTier);
  const ticket: QueueTicket = {
    account: key.accountId ?? `key:${key.id}`,
    weight: plan?.weight ?? 1,
    tier: served.tier,
    ...(served.tier === "flex" ? { maxWaitMs: dependencies.flexMaxWaitMs ?? DEFAULT_FLEX_MAX_WAIT_MS } : {}),
  };
  const least = steps.least();
  const limited = await limits.admit({ key, plan, tokens: least.tokens, likelyTokens: least.likelyTokens, requestCounted: input.requestCounted });
  input.onLimited?.(limited);
  try {
    const quota = (credit: number | null) => ({ key, model: steps.model, balance: credit, promptTokens: least.promptTokens, completionTokens: least.completionTokens, multiplierPercent: served.multiplierPercent });
    // A balance kept in memory may be behind a top-up: never refused on without reading it again.
    if (standing.kept === true && metering.shortOfCredit(quota(balance))) ({ balance } = await metering.standingOf(key, { fresh: true }));
    metering.checkQuota(quota(balance));
    const work = await steps.prepare();
    const charge = steps.charge(work);
    await limited.raise(charge.tokens);
    const admission = await metering.admit({
      key,
      plan,
      model: steps.model,
      promptTokens: charge.promptTokens,
      maxTokens: charge.maxTokens,
      choices: charge.choices,
      requestId: input.requestId,
      stream: charge.stream,
      serviceTier: served.tier,
      multiplierPercent: served.multiplierPercent,
      balance,
    });
    return { work, limited, admission, ticket, serviceTier: served.tier };
  } catch (error) {
    await limited.finish(0).catch((refundError: unknown) => input.onRefundError?.(refundError));
    throw error;
  }
}

/**
 * Admits a request (see the file's comment for the order) or throws the typed API error of the
 * first check that refuses it; a refusal after the rate limits admitted it gives their tokens
 * back. `parse` is the dialect's (validate, find the model, map to the generation request).
 */
export async function admitGeneration<Shape>(
  dependencies: AdmitDependencies,
  input: AdmitRequest,
  parse: (catalog: Catalog, body: unknown) => ParsedGeneration<Shape>,
): Promise<AdmittedGeneration<Shape>> {
  const parsed = parse(dependencies.catalog, input.body);
  let least: CheapBound | undefined;
  const { work, limited, admission, ticket, serviceTier } = await admitInOrder(dependencies, input, {
    model: parsed.model,
    ...(parsed.serviceTier !== undefined ? { serviceTier: parsed.serviceTier } : {}),
    least: () => (least = cheapBound(parsed)),
    prepare: async (): Promise<GenerationJob<Shape>> => {
      if (parsed.imageUrls.length > 0) await (dependencies.imageUrls ?? DEFAULT_IMAGE_URLS).check(parsed.imageUrls);
      const prompt = least!.prompt;
      return { model: parsed.model, stream: parsed.stream, shape: parsed.shape, prepared: await (parsed.prepare?.(prompt) ?? parsed.model.engine.prepare(parsed.request, prompt)) };
    },
    // Every choice may use max_tokens. The prompt's count teaches the next requests' guess.
    charge: (job) => {
      if (least!.guessed) notePromptCount(parsed.model.engine, least!.prompt, job.prepared.promptTokens);
      return {
        tokens: job.prepared.promptTokens + job.prepared.maxTokens * job.prepared.choices,
        promptTokens: job.prepared.promptTokens,
        maxTokens: job.prepared.maxTokens,
        choices: job.prepared.choices,
        stream: job.stream,
      };
    },
  });
  return { job: work, limited, admission, ticket, serviceTier };
}
