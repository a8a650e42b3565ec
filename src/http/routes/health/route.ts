/** `GET /health` (the process is up) and `GET /ready` (every model is loaded); no key needed. */
import type { FastifyInstance } from "fastify";
import type { Catalog } from "../../../catalog/catalog.ts";
import { healthSchema, readinessSchema, type Health, type Readiness } from "../../../protocol/service.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

export type HealthRouteOptions = {
  catalog: Catalog;
  isClosing: () => boolean;
  /** Draining (SIGTERM's drain delay): still serving, but asking load balancers to stop sending. */
  isDraining?: () => boolean;
};

export const healthOperation = defineOperation({
  method: "get",
  path: "/health",
  tag: "Service",
  summary: "The process is up.",
  auth: "none",
  success: { status: 200, description: "`{status: \"ok\"}`." },
  response: healthSchema,
  errors: [],
  schemas: { Health: healthSchema },
  async handler(): Promise<Health> {
    return { status: "ok" };
  },
});

export const readyOperation = defineOperation({
  method: "get",
  path: "/ready",
  tag: "Service",
  summary: "Every model is loaded: 200, or 503 with each model's state.",
  auth: "none",
  success: {
    status: 200,
    description: "`{status: \"ready\", models}`: every model is ready.",
    alsoAnswered: [{ status: 503, description: "The same body while a model is not ready (`status: \"not_ready\"`) or the server is draining (`\"draining\"`: SIGTERM's drain delay, still serving requests sent anyway) or stopping (`\"shutting_down\"`)." }],
  },
  response: readinessSchema,
  errors: [],
  schemas: { Readiness: readinessSchema },
  async handler({ reply }, options: HealthRouteOptions): Promise<Readiness> {
    const models = Object.fromEntries(options.catalog.list().map((model) => [model.id, model.engine.status().state]));
    const closing = options.isClosing();
    const draining = !closing && (options.isDraining?.() ?? false);
    const isReady = !closing && !draining && options.catalog.allReady();
    void reply.code(isReady ? 200 : 503);
    return { status: isReady ? "ready" : closing ? "shutting_down" : draining ? "draining" : "not_ready", models };
  },
});

export function registerHealthRoutes(app: FastifyInstance, options: HealthRouteOptions): void {
  registerOperations(app, [healthOperation, readyOperation], { context: options });
}
