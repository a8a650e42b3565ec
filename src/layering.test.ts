/**
 * The folders of `src/` depend inward: `protocol/` (the wire format and the shapes every layer
 * shares: plans, money, usage) at the bottom and importing nothing of ours; the engines above it,
 * knowing nothing of HTTP, databases, billing or the settings (each owns its config schema, which
 * `config/` composes); the store, limits, auth, catalog and billing above those; `http/` on top,
 * and `main.ts` the composition root. This test reads every non-test `.ts` file under `src/`,
 * resolves each relative import to the folder it lands in, and fails on any edge the table
 * forbids, naming the file and the import.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";

/** Each folder of `src/` (engine subfolders on their own; `main.ts` is one), and the folders it may not import. */
const FORBIDDEN: Readonly<Record<string, readonly string[]>> = {
  protocol: ["accounts", "auth", "billing", "catalog", "cli", "config", "engines", "http", "limits", "main.ts", "metrics", "store"],
  engines: ["accounts", "auth", "billing", "catalog", "cli", "config", "http", "limits", "main.ts", "metrics", "store"],
  // One engine never reaches into another: what they share lives in `engines/` itself.
  "engines/llamacpp": ["accounts", "auth", "billing", "catalog", "cli", "config", "engines/fake", "engines/openai-compatible", "http", "limits", "main.ts", "metrics", "store"],
  "engines/openai-compatible": ["accounts", "auth", "billing", "catalog", "cli", "config", "engines/fake", "engines/llamacpp", "http", "limits", "main.ts", "metrics", "store"],
  "engines/fake": ["accounts", "auth", "billing", "catalog", "cli", "config", "engines/llamacpp", "engines/openai-compatible", "http", "limits", "main.ts", "metrics", "store"],
  // Custom tools' grammars (Lark, regex → GBNF), shared by the engines: it uses none of them.
  "engines/grammar": ["accounts", "auth", "billing", "catalog", "cli", "config", "engines/fake", "engines/llamacpp", "engines/openai-compatible", "http", "limits", "main.ts", "metrics", "store"],
  // The settings compose the engines' own schemas; nothing above the engines.
  config: ["accounts", "auth", "billing", "catalog", "cli", "engines/fake", "http", "limits", "main.ts", "metrics", "store"],
  store: ["accounts", "auth", "billing", "catalog", "cli", "config", "engines", "http", "limits", "main.ts", "metrics"],
  limits: ["accounts", "auth", "billing", "catalog", "cli", "config", "engines", "http", "main.ts", "metrics", "store"],
  auth: ["accounts", "billing", "catalog", "cli", "config", "engines", "http", "main.ts", "metrics"],
  catalog: ["accounts", "auth", "billing", "cli", "config", "http", "limits", "main.ts", "metrics", "store"],
  metrics: ["accounts", "auth", "billing", "catalog", "cli", "config", "http", "limits", "main.ts", "store"],
  // Billing meters usage, a protocol shape (`protocol/generation.ts`), never an engine.
  billing: ["accounts", "cli", "config", "engines", "http", "limits", "main.ts", "metrics"],
  accounts: ["catalog", "cli", "config", "engines", "http", "limits", "main.ts", "metrics"],
  // Stored responses (the Responses API's persistence): the store and the protocol, nothing above.
  responses: ["accounts", "auth", "billing", "catalog", "cli", "config", "engines", "http", "limits", "main.ts", "metrics"],
  http: ["cli", "main.ts"],
  "main.ts": ["cli"],
  cli: [],
};

const SOURCE_ROOT = import.meta.dirname;

type SourceFile = { file: string; text: string };
type Violation = { file: string; specifier: string; from: string; to: string };

/** The table's folder of a path relative to `src/`: its top folder, or `engines/<name>` for a file in an engine's own folder. */
function folderOf(relative: string): string {
  const parts = relative.split(/[\\/]/);
  if (parts[0] === "engines" && parts.length > 2) return `engines/${parts[1]}`;
  return parts[0]!;
}

/** Whether `folder` falls under a table entry: `engines` covers `engines/llamacpp` too. */
function covers(entry: string, folder: string): boolean {
  return folder === entry || folder.startsWith(`${entry}/`);
}

