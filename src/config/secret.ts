/**
 * A setting that must never be logged (a Stripe key, an upstream's API key, a Hugging Face
 * token). It prints as `[secret]` however it is written out (JSON, `util.inspect`, a template
 * string); code that needs the value calls `reveal()` where it sends it.
 */
import { inspect } from "node:util";

export class Secret {
  readonly #value: string;

  constructor(value: string) {
    this.#value = value;
  }

  /** The value itself, for the one place that sends it. */
  reveal(): string {
    return this.#value;
  }

  toString(): string {
    return "[secret]";
  }

  toJSON(): string {
    return "[secret]";
  }

  [inspect.custom](): string {
    return "[secret]";
  }
}

/** A secret from a setting's text: null when empty (not set). */
export function secretOrNull(value: string): Secret | null {
  const trimmed = value.trim();
  return trimmed === "" ? null : new Secret(trimmed);
}
