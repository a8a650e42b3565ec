/** Rewrites README.md's error table from the error catalog: `node scripts/write-error-table.ts`. */
import { readFileSync, writeFileSync } from "node:fs";
import { withErrorTable } from "../src/protocol/error-table.ts";

const path = new URL("../README.md", import.meta.url);
writeFileSync(path, withErrorTable(readFileSync(path, "utf8")));
