/**
 * Builds the GBNF grammar that constrains a reply: any JSON object (`json_object`), JSON valid
 * against a schema (`json_schema`), tool calls in the chat template's call syntax, or, for
 * `tool_choice: "auto"`, either a tool-call section or ordinary content.
 *
 * node-llama-cpp writes the JSON grammars (`createGrammarForJsonSchema`, the built-in `json`
 * grammar); this file composes them into one grammar by giving each a rule-name prefix.
 */
import fs from "node:fs";
import path from "node:path";
import { LlamaText, SpecialTokensText, type ChatWrapper, type GbnfJsonSchema, type Llama, type LlamaGrammar } from "node-llama-cpp";
import type { ResponseFormat, ToolDefinition } from "../engine.ts";
import { ApiError } from "../../protocol/errors.ts";
import { SchemaBudget, toGrammarSchema, UnsupportedSchemaError } from "./json-schema.ts";
import { gbnfLiteral } from "../grammar/grammar-expression.ts";
import { nodeLlamaCppLlamaDirectory } from "./runtime.ts";

let jsonGrammar: Promise<string> | undefined;

/**
 * llama.cpp's JSON grammar as node-llama-cpp ships it (`llama/grammars/json.gbnf`): what
 * `llama.getGrammarFor("json")` reads on the prebuilt binding. On a local build (Turnpike's
 * patched binding, `runtime.ts`) that call looks in a llama.cpp clone instead, which the build
 * does not keep; the file is the same either way.
 */
function bundledJsonGrammar(): Promise<string> {
  jsonGrammar ??= fs.promises.readFile(path.join(nodeLlamaCppLlamaDirectory(), "grammars", "json.gbnf"), "utf8");
  return jsonGrammar;
}

/** The literal text a chat template writes around tool calls (node-llama-cpp's `functions.call` settings). */
export type CallSyntax = {
  /** Before the first call of a turn (templates with a parallel-call section), else "". */
  sectionPrefix: string;
  /** Before each call's name. */
  prefix: string;
  /** Between the name and the JSON arguments; may depend on the name. */
  paramsPrefix: (name: string) => string;
  /** After the JSON arguments. */
  suffix: string;
  /** Between two calls of one turn. */
  betweenCalls: string;
  /** After the last call of a turn. */
  sectionSuffix: string;
};

/** node-llama-cpp's generic call syntax, used when a template's own cannot be written as text. */
const GENERIC_CALL_SYNTAX: CallSyntax = {
  sectionPrefix: "",
  prefix: "||call: ",
  paramsPrefix: () => "(",
  suffix: ")",
  betweenCalls: "",
  sectionSuffix: "",
};

/** Text of a template fragment; undefined when it holds a special token that is not plain text. */
function plainText(value: string | LlamaText | undefined): string | undefined {
  if (value === undefined) return "";
  if (typeof value === "string") return value;
  let text = "";
  for (const part of LlamaText(value).values) {
    if (typeof part === "string") text += part;
    else if (part instanceof SpecialTokensText) text += part.value;
    else return undefined;
  }
  return text;
}

/** The call syntax of a chat wrapper, as plain text the grammar can constrain. */
export function callSyntaxOf(wrapper: ChatWrapper): CallSyntax {
  const call = wrapper.settings.functions.call;
  const parallel = wrapper.settings.functions.parallelism?.call;
  const prefix = plainText(call.prefix);
  const paramsPrefix = plainText(call.paramsPrefix);
  const suffix = plainText(call.suffix);
  const sectionPrefix = plainText(parallel?.sectionPrefix);
  const betweenCalls = plainText(parallel?.betweenCalls);
  const sectionSuffix = plainText(parallel?.sectionSuffix);
  if ([prefix, paramsPrefix, suffix, sectionPrefix, betweenCalls, sectionSuffix].some((text) => text === undefined) || prefix === "") {
    return GENERIC_CALL_SYNTAX;
  }
  return {
    sectionPrefix: sectionPrefix!,
    prefix: prefix!,
    paramsPrefix: (name) => paramsPrefix!.replaceAll("{{functionName}}", name),
    suffix: suffix!,
    betweenCalls: betweenCalls!,
    sectionSuffix: sectionSuffix!,
  };
}

/** A GBNF character class that excludes one character. */
function notCharacter(character: string): string {
  const code = character.codePointAt(0)!;
  const escaped = /[\]\\^\-[]/.test(character) || code < 0x20 || code === 0x7f ? `\\x${code.toString(16).padStart(2, "0")}` : character;
  return `[^${escaped}]`;
}

/**
 * Renames every rule of a GBNF grammar with `prefix` (the root becomes `${prefix}root`), so
 * several generated grammars can live in one. Literals, character classes and comments are kept.
 */
