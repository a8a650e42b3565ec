/**
 * The schemas `/openapi.json` names in `components.schemas` and refers to with `$ref`: every
 * request body and answer of `API_OPERATIONS`, and the parts several of them share (a plan, a
 * model, a completion's usage). Requests are written from their input side, answers from their
 * output side, so the two sides are two tables; a name is unique across both. A schema used
 * inside a named one but not named itself is written inline.
 */
import type { z } from "zod";
import { chatCompletionRequestSchema } from "./chat-completions/request.ts";
import { chatCompletionChunkSchema, chatCompletionSchema, choiceLogprobsSchema, usageSchema } from "./chat-completions/response.ts";
import { modelListSchema, modelObjectSchema } from "./models.ts";
import {
  accountObjectSchema,
  adminAccountSchema,
  adminApiKeyObjectSchema,
  adminCodeSchema,
  adminPlanSchema,
  apiKeyObjectSchema,
  authSetupObjectSchema,
  checkoutSessionSchema,
  createdApiKeyObjectSchema,
  createdCodeSchema,
  grantedAccountSchema,
  listSchemaOf,
  pageSchemaOf,
  planListingSchema,
  planObjectSchema,
  recentRequestsResponseSchema,
  redeemResponseSchema,
  sessionObjectSchema,
  signedOutSchema,
  usageResponseSchema,
  webhookReplySchema,
} from "./account-api.ts";
import { historyEntrySchema, historyPageSchema } from "./billing-history.ts";
import { creditValueSchema, healthSchema, openApiDocumentSchema, publicSettingsSchema, readinessSchema } from "./service.ts";
import {
  checkoutRequestSchema,
  createCodesRequestSchema,
  createKeyRequestSchema,
  createPlanRequestSchema,
  editPlanRequestSchema,
  grantPlanRequestSchema,
  redeemRequestSchema,
  signInRequestSchema,
  signUpRequestSchema,
} from "./account-api-requests.ts";

/** The list wrappers (`{object: "list", data}`) the operations answer, one object each so the document names them once. */
export const apiKeyListSchema = pageSchemaOf(apiKeyObjectSchema);
export const adminApiKeyListSchema = pageSchemaOf(adminApiKeyObjectSchema);
export const planListSchema = listSchemaOf(planListingSchema);
export const adminPlanListSchema = listSchemaOf(adminPlanSchema);
export const adminAccountListSchema = listSchemaOf(adminAccountSchema);
export const adminCodeListSchema = listSchemaOf(adminCodeSchema);
export const createdCodeListSchema = listSchemaOf(createdCodeSchema);

/** Request bodies (input side), by component name. */
export const REQUEST_SCHEMAS: Record<string, z.ZodType> = {
  ChatCompletionRequest: chatCompletionRequestSchema,
  SignUpRequest: signUpRequestSchema,
  SignInRequest: signInRequestSchema,
  CreateKeyRequest: createKeyRequestSchema,
  RedeemRequest: redeemRequestSchema,
  CheckoutRequest: checkoutRequestSchema,
  GrantPlanRequest: grantPlanRequestSchema,
  CreatePlanRequest: createPlanRequestSchema,
  EditPlanRequest: editPlanRequestSchema,
  CreateCodesRequest: createCodesRequestSchema,
};

/** Answers and their shared parts (output side), by component name. */
export const ANSWER_SCHEMAS: Record<string, z.ZodType> = {
  ChatCompletion: chatCompletionSchema,
  ChatCompletionChunk: chatCompletionChunkSchema,
  CompletionUsage: usageSchema,
  ChoiceLogprobs: choiceLogprobsSchema,
  Model: modelObjectSchema,
  ModelList: modelListSchema,
  Session: sessionObjectSchema,
  SignedOut: signedOutSchema,
  AuthSetup: authSetupObjectSchema,
  PlanTerms: planObjectSchema,
  Plan: planListingSchema,
  PlanList: planListSchema,
  AdminPlan: adminPlanSchema,
  AdminPlanList: adminPlanListSchema,
  Account: accountObjectSchema,
  GrantedAccount: grantedAccountSchema,
  AdminAccount: adminAccountSchema,
  AdminAccountList: adminAccountListSchema,
  ApiKey: apiKeyObjectSchema,
  ApiKeyList: apiKeyListSchema,
  CreatedApiKey: createdApiKeyObjectSchema,
  AdminApiKey: adminApiKeyObjectSchema,
  AdminApiKeyList: adminApiKeyListSchema,
  UsageReport: usageResponseSchema,
  RecentRequests: recentRequestsResponseSchema,
  BillingHistoryEntry: historyEntrySchema,
  BillingHistoryPage: historyPageSchema,
  RedeemResult: redeemResponseSchema,
  CheckoutSession: checkoutSessionSchema,
  WebhookReply: webhookReplySchema,
  AdminCode: adminCodeSchema,
  AdminCodeList: adminCodeListSchema,
  CreatedCode: createdCodeSchema,
  CreatedCodeList: createdCodeListSchema,
  Health: healthSchema,
  Readiness: readinessSchema,
  CreditValue: creditValueSchema,
  PublicSettings: publicSettingsSchema,
  OpenApiDocument: openApiDocumentSchema,
};
