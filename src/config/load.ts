/**
 * Loads the settings: defaults, then the JSON config file, then environment variables, then flags.
 * The result is validated once and frozen. A bad value throws `ConfigError` with one line that
 * names the setting.
 */
import fs from "node:fs";
import path from "node:path";
import { DEFAULT_MODEL, settingsSchema, type ModelEntry, type Settings } from "./schema.ts";
import { defaultThreads, serveOptionList, type OptionSpec } from "./options.ts";
import { Secret } from "./secret.ts";
import { formatParamPath } from "../protocol/parse.ts";

export class ConfigError extends Error {
  constructor(message: string) {
    // One line, always: operators read it in a terminal or a log.
    super(message.replace(/\s*\n\s*/g, " "));
    this.name = "ConfigError";
  }
}

export type ConfigSources = {
  /** Values from command-line flags, keyed like the settings (`data_dir`); `models` is a list. */
  flags: Record<string, string | string[] | undefined>;
  /** The process's environment (the one place it is read is the CLI that calls this). */
  env: Readonly<Record<string, string | undefined>>;
  /** The config file, as `--config <file>` names it (over `flags.config` and `TURNPIKE_CONFIG`). */
  configFile?: string;
};

/**
 * The frozen settings, with the model list resolved (the default model when none is given) and
 * the API keys read from the variables the upstream entries name (`api_key_env`).
 */
export type ResolvedSettings = Readonly<Omit<Settings, "models" | "upstreams">> & {
  readonly models: readonly ModelEntry[];
  /** Upstream API keys by the variable an entry names; a variable not set is absent. */
  readonly upstream_api_keys: Readonly<Record<string, Secret>>;
};

/**
 * Parses `[id=]source` as `--model` takes it. The id defaults to the file name without `.gguf`.
 */
export function parseModelFlag(value: string): ModelEntry {
  const text = value.trim();
  const match = /^([A-Za-z0-9][A-Za-z0-9._:@\/-]*)=(.+)$/.exec(text);
  const source = match ? match[2]!.trim() : text;
  const fileName = source.split(/[\\/]/).pop() ?? source;
  const id = match ? match[1]! : fileName.replace(/\.gguf$/i, "");
  if (source.length === 0) throw new ConfigError(`Invalid model '${value}': give a .gguf path or hf:owner/repo/file.gguf.`);
  const remote = source.startsWith("hf:") || /^https?:\/\//.test(source);
  return remote ? { id, hf: source } : { id, path: source };
}

/**
 * Parses `id=url[,url…]` as `--upstream` takes it: a model served by a pool of OpenAI-compatible
 * servers whose kind is detected by probing.
 */
export function parseUpstreamFlag(value: string): { id: string; upstream: { urls: string[] } } {
  const match = /^([A-Za-z0-9][A-Za-z0-9._:@\/-]*)=(.+)$/.exec(value.trim());
  if (match === null) throw new ConfigError(`Invalid upstream '${value}': give id=http://host:port/v1 (several URLs comma-separated).`);
  const urls = match[2]!
    .split(",")
    .map((url) => url.trim())
    .filter((url) => url.length > 0);
  // Validated with the rest of the settings (which fills in the pool's defaults).
  return { id: match[1]!, upstream: { urls } };
}

