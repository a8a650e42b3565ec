/**
 * The run of one admitted chat request: the shared run (`http/generation/run.ts`: start, answer,
 * settle once however it ended) with the chat dialect's answers.
 */
import type { ChatCompletion } from "../../../protocol/chat-completions/response.ts";
import { runCompletion as runGeneration, runStream as streamGeneration, type ChunkSink, type RunDependencies, type RunInput } from "../../generation/run.ts";
import { chatCompletionsDialect, type ChatReplyShape } from "./dialect.ts";

export type { ChunkSink, RunDependencies, RunLogger } from "../../generation/run.ts";

/** Runs a non-streamed chat request to its end and returns the completion (see `runCompletion` in the shared run). */
export function runCompletion(dependencies: RunDependencies, input: RunInput<ChatReplyShape>): Promise<ChatCompletion> {
  return runGeneration(dependencies, chatCompletionsDialect, input);
}

/** Streams a chat request's chunks into the sink `openSink` opens (see `runStream` in the shared run). */
export function runStream(dependencies: RunDependencies, input: RunInput<ChatReplyShape>, openSink: () => ChunkSink): Promise<void> {
  return streamGeneration(dependencies, chatCompletionsDialect, input, openSink);
}
