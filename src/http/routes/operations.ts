/**
 * Every operation of `/v1` and `/api` (and the service routes beside them), in the order
 * `/openapi.json` lists them. Each is declared beside its handler, in its route's folder; this is
 * only the list. A new route adds its operations here (see `http/operation.ts`). Tests check that
 * every route the server registers is in it, that every example passes its schema, and that real
 * answers pass (and declare every field of) their response schemas.
 */
import { componentSchemasOf, openApiDocumentOf, type ApiOperation } from "../../protocol/openapi.ts";
import { showAccountOperation } from "./account/route.ts";
import { ADMIN_ACCOUNT_OPERATIONS, ADMIN_KEY_OPERATIONS } from "./admin-accounts/route.ts";
import { listQueuesOperation } from "./admin-queues/route.ts";
import { listModelsForConsoleOperation } from "./api-models/route.ts";
import { AUTH_OPERATIONS } from "./auth/route.ts";
import { billingHistoryOperation } from "./billing-history/route.ts";
import { ADMIN_PLAN_OPERATIONS, BILLING_OPERATIONS } from "./billing/route.ts";
import { chatCompletionsOperation } from "./chat-completions/operation.ts";
import { completionsOperation } from "./completions/operation.ts";
import { INFILL_OPERATIONS } from "./infill/operation.ts";
import { RESPONSES_OPERATIONS } from "./responses/operation.ts";
import { MESSAGES_OPERATIONS } from "./messages/operation.ts";
import { embeddingsOperation } from "./embeddings/operation.ts";
import { healthOperation, readyOperation } from "./health/route.ts";
import { createKeyOperation, listKeysOperation, revokeKeyOperation } from "./keys/route.ts";
import { metricsOperation } from "./metrics/route.ts";
import { listModelsOperation, retrieveModelOperation } from "./models/route.ts";
import { openApiOperation } from "./openapi/route.ts";
import { settingsOperation } from "./settings/route.ts";
import { checkoutOperation, stripeWebhookOperation } from "./stripe/route.ts";
import { exportUsageOperation } from "./usage-export/route.ts";
import { recentRequestsOperation, usageOperation } from "./usage/route.ts";

export const API_OPERATIONS: readonly ApiOperation[] = [
  chatCompletionsOperation,
  completionsOperation,
  ...INFILL_OPERATIONS,
  ...RESPONSES_OPERATIONS,
  ...MESSAGES_OPERATIONS,
  embeddingsOperation,
  listModelsOperation,
  retrieveModelOperation,
  listModelsForConsoleOperation,
  ...AUTH_OPERATIONS,
  showAccountOperation,
  listKeysOperation,
  createKeyOperation,
  revokeKeyOperation,
  usageOperation,
  recentRequestsOperation,
  exportUsageOperation,
  billingHistoryOperation,
  ...BILLING_OPERATIONS,
  checkoutOperation,
  stripeWebhookOperation,
  ...ADMIN_ACCOUNT_OPERATIONS,
  ...ADMIN_KEY_OPERATIONS,
  ...ADMIN_PLAN_OPERATIONS,
  listQueuesOperation,
  healthOperation,
  readyOperation,
  metricsOperation,
  settingsOperation,
  openApiOperation,
];

/** The schemas the operations name, by name: `components.schemas` of the document. */
export const { requests: REQUEST_SCHEMAS, answers: ANSWER_SCHEMAS } = componentSchemasOf(API_OPERATIONS);

/** The OpenAPI document of `operations` (every operation when not given). `version` is the server's. */
export function buildOpenApiDocument(options: { version: string; operations?: readonly ApiOperation[] }): Record<string, unknown> {
  return openApiDocumentOf(options.operations ?? API_OPERATIONS, options.version);
}
