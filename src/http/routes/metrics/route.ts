import type { FastifyInstance } from "fastify";
import type { Metrics } from "../../../metrics/metrics.ts";
import { RouteNotFoundError } from "../../../protocol/errors.ts";
import { defineOperation, registerOperations } from "../../operation.ts";
import { carriesMetricsToken, invalidMetricsTokenError } from "./access.ts";

export type MetricsRouteOptions = {
  /** `--metrics-token`: when set, only requests carrying it as a bearer token are answered. */
  token?: string;
  /** `--metrics-listen`: served on a listener of its own; here `/metrics` is an unknown URL (not the console's page). */
  elsewhere?: boolean;
};

/**
 * `GET /metrics`: Prometheus text format. No API key; behind `--metrics-token` when one is set
 * (else keep it off public networks, or serve it elsewhere with `--metrics-listen`).
 */
export const metricsOperation = defineOperation({
  method: "get",
  path: "/metrics",
  tag: "Service",
  summary: "Prometheus metrics: no API key; with `--metrics-token`, `Authorization: Bearer <token>`; with `--metrics-listen`, served on that address only.",
  auth: "none",
  success: { status: 200, description: "Prometheus text format.", contentType: "text/plain" },
  errors: ["invalid_metrics_token"],
  async handler({ request, reply }, { metrics, options }: { metrics: Metrics; options: MetricsRouteOptions }) {
    if (options.elsewhere === true) throw new RouteNotFoundError(request.method, "/metrics");
    if (options.token !== undefined && !carriesMetricsToken(request.headers.authorization, options.token)) throw invalidMetricsTokenError();
    void reply.header("content-type", metrics.registry.contentType);
    return metrics.registry.metrics();
  },
});

/** Registers `GET /metrics` (`metricsOperation`). */
export function registerMetricsRoute(app: FastifyInstance, metrics: Metrics, options: MetricsRouteOptions = {}): void {
  registerOperations(app, [metricsOperation], { context: { metrics, options } });
}
