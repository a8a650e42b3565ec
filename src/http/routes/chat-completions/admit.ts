/**
 * Admission of one chat request: the shared admission (`http/generation/admit.ts`: cheapest
 * refusal first) over the chat dialect's parse.
 */
import { admitGeneration, type AdmitDependencies, type AdmitRequest, type AdmittedGeneration } from "../../generation/admit.ts";
import { parseChatCompletion, type ChatReplyShape } from "./dialect.ts";

export type { AdmitDependencies, AdmitRequest } from "../../generation/admit.ts";

export type AdmittedChatCompletion = AdmittedGeneration<ChatReplyShape>;

/** Admits a chat request or throws the typed API error of the first check that refuses it. */
export function admitChatCompletion(dependencies: AdmitDependencies, input: AdmitRequest): Promise<AdmittedChatCompletion> {
  return admitGeneration(dependencies, input, parseChatCompletion);
}
