/**
 * What `turnpike serve` prints on a terminal once it listens (`--log-format pretty`): where to
 * reach it, its models and their state, where its data lives, the one-time setup code in a box
 * that cannot be missed, and the next step. A pure function of the facts, so tests read it
 * without a server; the JSON log (`--log-format json`) says the same in records instead.
 */
import { styleText } from "node:util";
import type { EngineStatus } from "../engines/engine.ts";

export type StartFacts = {
  /** The server's version (package.json's). */
  version: string;
  /** Where clients reach the server, without a trailing slash: the public URL, or the address it listens on. */
  baseUrl: string;
  /** False when `console/dist` has not been built: `/` then only says how to build it. */
  consoleBuilt: boolean;
  /** With `--metrics-listen`: the separate metrics address. */
  metricsUrl?: string;
  models: ReadonlyArray<{ id: string; status: EngineStatus }>;
  /** The data directory, absolute. */
  dataDir: string;
  /** `--database-url`; empty: SQLite in the data directory. Its password is never printed. */
  databaseUrl: string;
  /** `--redis-url`; empty: limits kept in memory. Its password is never printed. */
  redisUrl: string;
  /** The one-time code that makes the first admin; null once an admin exists. */
  setupCode: string | null;
  /** How to run the CLI here: `turnpike`, or `npx turnpike` when started through npm. */
  command: string;
  /** Flags the other commands need to open the same store (`--config …` or `--data-dir …`), or empty. */
  storeFlags: string;
};

type Style = Parameters<typeof styleText>[0];

/**
 * A URL with its password (and its query, which may carry one) replaced, for showing:
 * `postgres://turnpike:****@db:5432/turnpike`. Text that is not a URL shows as `(set)`.
 */
export function redactedUrl(text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return "(set)";
  }
  const user = url.username === "" && url.password === "" ? "" : `${url.username}${url.password === "" ? "" : ":****"}@`;
  const query = url.search === "" ? "" : "?…";
  return `${url.protocol}//${user}${url.host}${url.pathname === "/" ? "" : url.pathname}${query}`;
}

/** A model's state in a word or a few: `ready`, `downloading 42%`, `unavailable: <why>`. */
export function statusText(status: EngineStatus): string {
  switch (status.state) {
    case "ready":
      return "ready";
    case "downloading":
      return status.progress === undefined ? "downloading" : `downloading ${Math.floor(status.progress * 100)}%`;
    case "loading":
      return "loading";
    case "degraded":
      return status.detail === undefined ? "degraded" : `degraded: ${status.detail}`;
    case "unavailable":
      return `unavailable: ${status.detail}`;
  }
}

function statusStyle(status: EngineStatus): Style {
  if (status.state === "ready") return "green";
  if (status.state === "unavailable") return "red";
  return "yellow";
}

/** Lines drawn in a heavy box, padded to the widest: hard to scroll past. */
function boxed(lines: readonly string[], paint: (style: Style, text: string) => string, emphasized: ReadonlySet<number>): string[] {
  const width = Math.max(...lines.map((line) => line.length)) + 4;
  const border = (text: string) => paint(["yellow", "bold"], text);
  return [
    border(`┏${"━".repeat(width)}┓`),
    ...lines.map((line, index) => {
      const padded = `  ${line}${" ".repeat(width - 4 - line.length)}  `;
      return `${border("┃")}${emphasized.has(index) ? paint("bold", padded) : padded}${border("┃")}`;
    }),
    border(`┗${"━".repeat(width)}┛`),
  ];
}

/**
 * The start banner as text (ending in a newline). `color` adds terminal colors (the caller
 * decides: `colorsFor`); without it the text is plain.
 */
export function renderStartBanner(facts: StartFacts, options: { color: boolean }): string {
  const paint = (style: Style, text: string) => (options.color ? styleText(style, text, { validateStream: false }) : text);
  const label = (text: string) => paint("bold", text.padEnd(10));
  const indent = "  ";
  const lines: string[] = ["", `${indent}${paint("bold", `Turnpike ${facts.version}`)} is listening`, ""];

  lines.push(`${indent}${label("API")} ${paint("cyan", `${facts.baseUrl}/v1`)}`);
  lines.push(`${indent}${label("Console")} ${paint("cyan", `${facts.baseUrl}/`)}${facts.consoleBuilt ? "" : paint("dim", " (not built yet: run npm run build:console)")}`);
  if (facts.metricsUrl !== undefined) lines.push(`${indent}${label("Metrics")} ${facts.metricsUrl}`);
  if (facts.databaseUrl === "") {
    lines.push(`${indent}${label("Data")} ${facts.dataDir} ${paint("dim", "(SQLite database and downloaded models)")}`);
  } else {
    lines.push(`${indent}${label("Database")} ${redactedUrl(facts.databaseUrl)} ${paint("dim", "(PostgreSQL)")}`);
    lines.push(`${indent}${label("Data")} ${facts.dataDir} ${paint("dim", "(downloaded models)")}`);
  }
  if (facts.redisUrl !== "") lines.push(`${indent}${label("Redis")} ${redactedUrl(facts.redisUrl)} ${paint("dim", "(rate limits shared between nodes)")}`);
  lines.push("");

  if (facts.models.length === 0) lines.push(`${indent}${label("Models")} none`);
  const idWidth = Math.max(0, ...facts.models.map((model) => model.id.length));
  facts.models.forEach((model, index) => {
    const head = index === 0 ? label("Models") : " ".repeat(10);
    lines.push(`${indent}${head} ${model.id.padEnd(idWidth)}  ${paint(statusStyle(model.status), statusText(model.status))}`);
  });
  const settling = facts.models.some((model) => model.status.state === "loading" || model.status.state === "downloading");
  if (settling) lines.push(`${indent}${" ".repeat(10)} ${paint("dim", "(models load in the background: each change of state is logged below)")}`);
  lines.push("");

  const cli = (words: string) => paint("cyan", `${facts.command} ${words}${facts.storeFlags === "" ? "" : ` ${facts.storeFlags}`}`);
  if (facts.setupCode !== null) {
    const box = [
      "",
      "No admin account yet. To become the admin, sign up at",
      `${facts.baseUrl}/signup`,
      "with this one-time setup code:",
      "",
      `    ${facts.setupCode}`,
      "",
      "It stops working once an admin exists.",
      "",
    ];
    lines.push(...boxed(box, paint, new Set([5])).map((line) => `${indent}${line}`), "");
    lines.push(`${indent}${paint("bold", "Next:")} sign up in the console with the code above, or make the admin here:`);
    lines.push(`${indent}        ${cli("accounts create --admin --email you@example.com")}`);
    lines.push(`${indent}      then create an API key in the console (API Keys) or with:`);
  } else {
    lines.push(`${indent}${paint("bold", "Next:")} create an API key in the console (API Keys) or with:`);
  }
  lines.push(`${indent}        ${cli("keys create --name laptop")}`);
  lines.push(`${indent}      and give it to any OpenAI SDK with base URL ${facts.baseUrl}/v1`, "");
  return `${lines.join("\n")}\n`;
}
