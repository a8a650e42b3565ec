import type { FastifyInstance } from "fastify";
import type { Metrics } from "../../../metrics/metrics.ts";

/** `GET /metrics`: Prometheus text format. Not behind a key; keep it off public networks. */
export function registerMetricsRoute(app: FastifyInstance, metrics: Metrics): void {
  app.get("/metrics", async function metricsText(_request, reply) {
    void reply.header("content-type", metrics.registry.contentType);
    return metrics.registry.metrics();
  });
}