export function prefixRules(grammar: string, prefix: string): string {
  const names = new Set([...grammar.matchAll(/^([a-zA-Z0-9-]+)\s*::=/gm)].map((match) => match[1]!));
  let output = "";
  let index = 0;
  while (index < grammar.length) {
    const character = grammar[index]!;
    if (character === '"' || character === "[") {
      const close = character === '"' ? '"' : "]";
      let end = index + 1;
      while (end < grammar.length && grammar[end] !== close) end += grammar[end] === "\\" ? 2 : 1;
      output += grammar.slice(index, end + 1);
      index = end + 1;
    } else if (character === "#") {
      const end = grammar.indexOf("\n", index);
      index = end === -1 ? grammar.length : end;
    } else if (/[a-zA-Z0-9-]/.test(character)) {
      let end = index;
      while (end < grammar.length && /[a-zA-Z0-9-]/.test(grammar[end]!)) end++;
      const word = grammar.slice(index, end);
      output += names.has(word) ? prefix + word : word;
      index = end;
    } else {
      output += character;
      index++;
    }
  }
  return output;
}

/**
 * Adjusts a grammar node-llama-cpp generated for a JSON schema: drops the trailing newlines its
 * root allows (meant for its own chat loop) and writes integers as plain digits, at most 15 of
 * them (no exponent, so every value is an integer within JavaScript's safe range).
 */
function adjustSchemaGrammar(grammar: string): string {
  return grammar
    .split("\n")
    .map((line) => {
      if (line.startsWith("root ::=")) return line.replace(/ "\\n\\n\\n\\n" \[\\n\]\*$/, "");
      if (line.startsWith("integer-number-rule ::=")) return 'integer-number-rule ::= "-"? ("0" | [1-9] [0-9]{0,14})';
      return line;
    })
    .join("\n");
}

/** Where a response format's schema is, for errors. */
export const RESPONSE_SCHEMA_PARAM = "response_format.json_schema.schema";

/** Where a tool's parameters schema is, for errors. */
export function parametersParam(index: number): string {
  return `tools[${index}].function.parameters`;
}

/**
 * A 400 naming `param` for a grammar llama.cpp (or node-llama-cpp's JSON-schema writer) would
 * not build: the client's schema is the cause, never the server. Typed API errors pass through.
 */
