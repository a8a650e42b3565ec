/**
 * A map that holds at most `capacity` entries and forgets the least recently used one first
 * (a `Map` keeps insertion order: reading or writing a key moves it to the end).
 */
export class LruMap<Key, Value> {
  readonly #entries = new Map<Key, Value>();
  readonly #capacity: number;

  /** @param capacity the most entries held (at least 1) */
  constructor(capacity: number) {
    this.#capacity = Math.max(1, capacity);
  }

  get size(): number {
    return this.#entries.size;
  }

  /** The value, marking the key as just used. */
  get(key: Key): Value | undefined {
    if (!this.#entries.has(key)) return undefined;
    const value = this.#entries.get(key) as Value;
    this.#entries.delete(key);
    this.#entries.set(key, value);
    return value;
  }

  set(key: Key, value: Value): void {
    this.#entries.delete(key);
    this.#entries.set(key, value);
    if (this.#entries.size > this.#capacity) this.#entries.delete(this.#entries.keys().next().value as Key);
  }

  delete(key: Key): void {
    this.#entries.delete(key);
  }
}
