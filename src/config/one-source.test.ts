/**
 * The settings are the one source of configuration: only `src/config/` reads the environment.
 * Everything else receives values (the composition root hands them down).
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";

const sourceRoot = path.resolve(import.meta.dirname, "..");
const configDirectory = path.join(sourceRoot, "config");

/** Every TypeScript file under `directory`, tests and `src/config/` left out. */
function sourceFiles(directory: string): string[] {
  const files: string[] = [];
  for (const entry of fs.readdirSync(directory, { withFileTypes: true })) {
    const full = path.join(directory, entry.name);
    if (entry.isDirectory()) {
      if (full !== configDirectory) files.push(...sourceFiles(full));
    } else if (/\.tsx?$/.test(entry.name) && !/\.test\.tsx?$/.test(entry.name)) {
      files.push(full);
    }
  }
  return files;
}

describe("configuration has one source", () => {
  it("reads process.env nowhere in src/ outside src/config/ (tests excepted)", () => {
    const files = sourceFiles(sourceRoot);
    assert.ok(files.length > 50, `found the sources (${files.length} files)`);
    const readers = files.flatMap((file) =>
      fs
        .readFileSync(file, "utf8")
        .split("\n")
        .flatMap((line, index) => (/process\s*(\.\s*env\b|\[\s*["'`]env["'`]\s*\])|\{\s*env\s*\}\s*=\s*process\b/.test(line) ? [`${path.relative(sourceRoot, file)}:${index + 1}: ${line.trim()}`] : [])),
    );
    assert.deepEqual(readers, [], "read settings from the config instead (src/config/options.ts)");
  });
});