export function grammarRefused(error: unknown, param: string): ApiError {
  if (error instanceof ApiError) return error;
  // The reason is shown only when it is a plain sentence ("Failed to parse grammar"): never a path.
  const reason = (error instanceof Error ? error.message : String(error)).replace(/[.\s]+$/, "");
  const shown = /^[\w ,'()-]{1,120}$/.test(reason) ? ` (${reason})` : "";
  return new UnsupportedSchemaError(
    `The JSON schema cannot be enforced on this model: llama.cpp could not build a grammar for it${shown}; see the structured output limits in the README (at '${param}').`,
    param,
  );
}

/**
 * The parameters schema of tool `index`, translated for the grammar (an empty object schema when
 * it has none). Throws `UnsupportedSchemaError` naming it when it cannot be enforced or is not
 * an object schema.
 */
export function toolParametersSchema(tool: ToolDefinition, index: number, budget: SchemaBudget = new SchemaBudget()): GbnfJsonSchema {
  const param = parametersParam(index);
  const schema = toGrammarSchema(tool.parameters ?? { type: "object", properties: {} }, param, budget);
  if (!("type" in schema) || schema.type !== "object") {
    throw new UnsupportedSchemaError(`The parameters of a function must be a JSON schema of type 'object' (at '${param}').`, param);
  }
  return schema;
}

/** A response format with its schema translated: what the reply's content must be. */
export type ContentFormat = { type: "json_object" } | { type: "json_schema"; schema: GbnfJsonSchema };

/**
 * Translates a response format's schema, spending from `budget` (the request's); undefined for
 * free text. Throws `UnsupportedSchemaError` naming the keyword the grammar cannot enforce.
 */
export function contentFormat(format: ResponseFormat | undefined, budget: SchemaBudget = new SchemaBudget()): ContentFormat | undefined {
  if (format === undefined || format.type === "text") return undefined;
  if (format.type === "json_object") return { type: "json_object" };
  return { type: "json_schema", schema: toGrammarSchema(format.schema, RESPONSE_SCHEMA_PARAM, budget) };
}

/**
 * A tool whose parameters schema is already translated; a custom tool's arguments have their
 * own rules instead (`customRules`, given the rule-name prefix, root `${prefix}root`).
 */
export type GrammarTool = { name: string; parameters: GbnfJsonSchema; customRules?: (prefix: string) => string };

/** Creates grammars and keeps the last ones built, by their source text (creation costs ~0.1 s). */
export class GrammarFactory {
  readonly #llama: Llama;
  readonly #cache = new Map<string, Promise<LlamaGrammar>>();
  readonly #schemaTexts = new Map<string, Promise<string>>();
  readonly #capacity: number;

  constructor(llama: Llama, capacity = 64) {
    this.#llama = llama;
    this.#capacity = capacity;
  }

  /**
   * The GBNF of one JSON value valid against `schema` (already translated), its root named
   * `root`; a schema llama.cpp's parser refuses is a 400 naming `param`.
   */
  async #schemaGrammarText(schema: GbnfJsonSchema, param: string): Promise<string> {
    const key = JSON.stringify(schema);
    let text = this.#schemaTexts.get(key);
    if (text === undefined) {
      // node-llama-cpp writes the grammar and has llama.cpp parse it: either may throw.
      text = this.#llama.createGrammarForJsonSchema(schema as never).then((grammar) => adjustSchemaGrammar(grammar.grammar));
      const failed = text;
      failed.catch(() => this.#schemaTexts.get(key) === failed && this.#schemaTexts.delete(key));
      remember(this.#schemaTexts, key, text, this.#capacity);
    }
    try {
      return await text;
    } catch (error) {
      throw grammarRefused(error, param);
    }
  }

  async #jsonObjectGrammarText(): Promise<string> {
    return bundledJsonGrammar();
  }

  /**
   * A compiled grammar for GBNF text; one llama.cpp refuses is a 400 naming `param` (the part of
   * the request the grammar was built from).
   */
  async grammar(text: string, param: string): Promise<LlamaGrammar> {
    let grammar = this.#cache.get(text);
    if (grammar === undefined) {
      grammar = this.#llama.createGrammar({ grammar: text });
      const failed = grammar;
      failed.catch(() => this.#cache.get(text) === failed && this.#cache.delete(text));
      remember(this.#cache, text, grammar, this.#capacity);
    }
    try {
      return await grammar;
    } catch (error) {
      throw grammarRefused(error, param);
    }
  }

  /** GBNF rules for the reply's content under `format` with root rule `${prefix}root`, or undefined for free text. */
  async contentRules(format: ContentFormat | undefined, prefix: string): Promise<string | undefined> {
    if (format === undefined) return undefined;
    if (format.type === "json_object") return prefixRules(await this.#jsonObjectGrammarText(), prefix);
    return prefixRules(await this.#schemaGrammarText(format.schema, RESPONSE_SCHEMA_PARAM), prefix);
  }

  /** GBNF for the arguments of tool `index` (its parameters already translated) with root `${prefix}root`. */
  async argumentsRules(parameters: GbnfJsonSchema, index: number, prefix: string): Promise<string> {
    return prefixRules(await this.#schemaGrammarText(parameters, parametersParam(index)), prefix);
  }
}

function remember<Value>(map: Map<string, Value>, key: string, value: Value, capacity: number): void {
  map.set(key, value);
  if (map.size > capacity) map.delete(map.keys().next().value!);
}

export type ReplyGrammarOptions = {
  /** The content's format, translated (`contentFormat`); undefined for free text. */
  format?: ContentFormat;
  /** The tools the reply may call, their parameters translated (`toolParametersSchema`); empty for none. */
  tools: GrammarTool[];
  /** `auto`: a tool-call section or content; `required`: calls only; `{name}`: exactly one call of it. */
  choice: "auto" | "required" | { name: string };
  parallel: boolean;
  syntax: CallSyntax;
};

/** The text that begins every tool-call section. */
export function callsStart(syntax: CallSyntax): string {
  return syntax.sectionPrefix + syntax.prefix;
}

/**
 * The GBNF of a reply that may (or must) call tools. Content in `auto` mode is the response
 * format's JSON, or free text that does not begin with the call section's first character.
 */
export async function replyGrammarText(factory: GrammarFactory, options: ReplyGrammarOptions): Promise<string> {
  const { syntax } = options;
  const named = typeof options.choice === "object" ? options.choice.name : undefined;
  const rules: string[] = [];
  const alternatives: string[] = [];
  for (const [index, tool] of options.tools.entries()) {
    const argumentsRules = tool.customRules !== undefined ? tool.customRules(`t${index}-`) : await factory.argumentsRules(tool.parameters, index, `t${index}-`);
    if (named !== undefined && tool.name !== named) continue;
    rules.push(argumentsRules);
    alternatives.push(`${gbnfLiteral(tool.name + syntax.paramsPrefix(tool.name))} t${index}-root`);
  }
  const call = `${gbnfLiteral(syntax.prefix)} ( ${alternatives.join(" | ")} ) ${gbnfLiteral(syntax.suffix)}`;
  const more = options.parallel && named === undefined ? ` ( ${gbnfLiteral(syntax.betweenCalls)} tool-call )*` : "";
  rules.push(`tool-call ::= ${call}`);
  rules.push(`tool-calls ::= ${gbnfLiteral(syntax.sectionPrefix)} tool-call${more} ${gbnfLiteral(syntax.sectionSuffix)}`);
  if (options.choice !== "auto") {
    rules.push("root ::= tool-calls");
    return rules.join("\n");
  }
  const content = await factory.contentRules(options.format, "c-");
  if (content !== undefined) {
    rules.push(content, "root ::= tool-calls | c-root");
  } else {
    rules.push(`text-content ::= ( ${notCharacter(callsStart(syntax)[0]!)} [^\\x00]* )?`, "root ::= tool-calls | text-content");
  }
  return rules.join("\n");
}
