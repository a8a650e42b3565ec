/**
 * Models: the catalog of `/v1/models` with what each model serves (chat, completions,
 * embeddings: from its `endpoints`), context length, modalities, an embedding model's vector
 * length, prices, parameters and status.
 */
import type { List, Model } from "../api.ts";
import { creditsToMoney, formatCredits, formatMoneyPrice, formatNumber, formatPrice, type CreditValue } from "../format.ts";
import { useCreditValue } from "../credit-value.ts";
import { Badge, EmptyState, ErrorState, Loading, PageHeader, useApi } from "../components/ui.tsx";
import { SERVICE_ENDPOINTS, servicesAt, type ModelService } from "../../../src/protocol/model-services.ts";

export function statusBadge(status: Model["status"]) {
  switch (status.state) {
    case "ready":
      return <Badge tone="green">Ready</Badge>;
    case "degraded":
      return (
        <span title={`${status.members_healthy} of ${status.members_total} upstream servers healthy`}>
          <Badge tone="amber">Degraded</Badge>
        </span>
      );
    case "loading":
      return <Badge tone="blue">Loading</Badge>;
    case "downloading":
      return <Badge tone="blue">Downloading{status.progress === undefined ? "" : ` ${Math.round(status.progress * 100)}%`}</Badge>;
    default:
      return (
        <span title={status.detail}>
          <Badge tone="red">Unavailable</Badge>
        </span>
      );
  }
}

/** Each service's name on its badge. */
const SERVICE_LABELS: Record<ModelService, string> = { chat: "Chat", completions: "Completions", embeddings: "Embeddings" };

/** What a model serves, as badges (from its `endpoints`), each with its endpoints in its tooltip; "—" when none is known. */
export function ServiceBadges({ model }: { model: Model }) {
  const services = servicesAt(model.endpoints);
  if (services.length === 0) return <span className="muted">—</span>;
  return (
    <span className="chips" role="list" aria-label={`${model.id} serves`} data-testid="model-services">
      {services.map((service) => (
        <span key={service} role="listitem" data-service={service} title={model.endpoints.filter((endpoint) => SERVICE_ENDPOINTS[service].includes(endpoint)).join(", ")}>
          <Badge tone="outline">{SERVICE_LABELS[service]}</Badge>
        </span>
      ))}
    </span>
  );
}

/**
 * An embedding model's vector length (`embeddings.dimensions`), with the shorter lengths a
 * request may ask for; undefined when the server does not say (not an embedding model, or a
 * server that does not send it).
 */
export function vectorLength(model: Model): string | undefined {
  const embeddings = model.embeddings;
  if (embeddings === undefined || embeddings.dimensions === undefined) return undefined;
  if (embeddings.dimensions === null) return "Not known yet";
  const full = `${formatNumber(embeddings.dimensions)} dimensions`;
  const shorter = embeddings.matryoshka;
  if (shorter === true) return `${full} (fewer on request)`;
  if (Array.isArray(shorter) && shorter.length > 0) return `${full} (or ${shorter.map(formatNumber).join(", ")})`;
  return full;
}

/** Whether the model serves generation (chat or completions): it has prompt, cached and completion prices. */
export function generates(model: Model): boolean {
  return servicesAt(model.endpoints).some((service) => service !== "embeddings");
}

/**
 * What an embedding's input tokens cost per million: the model's `pricing.embeddings`, with its
 * money when the server sets a credit value; else its prompt price, which embeddings are charged.
 */
function embeddingsPrice(pricing: Model["pricing"], creditValue: CreditValue | null): { credits: number; money: string | undefined } {
  if (pricing.embeddings === undefined) return { credits: pricing.prompt, money: pricing.money?.prompt };
  return { credits: pricing.embeddings, money: creditValue === null ? undefined : creditsToMoney(pricing.embeddings, creditValue) };
}

/** A price per million tokens: in money with the credits beside it when the server sets a credit value, else in credits. */
function Price({ credits, money, currency }: { credits: number; money: string | undefined; currency: string | undefined }) {
  if (money === undefined || currency === undefined || credits === 0) return <>{formatPrice(credits)}</>;
  return (
    <>
      <div data-price="money">{formatMoneyPrice(money, currency)}</div>
      <div className="muted small" data-price="credits">
        {formatCredits(credits)}
      </div>
    </>
  );
}

const PRICE_NAMES = { prompt: "Prompt", cached_prompt: "Cached prompt", completion: "Completion" } as const;

export function ModelsPage() {
  const models = useApi<List<Model>>("/api/models");
  const creditValue = useCreditValue();
  return (
    <>
      <PageHeader title="Models" description="The models this server offers. Prices are per million tokens." />
      {models.error ? (
        <ErrorState error={models.error} retry={models.reload} />
      ) : !models.data ? (
        <Loading />
      ) : models.data.data.length === 0 ? (
        <EmptyState title="No models">The operator has not configured any models.</EmptyState>
      ) : (
        <div className="model-list">
          {models.data.data.map((model) => (
            <article key={model.id} className="card model-card" aria-labelledby={`model-${model.id}`}>
              <div className="card-header">
                <div>
                  <h2 id={`model-${model.id}`} className="mono">
                    {model.id}
                  </h2>
                  <div className="muted small">by {model.owned_by}</div>
                </div>
                {statusBadge(model.status)}
              </div>
              {model.status.state === "unavailable" && model.status.detail && <p className="muted small">{model.status.detail}</p>}
              <ServiceBadges model={model} />
              <dl className="facts">
                <div>
                  <dt>Context</dt>
                  <dd>{formatNumber(model.context_length)} tokens</dd>
                </div>
                <div>
                  <dt>Input</dt>
                  <dd>{model.modalities.input.join(", ")}</dd>
                </div>
                {generates(model) && (
                  <div>
                    <dt>Output</dt>
                    <dd>{model.modalities.output.join(", ")}</dd>
                  </div>
                )}
                {vectorLength(model) !== undefined && (
                  <div>
                    <dt>Vector length</dt>
                    <dd data-testid="vector-length">{vectorLength(model)}</dd>
                  </div>
                )}
                {generates(model) &&
                  (["prompt", "cached_prompt", "completion"] as const).map((name) => (
                    <div key={name}>
                      <dt>{PRICE_NAMES[name]}</dt>
                      <dd data-testid={`price-${name}`}>
                        <Price credits={model.pricing[name]} money={model.pricing.money?.[name]} currency={model.pricing.currency} />
                      </dd>
                    </div>
                  ))}
                {/* An embedding's input tokens: priced apart (`pricing.embeddings`), or at the prompt price, shown alone for a model that serves only embeddings. */}
                {servicesAt(model.endpoints).includes("embeddings") && (!generates(model) || model.pricing.embeddings !== undefined) && (
                  <div>
                    <dt>Embedding input</dt>
                    <dd data-testid="price-embeddings">
                      <Price {...embeddingsPrice(model.pricing, creditValue)} currency={model.pricing.currency} />
                    </dd>
                  </div>
                )}
              </dl>
              <div className="chips" aria-label="Supported parameters">
                {model.supported_parameters.map((parameter) => (
                  <code key={parameter} className="chip">
                    {parameter}
                  </code>
                ))}
              </div>
            </article>
          ))}
        </div>
      )}
    </>
  );
}
