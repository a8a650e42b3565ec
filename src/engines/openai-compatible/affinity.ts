/**
 * The affinity key of a request: a hash of what its prompt begins with (the system prompt, the
 * tools, the first user turn). Requests sharing it share a prefix, which the member that served
 * the last one still holds in its prefix cache; the pool prefers that member.
 */
import { createHash } from "node:crypto";
import type { GenerationRequest } from "../engine.ts";

/** 16 hex digits of SHA-256 over the client's own cache key when it gave one, else over the system messages, the tools and the messages up to the first user message. */
export function affinityKey(request: GenerationRequest): string {
  // The client named its cache key: that is the prefix it will share (hashed, so it can be logged and bounded).
  if (request.affinityKey !== undefined) return createHash("sha256").update(`key:${request.affinityKey}`).digest("hex").slice(0, 16);
  const firstUser = request.messages.findIndex((message) => message.role === "user");
  const prefix = request.messages.slice(0, firstUser === -1 ? 1 : firstUser + 1).map((message) => [message.role, message.content, message.parts ?? null]);
  return createHash("sha256")
    .update(JSON.stringify([prefix, request.tools ?? null]))
    .digest("hex")
    .slice(0, 16);
}
