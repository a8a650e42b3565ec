/**
 * Anthropic's Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`): the Messages
 * dialect (`dialect.ts`) over the generation core's shared admission, run and settlement
 * (`http/generation/`), with the same cheap refusals, holds, leases, limits and checkpoints as
 * chat completions. The key comes as `x-api-key` (what the Anthropic SDKs and Claude Code send) or
 * `Authorization: Bearer` (`ANTHROPIC_AUTH_TOKEN`); `anthropic-version` and `anthropic-beta` are
 * accepted and not needed. Every answer carries a `request-id` header, and every error, the
 * hooks' and the body parser's included, Anthropic's shape (`errorFormat`).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from "fastify";
import { cheapBound } from "../../generation/cheap-bound.ts";
import { generationServing, type GenerationRouteOptions } from "../../generation/route-kit.ts";
import { anthropicErrorFormat, countPromptTokens, mapMessages, messagesDialect, parseCountTokens } from "./dialect.ts";

export type MessagesRouteOptions = GenerationRouteOptions;

/** Anthropic's `request-id` header (the request's id, as `x-request-id` says too) on every answer, streams included. */
const requestIdForAnthropic: onRequestHookHandler = function setAnthropicRequestId(request: FastifyRequest, reply: FastifyReply, done: () => void) {
  void reply.header("request-id", request.id);
  done();
};

/** The Messages routes' options: their hooks on the headers, and their errors in Anthropic's shape. */
const ANTHROPIC_ROUTE = { config: { errorFormat: anthropicErrorFormat } };

export function registerMessagesRoutes(app: FastifyInstance, options: MessagesRouteOptions): void {
  const serving = generationServing(options);
  const onRequest = [requestIdForAnthropic, ...serving.onRequest];

  app.post("/v1/messages", { onRequest, ...ANTHROPIC_ROUTE }, async function createMessage(request, reply) {
    return serving.serve(request, reply, messagesDialect);
  });

  app.post("/v1/messages/count_tokens", { onRequest, ...ANTHROPIC_ROUTE }, async function countTokens(request) {
    const key = request.apiKey!;
    const { model, generation } = mapMessages(options.catalog, parseCountTokens(request.body));
    // Counted with what the context leaves as the completion's room (an upstream counts exactly then), whatever `max_tokens` says.
    delete generation.maxTokens;
    delete generation.fitMaxTokens;
    const { plan } = await options.metering.standingOf(key);
    options.metering.checkModel(key, plan, model);
    // The prompt as a message would build it, counted by the model's own tokenizer (an upper bound
    // where an upstream has none): a message's `input_tokens` + `cache_read_input_tokens`. Not billed.
    const input_tokens = await countPromptTokens(model, generation, cheapBound({ model, request: generation }).prompt);
    return { input_tokens };
  });
}
