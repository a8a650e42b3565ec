/**
 * Billing errors shown to API and console clients, with stable codes.
 */
import { ApiError } from "../protocol/errors.ts";

/** 404: no plan with this id. */
export class PlanNotFoundError extends ApiError {
  constructor(planId: string) {
    super(`The plan '${planId}' does not exist.`, "plan_not_found", { param: "plan" });
  }
}

/** 409: a plan with this id exists already. */
export class PlanExistsError extends ApiError {
  constructor(planId: string) {
    super(`A plan '${planId}' exists already; edit it with PATCH /api/admin/plans/${planId}.`, "plan_exists", { param: "id" });
  }
}

export class CodeNotFoundError extends ApiError {
  constructor() {
    super("This redemption code is not valid. Check it for typos.", "code_not_found", { param: "code" });
  }
}

export class CodeAlreadyRedeemedError extends ApiError {
  constructor() {
    super("This redemption code has been redeemed already.", "code_already_redeemed", { param: "code" });
  }
}


/**
 * 409: the grant (a purchase, a code, an admin grant) would take the account past the most
 * credit an account may hold (`MAX_CREDIT`, counting what its running requests hold). Nothing
 * was granted; a code stays unredeemed.
 */
export class BalanceLimitExceededError extends ApiError {
  constructor(amount: number, maximum: number) {
    super(`Granting ${amount} credits would take the account past the most it may hold (${maximum} credits). Nothing was granted.`, "balance_limit_exceeded");
  }
}

/** 400: a stored plan (made before the bounds existed) grants more days than a plan may last; edit the plan. */
export class PlanOutOfBoundsError extends ApiError {
  constructor(message: string) {
    super(message, "plan_out_of_bounds", { param: "plan" });
  }
}
