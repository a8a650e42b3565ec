/**
 * Renders a conversation into prompt tokens with the model's chat template.
 *
 * Template choice (node-llama-cpp's `resolveChatWrapper`):
 * 1. The GGUF's own `tokenizer.chat_template` (Jinja). node-llama-cpp swaps in an equivalent
 *    built-in wrapper only when it renders the same text.
 * 2. Without a template: a wrapper guessed from the model's name and architecture
 *    (e.g. Llama 2's `[INST]` format for Llama-2-family files).
 * 3. Otherwise the documented fallback: node-llama-cpp's `GeneralChatWrapper`
 *    (`### System`, `### Human`, `### Assistant` sections).
 */
import { SpecialTokensText, type ChatHistoryItem, type ChatWrapper, type LlamaModel, type Token } from "node-llama-cpp";
import type { EngineMessage } from "../engine.ts";

export type RenderedPrompt = {
  tokens: Token[];
  /** Token ids that end generation (beyond the model's end-of-generation tokens). */
  stopTokens: Set<Token>;
  /** Text that ends generation when the model writes it (e.g. `</s>` as plain text). */
  stopTexts: string[];
};

/** Maps API messages to node-llama-cpp's chat history, ending with an open model turn. */
export function toChatHistory(messages: readonly EngineMessage[]): ChatHistoryItem[] {
  const history: ChatHistoryItem[] = [];
  for (const message of messages) {
    switch (message.role) {
      case "system":
        history.push({ type: "system", text: message.content });
        break;
      case "user":
        history.push({ type: "user", text: message.content });
        break;
      case "assistant":
        history.push({ type: "model", response: [message.content] });
        break;
      case "tool":
        // Models without tool support see a tool result as a labelled user turn.
        history.push({ type: "user", text: `Result of tool call ${message.toolCallId ?? ""}:\n${message.content}` });
        break;
    }
  }
  history.push({ type: "model", response: [] });
  return history;
}

/** Renders the conversation and collects the stop triggers the template defines. */
export function renderChatPrompt(model: LlamaModel, wrapper: ChatWrapper, messages: readonly EngineMessage[]): RenderedPrompt {
  const state = wrapper.generateContextState({ chatHistory: toChatHistory(messages) });
  const tokens = state.contextText.tokenize(model.tokenizer);
  const stopTokens = new Set<Token>();
  const stopTexts: string[] = [];
  for (const trigger of state.stopGenerationTriggers) {
    const plain = trigger.values.every((value) => typeof value === "string");
    if (!plain) {
      const triggerTokens = trigger.tokenize(model.tokenizer);
      if (triggerTokens.length === 1) {
        stopTokens.add(triggerTokens[0]!);
        continue;
      }
    }
    // Written out as text (a special token the vocabulary lacks, or plain text): match the text.
    const text = trigger.values
      .map((value) => (typeof value === "string" ? value : value instanceof SpecialTokensText ? value.value : ""))
      .join("");
    if (text.length > 0) stopTexts.push(text);
  }
  return { tokens, stopTokens, stopTexts };
}
