/**
 * Each request's logger (`request.log`), made when the request first logs at a level the server
 * writes, not before. Fastify makes a pino child with the request's id for every request; pino
 * serialises the bindings (and runs them through the redaction) to make it: about 1% of a proxied
 * request's CPU in the gateway bench's profile, for a logger that at the `warn` level most
 * requests never write to. What a request logs is the same line either way.
 */
import type { FastifyBaseLogger } from "fastify";
import type { Bindings, ChildLoggerOptions, Level } from "pino";

type Parent = FastifyBaseLogger & { isLevelEnabled(level: string): boolean };

class LazyChildLogger {
  readonly #parent: Parent;
  readonly #bindings: Bindings;
  readonly #options: ChildLoggerOptions;
  #child: FastifyBaseLogger | undefined;

  constructor(parent: Parent, bindings: Bindings, options: ChildLoggerOptions) {
    this.#parent = parent;
    this.#bindings = bindings;
    this.#options = options;
  }

  #real(): FastifyBaseLogger {
    return (this.#child ??= this.#parent.child(this.#bindings, this.#options));
  }

  #write(level: Level, args: unknown[]): void {
    // The child's level is its parent's (no per-route level is set: see `requestLoggerFactory`).
    if (this.#child === undefined && !this.#parent.isLevelEnabled(level)) return;
    (this.#real()[level] as (...values: unknown[]) => void)(...args);
  }

  get level(): string {
    return this.#child?.level ?? this.#parent.level;
  }

  set level(level: string) {
    this.#real().level = level;
  }

  // Methods on the prototype: a request's logger costs one small object, not a closure per level.
  fatal(...args: unknown[]): void {
    this.#write("fatal", args);
  }
  error(...args: unknown[]): void {
    this.#write("error", args);
  }
  warn(...args: unknown[]): void {
    this.#write("warn", args);
  }
  info(...args: unknown[]): void {
    this.#write("info", args);
  }
  debug(...args: unknown[]): void {
    this.#write("debug", args);
  }
  trace(...args: unknown[]): void {
    this.#write("trace", args);
  }
  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.#real().child(bindings, options);
  }
}

/**
 * Fastify's `childLoggerFactory`: a lazy child, or pino's own child where the route sets a level
 * or serializers of its own (none does today).
 */
export function requestLoggerFactory(logger: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions): FastifyBaseLogger {
  const parent = logger as Parent;
  if (options.level !== undefined || options.serializers !== undefined || typeof parent.isLevelEnabled !== "function") return logger.child(bindings, options);
  return new LazyChildLogger(parent, bindings, options) as unknown as FastifyBaseLogger;
}
