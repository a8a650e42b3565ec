/**
 * `GET /api/admin/queues`: each model's queue as the node that answers sees it (queues are per
 * node: slots are local), for Admin › Models. The console imports only the types.
 */
import { z } from "zod";
import { listSchemaOf } from "./account-api.ts";

const perTier = <Item extends z.ZodType>(item: Item) => z.object({ priority: item, default: item, flex: item });

export const modelQueueSchema = z.object({
  object: z.literal("model.queue"),
  /** The model's id. */
  model: z.string(),
  /** Requests it can run at once on this node (slots, or the members' `max_in_flight`), and running now. */
  capacity: z.number().int(),
  busy: z.number().int(),
  /** Requests waiting, per service tier. */
  waiting: perTier(z.number().int()),
  /** Milliseconds the oldest waiter of each tier has waited; null when none waits. */
  oldest_wait_ms: perTier(z.number().int().nullable()),
  /** The accounts served the most tokens lately (decayed, half-life one minute), at most five: their share of the model's tokens. */
  top_accounts: z.array(z.object({ account: z.string(), share: z.number() })),
});

export type ModelQueue = z.infer<typeof modelQueueSchema>;
export const modelQueueListSchema = listSchemaOf(modelQueueSchema);
export type ModelQueueList = z.infer<typeof modelQueueListSchema>;
