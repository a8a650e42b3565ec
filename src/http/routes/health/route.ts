/** `GET /health` (the process is up) and `GET /ready` (every model is loaded); no key needed. */
import type { FastifyInstance } from "fastify";
import type { Catalog } from "../../../catalog/catalog.ts";
import type { Health, Readiness } from "../../../protocol/service.ts";

export type HealthRouteOptions = { catalog: Catalog; isClosing: () => boolean };

export function registerHealthRoutes(app: FastifyInstance, options: HealthRouteOptions): void {
  app.get("/health", async function health(): Promise<Health> {
    return { status: "ok" };
  });
  app.get("/ready", async function ready(_request, reply): Promise<Readiness> {
    const models = Object.fromEntries(options.catalog.list().map((model) => [model.id, model.engine.status().state]));
    const isReady = !options.isClosing() && options.catalog.allReady();
    void reply.code(isReady ? 200 : 503);
    return { status: isReady ? "ready" : options.isClosing() ? "shutting_down" : "not_ready", models };
  });
}
