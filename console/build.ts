/**
 * Builds the console into `console/dist` when its sources changed since the last build
 * (a hash of `console/src`, `console/public`, the server's `src/protocol` it imports from, `index.html`, the Vite config
 * and the lockfile). `npm start` runs
 * it first; `--if-possible` warns instead of failing, so the API starts even if the build cannot.
 */
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const consoleDirectory = path.dirname(fileURLToPath(import.meta.url));
const distDirectory = path.join(consoleDirectory, "dist");
const stampFile = path.join(distDirectory, ".build-stamp");

function filesUnder(directory: string): string[] {
  return fs
    .readdirSync(directory, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile())
    .map((entry) => path.join(entry.parentPath, entry.name))
    .sort();
}

/** A hash of everything the build reads. */
export function sourceStamp(): string {
  const hash = createHash("sha256");
  const inputs = [
    ...filesUnder(path.join(consoleDirectory, "src")),
    ...filesUnder(path.join(consoleDirectory, "public")),
    // The wire types and the dependency-free helpers (money arithmetic, the error catalog) the console imports.
    ...filesUnder(path.join(consoleDirectory, "..", "src", "protocol")),
    path.join(consoleDirectory, "index.html"),
    path.join(consoleDirectory, "vite.config.ts"),
    path.join(consoleDirectory, "..", "package-lock.json"),
  ];
  for (const file of inputs) {
    hash.update(path.relative(consoleDirectory, file));
    hash.update(fs.existsSync(file) ? fs.readFileSync(file) : "");
  }
  return hash.digest("hex");
}

/** Builds unless `dist` is current; returns whether it built. */
export async function buildConsole(options: { force?: boolean; quiet?: boolean } = {}): Promise<boolean> {
  const stamp = sourceStamp();
  const current = fs.existsSync(stampFile) && fs.readFileSync(stampFile, "utf8") === stamp && fs.existsSync(path.join(distDirectory, "index.html"));
  if (current && !options.force) return false;
  const { build } = await import("vite");
  await build({ configFile: path.join(consoleDirectory, "vite.config.ts"), logLevel: options.quiet ? "warn" : "info" });
  fs.writeFileSync(stampFile, stamp);
  return true;
}

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const ifPossible = process.argv.includes("--if-possible");
  try {
    const built = await buildConsole({ force: process.argv.includes("--force") });
    if (!built) process.stdout.write("console: up to date (console/dist)\n");
  } catch (error) {
    process.stderr.write(`console: build failed: ${error instanceof Error ? error.message : String(error)}\n`);
    if (!ifPossible) process.exit(1);
    process.stderr.write("console: starting without it; the API is unaffected. Fix the error and run: npm run build:console\n");
  }
}
