/**
 * Custom tools (`ToolDefinition.custom`) on an upstream. Upstream kinds know only functions, and
 * none can hold one tool's arguments to a grammar inside a tool call, so:
 *
 * - A custom tool is sent as a function of one string, `input` (`custom-tools.ts`), and its
 *   calls are read back as that string's decoded text. That is all a `text` format needs, and all
 *   a grammar format needs when no call of it can be made (`tool_choice` `none`, or naming another tool).
 * - A grammar format that the tool choice forces (named, or `required` with it the only tool)
 *   goes out as the kind's own grammar option constraining the WHOLE reply, with no tools: the
 *   reply's text is the call's input, given out as one call of the tool (`GrammarReplyCall`).
 * - Any other grammar format (`auto` or `required` among several tools, or a kind without a
 *   grammar option) is refused: a 400 naming `tools[i].format`, never an unconstrained call.
 */
import type { GenerationRequest, RunningGeneration, StreamPart, ToolDefinition } from "../engine.ts";
import { CustomCallDecoder, customToolNames, newToolCallId } from "../custom-tools.ts";
import { larkToGbnf } from "../grammar/lark-grammar.ts";
import { regexToGbnf } from "../grammar/regex-grammar.ts";
import { UnsupportedParameterError } from "../../protocol/errors.ts";
import type { Dialect } from "./dialects.ts";

export type CustomToolPlan =
  /** Custom tools sent as functions of `input`; their calls decoded back into text. */
  | { mode: "functions"; names: ReadonlySet<string> }
  /** No tools sent: `gbnf` constrains the whole reply, which is one call of `tool`. */
  | { mode: "grammar"; tool: string; gbnf: string };

/** 400: the upstream cannot enforce a custom tool's grammar in this request. */
export class UnenforceableGrammarError extends UnsupportedParameterError {}

/** The tool the choice forces one call of, if any: the named one, or the only one under `required`. */
function forcedTool(request: GenerationRequest): ToolDefinition | undefined {
  const tools = request.tools ?? [];
  const choice = request.toolChoice ?? "auto";
  if (typeof choice === "object") return tools.find((tool) => tool.name === choice.name);
  return choice === "required" && tools.length === 1 ? tools[0] : undefined;
}

/**
 * How the request's custom tools go upstream; undefined when it has none. Throws
 * `UnenforceableGrammarError` (400 `unsupported_parameter`, naming `tools[i].format`) for a
 * grammar the kind cannot enforce, and the grammar's own 400 for one that cannot be translated.
 */
export function planCustomTools(request: GenerationRequest, dialect: Dialect, where: string): CustomToolPlan | undefined {
  const tools = request.tools ?? [];
  const names = customToolNames(tools);
  if (names.size === 0) return undefined;
  const choice = request.toolChoice ?? "auto";
  const forced = forcedTool(request);
  const grammarIndex = tools.findIndex((tool) => tool.custom?.format.type === "grammar");
  // No grammar to enforce, or no call can be made of a grammar tool: functions do.
  if (grammarIndex === -1 || choice === "none" || (forced !== undefined && forced.custom?.format.type !== "grammar")) return { mode: "functions", names };
  const index = forced === undefined ? grammarIndex : tools.indexOf(forced);
  const tool = tools[index]!;
  const param = `tools[${index}].format`;
  if (dialect.grammarField === undefined) {
    throw new UnenforceableGrammarError(
      `The grammar of custom tool '${tool.name}' cannot be enforced by ${where}: they take no grammar. Use a custom tool of format 'text', or a model served by llama.cpp, vLLM or SGLang.`,
      param,
    );
  }
  if (forced === undefined) {
    throw new UnenforceableGrammarError(
      `The grammar of custom tool '${tool.name}' cannot be enforced by ${where} unless the tool choice forces that tool: name it in 'tool_choice' (or make it the only tool with 'required').`,
      param,
    );
  }
  const format = tool.custom!.format;
  if (format.type !== "grammar") throw new Error("unreachable: the forced tool has a grammar");
  const gbnf = format.syntax === "lark" ? larkToGbnf(format.definition, param) : regexToGbnf(format.definition, param);
  return { mode: "grammar", tool: tool.name, gbnf };
}

/** The body fields that carry a grammar for the whole reply, in the kind's spelling. */
export function grammarBodyFields(dialect: Dialect, gbnf: string): Record<string, unknown> {
  switch (dialect.grammarField) {
    case "grammar":
      return { grammar: gbnf };
    case "structured_outputs":
      return { structured_outputs: { grammar: gbnf } };
    case "ebnf":
      return { ebnf: gbnf };
    case undefined:
      return {};
  }
}

/**
 * Turns a grammar-constrained reply into one call of the custom tool per choice: its text is the
 * call's input (`tool-call-start`, then a `tool-call-delta` of raw text per text delta), and a
 * choice that stopped on its own finishes `tool_calls`. A choice cancelled before any text makes
 * no call; one that ended with no text makes a call with empty input.
 */
export class GrammarReplyCall {
  readonly #tool: string;
  readonly #started = new Set<number>();

  constructor(tool: string) {
    this.#tool = tool;
  }

  transform(part: StreamPart): StreamPart[] {
    switch (part.type) {
      case "text-delta": {
        if (part.text === "") return [];
        return [...this.#start(part.choice), { type: "tool-call-delta", choice: part.choice, index: 0, argumentsDelta: part.text }];
      }
      case "finish": {
        if (part.reason === "cancelled" && !this.#started.has(part.choice)) return [part];
        const start = this.#start(part.choice);
        if (part.reason !== "stop") return [...start, part];
        // The reply is the call: it ends `tool_calls`, naming no stop sequence (those end only a `stop`).
        const { stopSequence: _, ...call } = part;
        return [...start, { ...call, reason: "tool_calls" }];
      }
      // A tool call cannot come (no tools were sent); anything else (reasoning) passes.
      default:
        return [part];
    }
  }

  #start(choice: number): StreamPart[] {
    if (this.#started.has(choice)) return [];
    this.#started.add(choice);
    return [{ type: "tool-call-start", choice, index: 0, id: newToolCallId(), name: this.#tool }];
  }
}

/** A generation whose parts are read through the plan: custom calls decoded, or the grammar reply made one call. */
export function withCustomToolCalls(generation: RunningGeneration, plan: CustomToolPlan | undefined): RunningGeneration {
  if (plan === undefined) return generation;
  const transformer = plan.mode === "grammar" ? new GrammarReplyCall(plan.tool) : new CustomCallDecoder(plan.names);
  async function* parts(): AsyncGenerator<StreamPart> {
    for await (const part of generation.parts) yield* transformer.transform(part);
  }
  return { admitted: generation.admitted, parts: parts(), usage: () => generation.usage() };
}
