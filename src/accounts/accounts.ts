/**
 * Accounts: email, optional password, role. API keys without an account belong to the
 * built-in operator account, which is not metered.
 */
import { randomBytes } from "node:crypto";
import type { Kysely } from "kysely";
import type { AccountTable, Database } from "../store/schema.ts";
import { hashPassword } from "../auth/passwords.ts";

export type Account = {
  id: string;
  email: string;
  role: "admin" | "user";
  /** Spendable credit (running holds excluded). */
  balance: number;
  planId: string | null;
  created: number;
  disabled: number | null;
};

export class AccountExistsError extends Error {
  constructor(email: string) {
    super(`an account with email '${email}' exists already`);
    this.name = "AccountExistsError";
  }
}

export class AccountNotFoundError extends Error {
  constructor(what: string) {
    super(`no account ${what}`);
    this.name = "AccountNotFoundError";
  }
}

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase();
}

export function isValidEmail(email: string): boolean {
  return EMAIL.test(email) && email.length <= 254;
}

export function toAccount(row: AccountTable): Account {
  return {
    id: row.id,
    email: row.email,
    role: row.role,
    balance: Number(row.balance),
    planId: row.plan_id,
    created: Number(row.created_at),
    disabled: row.disabled_at === null ? null : Number(row.disabled_at),
  };
}

export type CreateAccountOptions = { email: string; password?: string; role?: "admin" | "user"; now?: number };

/** Creates an account; throws `AccountExistsError` for a taken email. */
export async function createAccount(database: Kysely<Database>, options: CreateAccountOptions): Promise<Account> {
  const email = normalizeEmail(options.email);
  if (!isValidEmail(email)) throw new Error(`'${options.email}' is not a valid email address`);
  const row: AccountTable = {
    id: `acct_${randomBytes(12).toString("base64url")}`,
    email,
    password_hash: options.password === undefined ? null : await hashPassword(options.password),
    role: options.role ?? "user",
    balance: 0,
    plan_id: null,
    created_at: options.now ?? Date.now(),
    disabled_at: null,
  };
  const existing = await database.selectFrom("accounts").select("id").where("email", "=", email).executeTakeFirst();
  if (existing !== undefined) throw new AccountExistsError(email);
  try {
    await database.insertInto("accounts").values(row).execute();
  } catch (error) {
    if (/unique|duplicate/i.test(String((error as Error).message))) throw new AccountExistsError(email);
    throw error;
  }
  return toAccount(row);
}

export async function findAccountByEmail(database: Kysely<Database>, email: string): Promise<Account | undefined> {
  const row = await database.selectFrom("accounts").selectAll().where("email", "=", normalizeEmail(email)).executeTakeFirst();
  return row && toAccount(row);
}

export async function findAccountById(database: Kysely<Database>, id: string): Promise<Account | undefined> {
  const row = await database.selectFrom("accounts").selectAll().where("id", "=", id).executeTakeFirst();
  return row && toAccount(row);
}

/** The account with this email, or `AccountNotFoundError`. */
export async function requireAccountByEmail(database: Kysely<Database>, email: string): Promise<Account> {
  const account = await findAccountByEmail(database, email);
  if (account === undefined) throw new AccountNotFoundError(`with email '${normalizeEmail(email)}'`);
  return account;
}

export async function listAccounts(database: Kysely<Database>): Promise<Account[]> {
  return (await database.selectFrom("accounts").selectAll().orderBy("created_at").orderBy("id").execute()).map(toAccount);
}
