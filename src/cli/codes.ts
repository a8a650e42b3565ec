/**
 * `turnpike codes create|list`: single-use redemption codes that grant a plan.
 */
import type { Command } from "commander";
import { createCodes, listCodes } from "../billing/codes.ts";
import { syncPlansFromConfig, fail } from "./accounts.ts";
import { withStore, withStoreFlags, type StoreFlags } from "./store.ts";

export function registerCodesCommands(program: Command): void {
  const codes = program.command("codes").description("make and list redemption codes");
  withStoreFlags(
    codes
      .command("create")
      .description("make single-use codes that grant a plan; each is printed once, one per line")
      .requiredOption("--plan <id>", "the plan a code grants")
      .option("--count <n>", "how many codes", "1")
      .option("--json", "print JSON"),
  ).action(async (options: StoreFlags & { plan: string; count: string; json?: boolean }) => {
    const count = Number(options.count);
    if (!Number.isInteger(count) || count < 1 || count > 10_000) return fail(`--count must be an integer from 1 to 10000, not '${options.count}'`);
    try {
      const made = await withStore(options, async (database, settings) => {
        await syncPlansFromConfig(database, settings);
        return createCodes(database, { planId: options.plan, count });
      });
      if (options.json) return void process.stdout.write(`${JSON.stringify({ plan: options.plan, codes: made })}\n`);
      process.stderr.write(`${made.length} code${made.length === 1 ? "" : "s"} for plan ${options.plan}. They are shown only now; store them safely.\n`);
      process.stdout.write(`${made.join("\n")}\n`);
    } catch (error) {
      fail((error as Error).message);
    }
  });
  withStoreFlags(codes.command("list").description("list codes (their prefixes), plans and redemptions").option("--json", "print JSON")).action(
    async (options: StoreFlags & { json?: boolean }) => {
      const rows = await withStore(options, (database) => listCodes(database));
      if (options.json) return void process.stdout.write(`${JSON.stringify(rows)}\n`);
      if (rows.length === 0) return void process.stdout.write("No codes. Make some with: turnpike codes create --plan <id>\n");
      for (const row of rows) {
        const redeemed = row.redeemed === null ? "unused" : `redeemed ${new Date(row.redeemed).toISOString()} by ${row.redeemedBy}`;
        process.stdout.write(`${row.displayPrefix}…  ${row.planId}  ${new Date(row.created).toISOString()}  ${redeemed}\n`);
      }
    },
  );
}
