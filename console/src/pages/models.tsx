/** Models: the catalog of `/v1/models` with context length, modalities, prices, parameters and status. */
import type { List, Model } from "../api.ts";
import { formatCredits, formatMoneyPrice, formatNumber, formatPrice } from "../format.ts";
import { Badge, EmptyState, ErrorState, Loading, PageHeader, useApi } from "../components/ui.tsx";

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

/** A price per million tokens: in money with the credits beside it when the server sets a credit value, else in credits. */
function Price({ pricing, name }: { pricing: Model["pricing"]; name: "prompt" | "cached_prompt" | "completion" }) {
  const credits = pricing[name];
  const money = pricing.money?.[name];
  if (money === undefined || pricing.currency === undefined || credits === 0) return <>{formatPrice(credits)}</>;
  return (
    <>
      <div data-price="money">{formatMoneyPrice(money, pricing.currency)}</div>
      <div className="muted small" data-price="credits">
        {formatCredits(credits)}
      </div>
    </>
  );
}

export function ModelsPage() {
  const models = useApi<List<Model>>("/api/models");
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
              <dl className="facts">
                <div>
                  <dt>Context</dt>
                  <dd>{formatNumber(model.context_length)} tokens</dd>
                </div>
                <div>
                  <dt>Input</dt>
                  <dd>{model.modalities.input.join(", ")}</dd>
                </div>
                <div>
                  <dt>Output</dt>
                  <dd>{model.modalities.output.join(", ")}</dd>
                </div>
                <div>
                  <dt>Prompt</dt>
                  <dd data-testid="price-prompt">
                    <Price pricing={model.pricing} name="prompt" />
                  </dd>
                </div>
                <div>
                  <dt>Cached prompt</dt>
                  <dd data-testid="price-cached_prompt">
                    <Price pricing={model.pricing} name="cached_prompt" />
                  </dd>
                </div>
                <div>
                  <dt>Completion</dt>
                  <dd data-testid="price-completion">
                    <Price pricing={model.pricing} name="completion" />
                  </dd>
                </div>
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
