/**
 * What a key may do, and the rule that a key never makes a key looser than itself.
 *
 * Scopes, narrowest first:
 * - `inference`: `/v1` only (the console's playground key; keys handed to applications).
 * - `account`:   `/v1` and the account's own `/api` routes (keys, usage, balance, redeeming codes).
 * - `admin`:     also the admin routes; only an admin (or the operator) may create one.
 *
 * A key used on `/api` to create a key is the child's parent: the child's scope, models, expiry,
 * rpm, tpm and spend cap must all be within the parent's (`checkChildWithinParent`). A key below
 * 'admin' revokes only itself and the keys created from it (`isSelfOrDescendant` in `api-keys.ts`).
 */
import { ApiError } from "../protocol/errors.ts";
import { KEY_SCOPES } from "../protocol/account-api-requests.ts";

export { KEY_SCOPES };
export type KeyScope = (typeof KEY_SCOPES)[number];

/** True when a key of scope `held` may do what `needed` allows. */
export function scopeCovers(held: KeyScope, needed: KeyScope): boolean {
  return KEY_SCOPES.indexOf(held) >= KEY_SCOPES.indexOf(needed);
}

/** A stored scope, read defensively: anything unknown is the narrowest. */
export function toKeyScope(value: string): KeyScope {
  return (KEY_SCOPES as readonly string[]).includes(value) ? (value as KeyScope) : "inference";
}

/** 403: a key tried to create a key with more power than its own. */
export class KeyLooserThanParentError extends ApiError {
  constructor(detail: string, param: string) {
    super(`A key may only create keys no looser than itself: ${detail}`, "key_looser_than_parent", { param });
  }
}

/** The limits of a key that bound its children; times are milliseconds since the epoch. */
export type KeyLimits = {
  scope: KeyScope;
  /** null: every model the account may use. */
  models: string[] | null;
  /** null: no expiry. */
  expires: number | null;
  /** Credit units; null: no cap of its own. */
  spendCap: number | null;
  /** Credit units spent so far (running requests are checked again when the cap is moved). */
  spent: number;
  rpm: number | null;
  tpm: number | null;
};

/** What a new key asks for; undefined or null: no limit of that kind. */
export type RequestedLimits = {
  scope: KeyScope;
  models?: string[] | null;
  expires?: number | null;
  spendCap?: number | null;
  rpm?: number | null;
  tpm?: number | null;
};

function atMost(parentValue: number | null, childValue: number | null | undefined, param: string, what: string): void {
  if (parentValue === null) return;
  if (childValue == null) throw new KeyLooserThanParentError(`this key has ${what} ${parentValue}, so '${param}' must be set, at most ${parentValue}.`, param);
  if (childValue > parentValue) throw new KeyLooserThanParentError(`'${param}' may be at most ${parentValue} (this key's own ${what}).`, param);
}

/**
 * Throws `KeyLooserThanParentError` naming the first field in which `child` would be looser than
 * `parent`: a wider scope, models outside the parent's list (or no list where the parent has one),
 * a later or no expiry, higher or no rpm/tpm, a spend cap over what the parent has left.
 */
export function checkChildWithinParent(parent: KeyLimits, child: RequestedLimits): void {
  if (!scopeCovers(parent.scope, child.scope)) {
    throw new KeyLooserThanParentError(`this key's scope is '${parent.scope}', so 'scope' may not be '${child.scope}'.`, "scope");
  }
  if (parent.models !== null) {
    if (child.models == null) {
      throw new KeyLooserThanParentError(`this key may use only ${JSON.stringify(parent.models)}, so 'models' must list some of them.`, "models");
    }
    const allowed = new Set(parent.models);
    const index = child.models.findIndex((model) => !allowed.has(model));
    if (index >= 0) throw new KeyLooserThanParentError(`this key may not use '${child.models[index]!.slice(0, 100)}'.`, `models[${index}]`);
  }
  if (parent.expires !== null) {
    const expiresAt = Math.floor(parent.expires / 1000);
    if (child.expires == null) throw new KeyLooserThanParentError(`this key expires at ${expiresAt}, so 'expires_at' must be set, at most ${expiresAt}.`, "expires_at");
    if (child.expires > parent.expires) throw new KeyLooserThanParentError(`'expires_at' may be at most ${expiresAt} (when this key expires).`, "expires_at");
  }
  atMost(parent.rpm, child.rpm, "rpm", "rpm limit");
  atMost(parent.tpm, child.tpm, "tpm", "tpm limit");
  atMost(parent.spendCap === null ? null : Math.max(0, parent.spendCap - parent.spent), child.spendCap, "spend_cap", "remaining spend cap");
}