function readConfigFile(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (error) {
    throw new ConfigError(`Cannot read config file '${file}': ${(error as NodeJS.ErrnoException).code ?? String(error)}.`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new ConfigError(`Config file '${file}' is not valid JSON: ${(error as Error).message}.`);
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    throw new ConfigError(`Config file '${file}' must hold a JSON object.`);
  }
  return parsed as Record<string, unknown>;
}

function convert(option: OptionSpec, raw: string, origin: string): unknown {
  switch (option.kind) {
    case "string":
      return raw;
    case "models":
      return raw
        .split(",")
        .map((item) => item.trim())
        .filter((item) => item.length > 0)
        .map(parseModelFlag);
    case "upstreams":
      return raw
        .split(";")
        .map((item) => item.trim())
        .filter((item) => item.length > 0)
        .map(parseUpstreamFlag);
    case "integer":
    case "number": {
      const number = Number(raw);
      if (raw.trim() === "" || !Number.isFinite(number) || (option.kind === "integer" && !Number.isInteger(number))) {
        throw new ConfigError(`Invalid ${origin}: '${raw}' is not ${option.kind === "integer" ? "an integer" : "a number"}.`);
      }
      return number;
    }
  }
}

/** The config file the sources name: `--config`, else `TURNPIKE_CONFIG`; "" when none. */
function configFileOf(sources: ConfigSources): string {
  const flag = sources.configFile ?? sources.flags.config;
  const named = (Array.isArray(flag) ? flag.at(-1) : flag) ?? sources.env.TURNPIKE_CONFIG;
  return named ?? "";
}

/** Merges the sources (defaults < config file < environment < flags) and validates them into frozen settings. */
export function loadSettings(sources: ConfigSources): ResolvedSettings {
  const configFile = configFileOf(sources);
  const merged: Record<string, unknown> = { config: configFile };
  if (configFile !== "") {
    const fromFile = readConfigFile(configFile);
    const known = new Set(["plans", ...serveOptionList.filter((option) => !option.notInFile).map((option) => option.key)]);
    for (const [key, value] of Object.entries(fromFile)) {
      if (!known.has(key)) throw new ConfigError(`Unknown setting '${key}' in config file '${configFile}'.`);
      merged[key] = value;
    }
  }
  for (const option of serveOptionList) {
    if (option.notInFile) continue;
    const fromEnv = sources.env[option.env];
    if (fromEnv !== undefined && fromEnv !== "") merged[option.key] = convert(option, fromEnv, `${option.env}`);
    const fromFlag = sources.flags[option.key];
    if (fromFlag === undefined) continue;
    const flagName = option.flag.split(" ")[0];
    if (option.kind === "models" || option.kind === "upstreams") {
      const values = Array.isArray(fromFlag) ? fromFlag : [fromFlag];
      const parse: (value: string) => unknown = option.kind === "models" ? parseModelFlag : parseUpstreamFlag;
      merged[option.key] = values.map((value) => parse(value));
    } else {
      merged[option.key] = convert(option, Array.isArray(fromFlag) ? fromFlag.at(-1)! : fromFlag, `${flagName}`);
    }
  }

  const result = settingsSchema.safeParse(merged);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    const key = formatParamPath(issue.path) ?? "settings";
    const option = serveOptionList.find((candidate) => candidate.key === issue.path[0]);
    const where = option ? ` (${option.flag.split(" ")[0]}, ${option.env})` : "";
    // A secret's value is never echoed: zod's messages here name rules, not values.
    throw new ConfigError(`Invalid setting '${key}'${where}: ${issue.message}.`);
  }
  const { upstreams, ...settings } = result.data;
  settings.models = [...settings.models, ...upstreams];
  const ids = new Set<string>();
  for (const model of settings.models) {
    if (ids.has(model.id)) throw new ConfigError(`Invalid setting 'models': the id '${model.id}' is used twice.`);
    ids.add(model.id);
  }
  const models = settings.models.length > 0 ? settings.models : [DEFAULT_MODEL];
  return Object.freeze({
    ...settings,
    data_dir: path.resolve(settings.data_dir),
    threads: settings.threads === 0 ? defaultThreads() : settings.threads,
    models: Object.freeze(models.map((model) => Object.freeze({ ...model }))),
    upstream_api_keys: Object.freeze(upstreamApiKeys(models, sources.env)),
  });
}

/** The values of the variables upstream entries name as their API key (`api_key_env`), those set. */
function upstreamApiKeys(models: readonly ModelEntry[], env: ConfigSources["env"]): Record<string, Secret> {
  const keys: Record<string, Secret> = {};
  for (const model of models) {
    const variable = model.upstream?.api_key_env;
    const value = variable === undefined ? undefined : env[variable];
    if (variable !== undefined && value !== undefined && value !== "") keys[variable] = new Secret(value);
  }
  return keys;
}

/**
 * The settings of this process: its environment, the flags given and the config file they (or
 * TURNPIKE_CONFIG) name. The `turnpike` commands call this; nothing else reads `process.env`.
 */
export function loadProcessSettings(flags: ConfigSources["flags"], configFile?: string): ResolvedSettings {
  return loadSettings({ flags, env: process.env, ...(configFile === undefined ? {} : { configFile }) });
}
