/**
 * The one-time setup code that makes the first admin of an installation, as Jupyter's token:
 * `turnpike serve` makes one at start-up while no admin exists and prints it; whoever signs up
 * in the console with it becomes the admin. Without it, nobody who merely reaches the server
 * first (a server started with `--host 0.0.0.0`, a rebinding web page) can claim it.
 *
 * Only the code's SHA-256 is stored, in `installation_claims` under `setup_code:<hash>`, so each
 * of several nodes sharing a database prints its own code and every one of them works on any
 * node. All stop working once an admin exists (made with a code or `turnpike accounts create
 * --admin`); a node forgets its own code when it stops.
 */
import { createHash, randomInt } from "node:crypto";
import type { Kysely } from "kysely";
import type { Database } from "../store/schema.ts";

/** Letters and digits that cannot be mistaken for each other (no 0/O, 1/I/L, U/V). */
const ALPHABET = "ABCDEFGHJKMNPQRSTWXYZ23456789";
/** 16 characters of a 29-letter alphabet: about 78 bits. */
const LENGTH = 16;
const PREFIX = "setup_code:";

/** The code as typed, reduced to its letters: case, spaces and dashes do not matter. */
function normalized(code: string): string {
  return code.toUpperCase().replace(/[\s-]/g, "");
}

function claimName(code: string): string {
  return PREFIX + createHash("sha256").update(normalized(code), "utf8").digest("hex");
}

/** True when the installation has an admin account. */
export async function adminExists(database: Kysely<Database>): Promise<boolean> {
  const admin = await database.selectFrom("accounts").select("id").where("role", "=", "admin").executeTakeFirst();
  return admin !== undefined;
}

/**
 * A new setup code (`ABCD-EFGH-JKMN-PQRS`) when the installation has no admin, its hash stored;
 * null when an admin exists already.
 */
export async function issueSetupCode(database: Kysely<Database>, now = Date.now()): Promise<string | null> {
  if (await adminExists(database)) return null;
  const letters = Array.from({ length: LENGTH }, () => ALPHABET[randomInt(ALPHABET.length)]).join("");
  const code = letters.match(/.{4}/g)!.join("-");
  // `account_id` names who took a claim; a setup code is taken by nobody yet.
  await database.insertInto("installation_claims").values({ name: claimName(code), account_id: "", created_at: now }).execute();
  return code;
}

/** True when `code` is a setup code some node issued and no admin exists yet. */
export async function isValidSetupCode(database: Kysely<Database>, code: string): Promise<boolean> {
  if (normalized(code).length !== LENGTH) return false;
  const row = await database.selectFrom("installation_claims").select("name").where("name", "=", claimName(code)).executeTakeFirst();
  return row !== undefined && !(await adminExists(database));
}

/** Forgets one code (a node stopping), or every code (an admin exists now). */
export async function forgetSetupCodes(database: Kysely<Database>, code?: string): Promise<void> {
  const query = database.deleteFrom("installation_claims");
  await (code === undefined ? query.where("name", "like", `${PREFIX}%`) : query.where("name", "=", claimName(code))).execute();
}
