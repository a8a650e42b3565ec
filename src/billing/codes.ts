/**
 * Redemption codes: single-use codes that grant a plan (offline sales, gifts). A code is shown
 * once when made; only its SHA-256 and a short display prefix are stored. Redeeming grants
 * the plan with source `code:<hash>`, which the ledger grants at most once, so two accounts
 * racing for one code cannot both get it.
 */
import { createHash, randomInt } from "node:crypto";
import type { Kysely } from "kysely";
import type { Database } from "../store/schema.ts";
import { CodeAlreadyRedeemedError, CodeNotFoundError, PlanNotFoundError, PlanOutOfBoundsError } from "./errors.ts";
import { grantPlan } from "./grant-plan.ts";
import { findPlan } from "./plans-store.ts";
import { planOutOfBounds, type Plan } from "../protocol/plans.ts";

/** Crockford's base32 without I, L, O, U: easy to read aloud and type. */
const ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
/** 20 characters × 5 bits = 100 random bits. */
const CODE_CHARACTERS = 20;
const DISPLAY_CHARACTERS = 4;

/** A fresh code, `TP-XXXXX-XXXXX-XXXXX-XXXXX`. */
export function generateCode(): string {
  let body = "";
  for (let index = 0; index < CODE_CHARACTERS; index++) body += ALPHABET[randomInt(ALPHABET.length)];
  return `TP-${body.match(/.{5}/g)!.join("-")}`;
}

/** The code as stored and compared: upper case, without the `TP-` prefix, dashes and spaces; O→0, I/L→1. */
export function normalizeCode(code: string): string {
  return code
    .toUpperCase()
    .replace(/^\s*TP-/, "")
    .replace(/[\s-]/g, "")
    .replace(/O/g, "0")
    .replace(/[IL]/g, "1");
}

export function hashCode(code: string): string {
  return createHash("sha256").update(normalizeCode(code), "utf8").digest("hex");
}

export type CodeRecord = {
  displayPrefix: string;
  planId: string;
  created: number;
  redeemed: number | null;
  redeemedBy: string | null;
};

/**
 * Makes `count` codes for the plan; returns them (the only time they are visible). A plan out of
 * bounds (saved before the bounds existed: more than `MAX_CREDIT`, more than `MAX_PLAN_DAYS`)
 * gets no codes: 400 `plan_out_of_bounds`.
 */
export async function createCodes(database: Kysely<Database>, input: { planId: string; count: number; now?: number }): Promise<string[]> {
  if (!Number.isInteger(input.count) || input.count < 1 || input.count > 10_000) throw new RangeError("count must be an integer from 1 to 10000");
  const plan = await findPlan(database, input.planId);
  if (plan === undefined) throw new PlanNotFoundError(input.planId);
  const outOfBounds = planOutOfBounds(plan);
  if (outOfBounds !== null) throw new PlanOutOfBoundsError(outOfBounds);
  const now = input.now ?? Date.now();
  const codes = Array.from({ length: input.count }, generateCode);
  await database
    .insertInto("redemption_codes")
    .values(
      codes.map((code) => ({
        code_hash: hashCode(code),
        plan_id: plan.id,
        created_at: now,
        redeemed_at: null,
        redeemed_by: null,
        display_prefix: `TP-${normalizeCode(code).slice(0, DISPLAY_CHARACTERS)}`,
      })),
    )
    .execute();
  return codes;
}

export async function listCodes(database: Kysely<Database>, options: { limit?: number } = {}): Promise<CodeRecord[]> {
  const rows = await database
    .selectFrom("redemption_codes")
    .selectAll()
    .orderBy("created_at", "desc")
    .limit(options.limit ?? 500)
    .execute();
  return rows.map((row) => ({
    displayPrefix: row.display_prefix ?? "TP-····",
    planId: row.plan_id,
    created: Number(row.created_at),
    redeemed: row.redeemed_at === null ? null : Number(row.redeemed_at),
    redeemedBy: row.redeemed_by,
  }));
}

/**
 * Redeems a code for an account: grants its plan once. Throws 404 for unknown codes, 409 for used
 * ones, and 409 `balance_limit_exceeded` when the plan's credit would take the account past
 * `MAX_CREDIT` (the code stays unredeemed).
 */
export async function redeemCode(database: Kysely<Database>, input: { code: string; accountId: string; now?: number }): Promise<{ plan: Plan }> {
  const hash = hashCode(input.code);
  const row = await database.selectFrom("redemption_codes").selectAll().where("code_hash", "=", hash).executeTakeFirst();
  if (row === undefined) throw new CodeNotFoundError();
  if (row.redeemed_at !== null) throw new CodeAlreadyRedeemedError();
  const plan = await findPlan(database, row.plan_id);
  if (plan === undefined) throw new PlanNotFoundError(row.plan_id);
  // The ledger's unique grant source is the claim: of two racing redemptions, one grants.
  const { granted } = await grantPlan(database, { accountId: input.accountId, plan, source: `code:${hash}` });
  if (!granted) throw new CodeAlreadyRedeemedError();
  await database
    .updateTable("redemption_codes")
    .set({ redeemed_at: input.now ?? Date.now(), redeemed_by: input.accountId })
    .where("code_hash", "=", hash)
    .where("redeemed_at", "is", null)
    .execute();
  return { plan };
}
