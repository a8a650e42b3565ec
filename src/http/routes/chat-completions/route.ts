/**
 * `POST /v1/chat/completions`: the chat dialect (`dialect.ts`) served by the generation core's
 * shared admission, run and reply (`http/generation/route-kit.ts`).
 */
import type { FastifyInstance } from "fastify";
import { generationServing, type GenerationRouteOptions } from "../../generation/route-kit.ts";
import { chatCompletionsDialect } from "./dialect.ts";

export type ChatCompletionsRouteOptions = GenerationRouteOptions;

export function registerChatCompletionsRoute(app: FastifyInstance, options: ChatCompletionsRouteOptions): void {
  const serving = generationServing(options);
  // The key and, for large bodies, the quota are checked before the body is read: an unknown key
  // or an account without credit never costs the server a parse of megabytes.
  app.post("/v1/chat/completions", { onRequest: serving.onRequest }, async function chatCompletions(request, reply) {
    return serving.serve(request, reply, chatCompletionsDialect);
  });
}
