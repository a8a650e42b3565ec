/**
 * What the stored-response store (`store.ts`) refuses, typed so that the routes map each to its
 * OpenAI-shaped error (the store knows nothing of HTTP).
 */

/** A response weighs more than `MAX_STORED_RESPONSE_BYTES` (its input items' JSON plus its resource's): it is not stored. */
export class StoredResponseTooLargeError extends Error {
  readonly responseId: string;
  /** UTF-8 bytes of its input items' JSON plus its response resource's JSON. */
  readonly sizeBytes: number;
  readonly maxBytes: number;
  constructor(responseId: string, sizeBytes: number, maxBytes: number) {
    super(`response ${responseId} weighs ${sizeBytes} bytes, more than the ${maxBytes} a stored response may`);
    this.name = "StoredResponseTooLargeError";
    this.responseId = responseId;
    this.sizeBytes = sizeBytes;
    this.maxBytes = maxBytes;
  }
}

/** A save named an id another account's response holds (ids are random: a bug, never a client's doing). Nothing was written. */
export class ResponseIdTakenError extends Error {
  readonly responseId: string;
  constructor(responseId: string) {
    super(`response id ${responseId} belongs to another owner; not written`);
    this.name = "ResponseIdTakenError";
    this.responseId = responseId;
  }
}

/** `after` names no input item of the response being paged. */
export class InputItemCursorError extends Error {
  readonly after: string;
  constructor(after: string) {
    super(`no input item ${after} in this response`);
    this.name = "InputItemCursorError";
    this.after = after;
  }
}

/**
 * A response's chain of `previous_response_id`s reaches one that is gone (deleted, expired, or
 * not the caller's account's): its context cannot be rebuilt. `missingId` is that id, as the
 * caller's own response names it.
 */
export class BrokenResponseChainError extends Error {
  readonly responseId: string;
  readonly missingId: string;
  constructor(responseId: string, missingId: string) {
    super(`response ${responseId} continues response ${missingId}, which is not stored (deleted or expired)`);
    this.name = "BrokenResponseChainError";
    this.responseId = responseId;
    this.missingId = missingId;
  }
}

/** A chain of `previous_response_id`s longer than the bound it is read with. */
export class ResponseChainTooLongError extends Error {
  readonly responseId: string;
  readonly maxResponses: number;
  constructor(responseId: string, maxResponses: number) {
    super(`response ${responseId} continues a chain of more than ${maxResponses} responses`);
    this.name = "ResponseChainTooLongError";
    this.responseId = responseId;
    this.maxResponses = maxResponses;
  }
}
