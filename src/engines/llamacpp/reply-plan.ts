/**
 * Decides how a request's reply is shaped on the llama.cpp engine: which functions the chat
 * template documents, which grammar constrains the tokens, and how the text is read back
 * (plain content, or content and tool calls).
 */
import type { ChatModelFunctions, ChatWrapper, GbnfJsonSchema, LlamaGrammar } from "node-llama-cpp";
import type { GenerationRequest } from "../engine.ts";
import { CUSTOM_INPUT_PARAMETER, CustomCallDecoder, customToolDescription, customToolNames } from "../custom-tools.ts";
import { customArgumentsRules, parseCustomFormat } from "./json-string-grammar.ts";
import { callSyntaxOf, contentFormat, replyGrammarText, RESPONSE_SCHEMA_PARAM, toolParametersSchema, type GrammarFactory, type GrammarTool } from "./grammar.ts";
import { SchemaBudget } from "./json-schema.ts";
import { ToolCallParser } from "./tool-call-parser.ts";

// A stream part before it is given its choice's index: in `reply-part.ts`, which the readers import without a circle.
import type { ReplyPart } from "./reply-part.ts";
export type { ReplyPart } from "./reply-part.ts";

/** Turns the reply's text into stream parts. */
export type ReplyReader = {
  push(text: string): ReplyPart[];
  flush(): ReplyPart[];
  /** Tool calls started so far. */
  readonly calls: number;
};

export type ReplyPlan = {
  /** Functions for the chat template to document; undefined when the model may call none. */
  functions?: ChatModelFunctions;
  /** The request's custom tools, by name: their calls in the conversation carry raw input text. */
  customTools: ReadonlySet<string>;
  grammar?: LlamaGrammar;
  /**
   * Whether special tokens are written out as their text: a template's call syntax may hold
   * some (e.g. `<tool_call>`), and the reader must see them to find the calls.
   */
  specialTokensAsText: boolean;
  reader(): ReplyReader;
};

/** A custom tool's function as the template documents it: one string, `input`. */
const CUSTOM_TOOL_PARAMS: GbnfJsonSchema = {
  type: "object",
  properties: { [CUSTOM_INPUT_PARAMETER]: { type: "string", description: "The tool's input, as free text." } },
};

/** A reader whose custom tools' calls give out their decoded input text (see `custom-tools.ts`). */
function decodingCustomCalls(reader: ReplyReader, customTools: ReadonlySet<string>): ReplyReader {
  const decoder = new CustomCallDecoder(customTools);
  return {
    push: (text) => reader.push(text).flatMap((part) => decoder.transform(part)),
    flush: () => [...reader.flush().flatMap((part) => decoder.transform(part)), ...decoder.flush()],
    get calls() {
      return reader.calls;
    },
  };
}

function plainReader(): ReplyReader {
  return {
    push: (text) => [{ type: "text-delta", text }],
    flush: () => [],
    calls: 0,
  };
}

/**
 * Plans the reply. Throws `UnsupportedSchemaError` (400) for a response or parameters schema
 * the grammar cannot enforce, one whose grammar llama.cpp refuses, or schemas that together
 * pass the request's work budget (`SCHEMA_LIMITS.work`): every schema is translated, within the
 * budget, before any grammar is built. A custom tool is a function of one string, `input`, its
 * JSON encoding held to the tool's format (`json-string-grammar.ts`); a format that cannot be
 * enforced is a 400 naming `tools[i].format`.
 */
export async function planReply(factory: GrammarFactory, wrapper: ChatWrapper, request: GenerationRequest): Promise<ReplyPlan> {
  const tools = request.tools ?? [];
  const choice = request.toolChoice ?? "auto";
  // Every schema is translated (within one budget) before any grammar is built.
  const budget = new SchemaBudget();
  const format = contentFormat(request.responseFormat, budget);
  const customTools = customToolNames(tools);
  if (tools.length === 0 || choice === "none") {
    const text = await factory.contentRules(format, "");
    return { grammar: text === undefined ? undefined : await factory.grammar(text, RESPONSE_SCHEMA_PARAM), customTools, specialTokensAsText: false, reader: plainReader };
  }
  const functions: Record<string, { description?: string; params: GrammarTool["parameters"] }> = {};
  const grammarTools: GrammarTool[] = [];
  for (const [index, tool] of tools.entries()) {
    if (tool.custom !== undefined) {
      const input = parseCustomFormat(tool.custom.format, `tools[${index}].format`);
      const description = customToolDescription(tool);
      functions[tool.name] = { ...(description !== "" ? { description } : {}), params: CUSTOM_TOOL_PARAMS };
      grammarTools.push({ name: tool.name, parameters: CUSTOM_TOOL_PARAMS, customRules: (prefix) => customArgumentsRules(input, prefix) });
      continue;
    }
    const params = toolParametersSchema(tool, index, budget);
    functions[tool.name] = { ...(tool.description !== undefined ? { description: tool.description } : {}), params };
    grammarTools.push({ name: tool.name, parameters: params });
  }
  const syntax = callSyntaxOf(wrapper);
  const grammarText = await replyGrammarText(factory, {
    ...(format !== undefined ? { format } : {}),
    tools: grammarTools,
    choice,
    parallel: request.parallelToolCalls ?? true,
    syntax,
  });
  const names = typeof choice === "object" ? [choice.name] : tools.map((tool) => tool.name);
  // Longer names first, so a name that is a prefix of another is not taken too early.
  names.sort((left, right) => right.length - left.length);
  return {
    functions,
    customTools,
    grammar: await factory.grammar(grammarText, "tools"),
    specialTokensAsText: true,
    reader: () => {
      const parser = new ToolCallParser(syntax, names, choice !== "auto");
      return customTools.size === 0 ? parser : decodingCustomCalls(parser, customTools);
    },
  };
}