/**
 * The relative specifiers a file imports: static imports and re-exports (types included: a type
 * import ties the folders as much as a value one) and dynamic `import()`. Imports start lines in
 * this code base, so a comment or a string that merely mentions one is not read as one.
 */
function importsOf(text: string): string[] {
  const patterns = [/^(?:import|export)\s[^;]*?\sfrom\s*["'](\.{1,2}\/[^"']+)["']/gm, /^import\s*["'](\.{1,2}\/[^"']+)["']/gm, /\bimport\(\s*["'](\.{1,2}\/[^"']+)["']\s*\)/g];
  return patterns.flatMap((pattern) => [...text.matchAll(pattern)].map((match) => match[1]!));
}

/** Every import among `files` (paths relative to `src/`) that the table forbids. */
function layeringViolations(files: readonly SourceFile[]): Violation[] {
  const violations: Violation[] = [];
  for (const { file, text } of files) {
    const from = folderOf(file);
    for (const specifier of importsOf(text)) {
      const target = path.posix.normalize(path.posix.join(path.posix.dirname(file), specifier));
      if (target.startsWith("../")) continue; // outside src/ (the console's shared modules, test helpers)
      const to = folderOf(target);
      if (to === from) continue;
      if ((FORBIDDEN[from] ?? []).some((entry) => covers(entry, to))) violations.push({ file: `src/${file}`, specifier, from, to });
    }
  }
  return violations;
}

/** Every non-test `.ts` file under `src/`, with its path relative to `src/` (posix separators). */
function sourceFiles(): SourceFile[] {
  const files: SourceFile[] = [];
  const walk = (directory: string) => {
    for (const entry of fs.readdirSync(directory, { withFileTypes: true })) {
      const full = path.join(directory, entry.name);
      if (entry.isDirectory()) {
        if (entry.name !== "__fixtures__" && entry.name !== "node_modules") walk(full);
      } else if (entry.name.endsWith(".ts") && !entry.name.endsWith(".test.ts") && !entry.name.endsWith(".d.ts")) {
        files.push({ file: path.relative(SOURCE_ROOT, full).split(path.sep).join("/"), text: fs.readFileSync(full, "utf8") });
      }
    }
  };
  walk(SOURCE_ROOT);
  return files;
}

describe("the folders of src/ depend inward", () => {
  const files = sourceFiles();

  it("no file imports a folder the layering table forbids it", () => {
    const violations = layeringViolations(files);
    const lines = violations.map(({ file, specifier, from, to }) => `  ${file} imports ${specifier} (${from} may not import ${to})`);
    assert.deepEqual(lines, [], `forbidden imports (see FORBIDDEN in src/layering.test.ts):\n${lines.join("\n")}`);
  });

  it("places every folder of src/ in the table, so a new folder says where it sits", () => {
    const unplaced = [...new Set(files.map(({ file }) => folderOf(file)))].filter((folder) => FORBIDDEN[folder] === undefined).sort();
    assert.deepEqual(unplaced, []);
  });

  it("reads the imports it judges: the real tree has edges, and a forbidden one is caught and named", () => {
    assert.ok(
      files.some(({ file, text }) => file.startsWith("http/") && importsOf(text).some((specifier) => specifier.includes("/protocol/"))),
      "the scan finds http/ importing protocol/",
    );
    const planted = layeringViolations([
      { file: "protocol/plans.ts", text: 'import { z } from "zod";\nimport { MAX_CREDIT } from "../billing/money-bounds.ts";\n// import { x } from "../store/schema.ts";\n' },
      { file: "engines/openai-compatible/pool.ts", text: 'import type {\n  UpstreamKind,\n} from "../../config/schema.ts";\nconst later = await import("../llamacpp/runtime.ts");\n' },
      { file: "http/app.ts", text: 'import { planSchema } from "../protocol/plans.ts";\nexport * from "../billing/metering.ts";\n' },
    ]);
    assert.deepEqual(
      planted.map(({ file, to }) => `${file} → ${to}`),
      ["src/protocol/plans.ts → billing", "src/engines/openai-compatible/pool.ts → config", "src/engines/openai-compatible/pool.ts → engines/llamacpp"],
    );
  });
});
