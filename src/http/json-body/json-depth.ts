/**
 * The nesting-depth limit of JSON bodies, checked by one linear scan over the bytes before
 * `JSON.parse` runs: a body nested hundreds of thousands of levels deep is refused before anything
 * recursive (the parse, a schema's walk, the structured clone that carries a value between threads)
 * ever sees it. Shared by both parsing paths (the main thread's and the body worker's).
 */
import { ApiError } from "../../protocol/errors.ts";

/**
 * Arrays and objects nested in one another at most. A chat request needs about 6 levels around a
 * JSON schema (`response_format.json_schema.schema`, `tools[].function.parameters`) and each level
 * of a schema's objects takes 2 (`properties`, then the property): 128 leaves room for schemas
 * about 60 objects deep, far beyond any real one.
 */
export const MAX_JSON_DEPTH = 128;

/** 400 `json_too_deep`: the body nests arrays and objects deeper than `MAX_JSON_DEPTH`. */
export class JsonTooDeepError extends ApiError {
  constructor(limit = MAX_JSON_DEPTH) {
    super(`The JSON body nests arrays and objects more than ${limit} levels deep; at most ${limit} are accepted.`, "json_too_deep");
  }
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;

/**
 * Whether the JSON text in `bytes` (UTF-8: no byte of a multi-byte character is ASCII) opens more
 * than `limit` arrays and objects inside one another, brackets inside strings not counted. Linear
 * in the length; text that is not JSON gets an answer too (the parse refuses it afterwards).
 */
export function nestedDeeperThan(bytes: Uint8Array, limit = MAX_JSON_DEPTH): boolean {
  let depth = 0;
  const length = bytes.length;
  for (let index = 0; index < length; index++) {
    const byte = bytes[index];
    if (byte === QUOTE) {
      index = closingQuote(bytes, index);
      if (index < 0) return false;
    } else if (byte === OPEN_BRACKET || byte === OPEN_BRACE) {
      if (++depth > limit) return true;
    } else if (byte === CLOSE_BRACKET || byte === CLOSE_BRACE) {
      depth--;
    }
  }
  return false;
}

/** Bytes of a string read one by one before the rest is searched natively: most strings are shorter. */
const SHORT_STRING_BYTES = 64;

/** The index of the quote that closes the string opened at `open`, or -1 when none does. */
function closingQuote(bytes: Uint8Array, open: number): number {
  const length = bytes.length;
  let index = open + 1;
  for (;;) {
    // Short strings (keys, roles, most values): a plain loop, which beats a native call per string.
    const stop = Math.min(length, index + SHORT_STRING_BYTES);
    for (; index < stop; index++) {
      const byte = bytes[index];
      if (byte === BACKSLASH) index++;
      else if (byte === QUOTE) return index;
    }
    if (index >= length) return -1;
    // A long string: a native search for its next quote.
    const quote = bytes.indexOf(QUOTE, index);
    if (quote < 0) return -1;
    // Escaped when an odd number of backslashes precede it (a run of them always starts inside
    // the string, so its parity is right); each run is counted once, so this stays linear.
    let backslashes = 0;
    while (bytes[quote - 1 - backslashes] === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return quote;
    index = quote + 1;
  }
}
