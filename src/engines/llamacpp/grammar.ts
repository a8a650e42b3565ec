/**
 * Builds the GBNF grammar that constrains a reply: any JSON object (`json_object`), JSON valid
 * against a schema (`json_schema`), tool calls in the chat template's call syntax, or, for
 * `tool_choice: "auto"`, either a tool-call section or ordinary content.
 *
 * node-llama-cpp writes the JSON grammars (`createGrammarForJsonSchema`, the built-in `json`
 * grammar); this file composes them into one grammar by giving each a rule-name prefix.
 */
import { LlamaText, SpecialTokensText, type ChatWrapper, type GbnfJsonSchema, type Llama, type LlamaGrammar } from "node-llama-cpp";
import type { ResponseFormat, ToolDefinition } from "../engine.ts";
import { toGrammarSchema, UnsupportedSchemaError } from "./json-schema.ts";

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

/** A GBNF string literal. */
export function gbnfLiteral(text: string): string {
  let escaped = "";
  for (const character of text) {
    const code = character.codePointAt(0)!;
    if (character === "\\" || character === '"') escaped += `\\${character}`;
    else if (character === "\n") escaped += "\\n";
    else if (character === "\r") escaped += "\\r";
    else if (character === "\t") escaped += "\\t";
    else if (code < 0x20 || code === 0x7f) escaped += `\\x${code.toString(16).padStart(2, "0")}`;
    else escaped += character;
  }
  return `"${escaped}"`;
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

  /** The GBNF of one JSON value valid against `schema` (already translated), its root named `root`. */
  async #schemaGrammarText(schema: GbnfJsonSchema): Promise<string> {
    const key = JSON.stringify(schema);
    let text = this.#schemaTexts.get(key);
    if (text === undefined) {
      text = this.#llama.createGrammarForJsonSchema(schema as never).then((grammar) => adjustSchemaGrammar(grammar.grammar));
      remember(this.#schemaTexts, key, text, this.#capacity);
    }
    return text;
  }

  async #jsonObjectGrammarText(): Promise<string> {
    return (await this.#llama.getGrammarFor("json")).grammar;
  }

  /** A compiled grammar for GBNF text. */
  grammar(text: string): Promise<LlamaGrammar> {
    let grammar = this.#cache.get(text);
    if (grammar === undefined) {
      grammar = this.#llama.createGrammar({ grammar: text });
      grammar.catch(() => this.#cache.delete(text));
      remember(this.#cache, text, grammar, this.#capacity);
    }
    return grammar;
  }

  /**
   * GBNF rules for the reply's content under `format` with root rule `${prefix}root`, or
   * undefined for free text. Throws `UnsupportedSchemaError` for a schema it cannot enforce.
   */
  async contentRules(format: ResponseFormat | undefined, prefix: string): Promise<string | undefined> {
    if (format === undefined || format.type === "text") return undefined;
    if (format.type === "json_object") return prefixRules(await this.#jsonObjectGrammarText(), prefix);
    const schema = toGrammarSchema(format.schema, "response_format.json_schema.schema");
    return prefixRules(await this.#schemaGrammarText(schema), prefix);
  }

  /** GBNF for a tool's arguments with root `${prefix}root`; refuses a parameters schema that is not an object. */
  async argumentsRules(tool: ToolDefinition, index: number, prefix: string): Promise<string> {
    const param = `tools[${index}].function.parameters`;
    const parameters = tool.parameters ?? { type: "object", properties: {} };
    const schema = toGrammarSchema(parameters, param);
    if (!("type" in schema) || schema.type !== "object") {
      throw new UnsupportedSchemaError(`The parameters of a function must be a JSON schema of type 'object' (at '${param}').`, param);
    }
    return prefixRules(await this.#schemaGrammarText(schema), prefix);
  }
}

function remember<Value>(map: Map<string, Value>, key: string, value: Value, capacity: number): void {
  map.set(key, value);
  if (map.size > capacity) map.delete(map.keys().next().value!);
}

export type ReplyGrammarOptions = {
  format?: ResponseFormat;
  /** The tools the reply may call; empty for none. */
  tools: ToolDefinition[];
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
    const argumentsRules = await factory.argumentsRules(tool, index, `t${index}-`);
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
