import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { defaultTextOf, serveOptionList } from "./options.ts";

const readme = fs.readFileSync(path.resolve(import.meta.dirname, "../../README.md"), "utf8");

describe("the settings reference", () => {
  it("has a README row for every serve option, with its flag, variable and default", () => {
    const rows = readme.split("\n").filter((line) => line.startsWith("| `--"));
    for (const option of serveOptionList) {
      const row = rows.find((line) => line.startsWith(`| \`${option.flag}\` | \`${option.env}\` |`));
      assert.ok(row, `README lists ${option.flag} with ${option.env}`);
      const defaultCell = row.split(" | ")[2]!.replaceAll("`", "").replaceAll("−", "-");
      assert.equal(defaultCell, defaultTextOf(option), `README shows the default of ${option.flag}`);
    }
  });
});
