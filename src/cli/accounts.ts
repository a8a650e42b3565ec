/**
 * `turnpike accounts create|list|show`, `turnpike plans list|grant`.
 */
import type { Command } from "commander";
import type { Kysely } from "kysely";
import { createAccount, listAccounts, requireAccountByEmail } from "../accounts/accounts.ts";
import { newId } from "../store/ids.ts";
import { describeAccount } from "../accounts/describe-account.ts";
import { grantPlan } from "../billing/grant-plan.ts";
import { findPlan, listPlans, syncConfigPlans } from "../billing/plans-store.ts";
import type { ResolvedSettings } from "../config/load.ts";
import type { Database } from "../store/schema.ts";
import { withStore, withStoreFlags, type StoreFlags } from "./store.ts";

async function readStdin(): Promise<string> {
  let text = "";
  for await (const chunk of process.stdin) text += chunk.toString();
  return text.replace(/\r?\n$/, "");
}

export function fail(message: string): void {
  process.stderr.write(`turnpike: ${message}\n`);
  process.exitCode = 1;
}

/** An account as the CLI shows it, with the plan and when its credit runs out. */
async function showAccount(database: Kysely<Database>, email: string) {
  const found = await requireAccountByEmail(database, email);
  const { plan, disabled: _disabled, ...account } = await describeAccount(database, found.id);
  return { ...account, plan: plan?.id ?? found.planId };
}

export function registerAccountCommands(program: Command): void {
  const accounts = program.command("accounts").description("create, list and show accounts");

  withStoreFlags(
    accounts
      .command("create")
      .description("create an account")
      .requiredOption("--email <email>", "the account's email")
      .option("--password-stdin", "read a console password from standard input")
      .option("--admin", "make it an admin")
      .option("--json", "print {id, email, role}"),
  ).action(async (options: StoreFlags & { email: string; passwordStdin?: boolean; admin?: boolean; json?: boolean }) => {
    const password = options.passwordStdin ? await readStdin() : undefined;
    if (password !== undefined && password.length < 8) return fail("the password must have at least 8 characters");
    try {
      const account = await withStore(options, (database) =>
        createAccount(database, { email: options.email, password, role: options.admin ? "admin" : "user" }),
      );
      if (options.json) process.stdout.write(`${JSON.stringify({ id: account.id, email: account.email, role: account.role })}\n`);
      else process.stdout.write(`Created ${account.role} account ${account.email} (${account.id}).\n`);
    } catch (error) {
      fail((error as Error).message);
    }
  });

  withStoreFlags(accounts.command("list").description("list accounts").option("--json", "print JSON")).action(async (options: StoreFlags & { json?: boolean }) => {
    const rows = await withStore(options, (database) => listAccounts(database));
    if (options.json) {
      process.stdout.write(`${JSON.stringify(rows.map((row) => ({ id: row.id, email: row.email, role: row.role, balance: row.balance, plan: row.planId })))}\n`);
      return;
    }
    for (const row of rows) process.stdout.write(`${row.id}  ${row.email}  ${row.role}  balance ${row.balance}  plan ${row.planId ?? "-"}\n`);
  });

  withStoreFlags(
    accounts.command("show").description("show an account, its balance and plan").requiredOption("--email <email>", "the account's email").option("--json", "print JSON"),
  ).action(async (options: StoreFlags & { email: string; json?: boolean }) => {
    try {
      const shown = await withStore(options, (database) => showAccount(database, options.email));
      process.stdout.write(options.json ? `${JSON.stringify(shown)}\n` : `${Object.entries(shown).map(([name, value]) => `${name}: ${value ?? "-"}`).join("\n")}\n`);
    } catch (error) {
      fail((error as Error).message);
    }
  });

  const plans = program.command("plans").description("list plans and grant them");
  withStoreFlags(plans.command("list").description("list the plans on offer").option("--json", "print JSON")).action(async (options: StoreFlags & { json?: boolean }) => {
    const rows = await withStore(options, async (database, settings) => {
      await syncPlansFromConfig(database, settings);
      return listPlans(database);
    }).catch((error: unknown) => {
      fail((error as Error).message);
      return undefined;
    });
    if (rows === undefined) return;
    if (options.json) return void process.stdout.write(`${JSON.stringify(rows)}\n`);
    if (rows.length === 0) return void process.stdout.write("No plans. Define them under \"plans\" in the --config file.\n");
    for (const plan of rows) {
      process.stdout.write(`${plan.id}  ${plan.name}  ${plan.price.amount} ${plan.price.currency}  credit ${plan.credit}  days ${plan.days ?? "-"}  rpm ${plan.rpm ?? "-"}  tpm ${plan.tpm ?? "-"}\n`);
    }
  });
  withStoreFlags(
    plans
      .command("grant")
      .description("grant a plan to an account (offline sales)")
      .requiredOption("--account <email>", "the account's email")
      .requiredOption("--plan <id>", "the plan id"),
  ).action(async (options: StoreFlags & { account: string; plan: string }) => {
    try {
      await withStore(options, async (database, settings) => {
        await syncPlansFromConfig(database, settings);
        const plan = await findPlan(database, options.plan);
        if (plan === undefined) throw new Error(`no plan '${options.plan}'; see: turnpike plans list`);
        const account = await requireAccountByEmail(database, options.account);
        await grantPlan(database, { accountId: account.id, plan, source: `admin:${newId("grant")}` });
        process.stdout.write(`Granted plan ${plan.id} (${plan.credit} credits${plan.days ? `, ${plan.days} days` : ""}) to ${account.email}.\n`);
      });
    } catch (error) {
      fail((error as Error).message);
    }
  });
}

/** Writes the config file's plans (when the settings name one) to the database, as `serve` does at start. */
export async function syncPlansFromConfig(database: Kysely<Database>, settings: ResolvedSettings): Promise<void> {
  if (settings.config === "") return;
  await syncConfigPlans(database, settings.plans);
}
