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
 *
 * Tools are given to the template as node-llama-cpp "available functions": a template with its
 * own tool format documents them its way; others get node-llama-cpp's generic system section
 * (a TypeScript-like signature per function and the `||call: name({...})` syntax).
 */
import {
  SpecialTokensText,
  type ChatHistoryItem,
  type ChatModelFunctionCall,
  type ChatModelFunctions,
  type ChatModelResponse,
  type ChatWrapper,
  type LlamaModel,
  type Token,
} from "node-llama-cpp";
import type { EngineMessage } from "../engine.ts";
import { CUSTOM_INPUT_PARAMETER } from "../custom-tools.ts";

export type RenderedPrompt = {
  tokens: Token[];
  /** Token ids that end generation (beyond the model's end-of-generation tokens). */
  stopTokens: Set<Token>;
  /** Text that ends generation when the model writes it (e.g. `</s>` as plain text). */
  stopTexts: string[];
};

/** A tool result's content as the template shows it: parsed JSON when it is JSON, else the text. */
function toolResult(content: string): unknown {
  try {
    return JSON.parse(content);
  } catch {
    return content;
  }
}

/**
 * Maps API messages to node-llama-cpp's chat history, ending with an open model turn.
 *
 * An assistant message's tool calls become function calls of its model turn, and the `tool`
 * messages that answer them (matched by `tool_call_id`) their results, so the template renders
 * calls and results in its own format. A model turn that ended with tool calls stays open: the
 * assistant's next message (or the generation) continues it, as templates expect. A call of a
 * custom tool (named in `customTools`) carries its raw input, shown as its function's
 * `{"input": ...}` arguments, the way the model is asked to write them.
 */
export function toChatHistory(messages: readonly EngineMessage[], customTools: ReadonlySet<string> = new Set()): ChatHistoryItem[] {
  const history: ChatHistoryItem[] = [];
  const calls = new Map<string, ChatModelFunctionCall>();
  /** The model turn that ended with function calls, which the next assistant text continues. */
  let openTurn: ChatModelResponse | undefined;
  for (const message of messages) {
    switch (message.role) {
      case "system":
        openTurn = undefined;
        history.push({ type: "system", text: message.content });
        break;
      case "user":
        openTurn = undefined;
        history.push({ type: "user", text: message.content });
        break;
      case "assistant": {
        const turn: ChatModelResponse = openTurn ?? { type: "model", response: [] };
        if (openTurn === undefined) history.push(turn);
        if (message.content.length > 0) turn.response.push(message.content);
        openTurn = undefined;
        for (const call of message.toolCalls ?? []) {
          const params = customTools.has(call.name) ? { [CUSTOM_INPUT_PARAMETER]: call.arguments } : toolResult(call.arguments);
          const functionCall: ChatModelFunctionCall = { type: "functionCall", name: call.name, params, result: undefined };
          calls.set(call.id, functionCall);
          turn.response.push(functionCall);
          openTurn = turn;
        }
        break;
      }
      case "tool": {
        const call = message.toolCallId === undefined ? undefined : calls.get(message.toolCallId);
        if (call !== undefined) {
          call.result = toolResult(message.content);
          break;
        }
        // A result for no known call: shown as a labelled user turn.
        openTurn = undefined;
        history.push({ type: "user", text: `Result of tool call ${message.toolCallId ?? ""}:\n${message.content}` });
        break;
      }
    }
  }
  if (openTurn === undefined) history.push({ type: "model", response: [] });
  return history;
}

/** Renders the conversation and collects the stop triggers the template defines (`customTools`: see `toChatHistory`). */
export function renderChatPrompt(
  model: LlamaModel,
  wrapper: ChatWrapper,
  messages: readonly EngineMessage[],
  functions?: ChatModelFunctions,
  customTools?: ReadonlySet<string>,
): RenderedPrompt {
  const state = wrapper.generateContextState({
    chatHistory: toChatHistory(messages, customTools),
    ...(functions !== undefined ? { availableFunctions: functions, documentFunctionParams: true } : {}),
  });
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
