/**
 * `GET /api/admin/queues` (admins only): each model's queue on this node, with waiting per
 * service tier, the oldest wait per tier and the accounts served most lately (Admin › Models).
 */
import type { FastifyInstance, preHandlerHookHandler } from "fastify";
import type { Catalog } from "../../../catalog/catalog.ts";
import type { EngineMember } from "../../../engines/engine.ts";
import { modelQueueListSchema, modelQueueSchema, type ModelQueue, type ModelQueueList } from "../../../protocol/queues.ts";
import { defineOperation, registerOperations } from "../../operation.ts";

export type AdminQueuesRouteOptions = { catalog: Catalog; authenticate: preHandlerHookHandler };

/** A model's queue from its engine's members (the member that holds the queue carries its snapshot). */
export function describeQueue(model: string, members: readonly EngineMember[]): ModelQueue {
  const queue = members.find((member) => member.queue !== undefined)?.queue?.();
  const round = (value: number | null) => (value === null ? null : Math.round(value));
  return {
    object: "model.queue",
    model,
    capacity: members.reduce((sum, member) => sum + member.capacity, 0),
    busy: members.reduce((sum, member) => sum + member.busy, 0),
    waiting: queue?.waiting ?? { priority: 0, default: members.reduce((sum, member) => sum + member.waiting, 0), flex: 0 },
    oldest_wait_ms: {
      priority: round(queue?.oldestWaitMs.priority ?? null),
      default: round(queue?.oldestWaitMs.default ?? null),
      flex: round(queue?.oldestWaitMs.flex ?? null),
    },
    top_accounts: queue?.topShares ?? [],
  };
}

export const listQueuesOperation = defineOperation({
  method: "get",
  path: "/api/admin/queues",
  tag: "Admin",
  summary: "Each model's queue on this node: waiting per service tier, the oldest waits, the accounts served most lately.",
  auth: "admin",
  success: { status: 200, description: "A list of `model.queue` objects." },
  response: modelQueueListSchema,
  errors: [],
  schemas: { ModelQueue: modelQueueSchema, ModelQueueList: modelQueueListSchema },
  async handler(_call, { catalog }: AdminQueuesRouteOptions): Promise<ModelQueueList> {
    return { object: "list", data: catalog.list().map((model) => describeQueue(model.id, model.engine.members())) };
  },
});

export function registerAdminQueuesRoute(app: FastifyInstance, options: AdminQueuesRouteOptions): void {
  registerOperations(app, [listQueuesOperation], { context: options, authenticate: { account: options.authenticate } });
}
