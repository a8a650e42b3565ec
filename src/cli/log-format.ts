/**
 * How `turnpike serve` writes its log (`--log-format`): JSON lines for collectors (piped, in a
 * container, under systemd), or on a terminal one readable line per record through pino-pretty.
 * pino-pretty runs in-process and synchronously (its `prettyFactory`, not a transport or a worker
 * thread), so the last records before an exit are not lost.
 */
import { prettyFactory, type MessageFormatFunc } from "pino-pretty";
import { pino, type DestinationStream } from "pino";

/** `--log-format`'s values. */
export type LogFormatSetting = "auto" | "pretty" | "json";
export type LogFormat = "pretty" | "json";

/** `auto` is pretty when the log goes to a terminal, JSON otherwise; the others are forced. */
export function chooseLogFormat(setting: LogFormatSetting, toTerminal: boolean): LogFormat {
  if (setting !== "auto") return setting;
  return toTerminal ? "pretty" : "json";
}

/** What `colorsFor` needs of a stream: Node's `tty.WriteStream` has both. */
export type OutputStream = { isTTY?: boolean; hasColors?: () => boolean };

/**
 * Whether text written to `stream` may carry colors. On a terminal, Node's `hasColors()` decides
 * (it honours FORCE_COLOR, NO_COLOR, NODE_DISABLE_COLORS and TERM=dumb); elsewhere only
 * FORCE_COLOR (other than 0 or false) turns them on.
 */
export function colorsFor(stream: OutputStream, env: { FORCE_COLOR?: string }): boolean {
  if (stream.isTTY === true && typeof stream.hasColors === "function") return stream.hasColors();
  const force = env.FORCE_COLOR;
  return force !== undefined && force !== "0" && force !== "false";
}

/** What a request served: its generation's record (`chat completion`, `embeddings` …) joined to the request's line. */
type Served = { model: string; keyId?: string; promptTokens: number; completionTokens?: number };
/** Where a request record carries what it served (a key no logged field uses). */
const SERVED = "\u0000served";
/** Records remembered for joining (generations waiting for their request's line, lines already shown): a bound. */
const MOST_REMEMBERED = 1000;

/** Fields every record carries that a person at a terminal does not need. */
const NOISE = new Set(["level", "time", "msg", "pid", "hostname", "service", "reqId", SERVED]);

/** A value as `key=value` shows it: quoted when it holds spaces; an error as its message. */
function fieldText(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === "string") return /^[^\s"=]+$/.test(value) ? value : JSON.stringify(value);
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  if (Array.isArray(value) && value.every((item) => typeof item === "string" || typeof item === "number")) return value.join(",");
  if (typeof value === "object" && "message" in value && typeof value.message === "string") return JSON.stringify(value.message);
  return JSON.stringify(value);
}

/** The status colored by its class: 2xx green, 3xx cyan, 4xx yellow, 5xx (and 499) red. */
function statusColor(status: number): "green" | "cyan" | "yellow" | "red" {
  if (status >= 500 || status === 499) return "red";
  if (status >= 400) return "yellow";
  if (status >= 300) return "cyan";
  return "green";
}

/**
 * The text after time and level. A request record (`http/app.ts`'s one line per request) reads
 * `POST /v1/chat/completions 200 312ms`, then what it served when `prettyPrinter` joined its
 * generation's record (`model=stories key=key_… 21+16 tok`: prompt + completion); any other record is its message, then its fields as
 * `key=value` (leaving out those already in the message), then an error's stack at error level.
 */
export const formatMessage: MessageFormatFunc = (log, messageKey, _levelLabel, { colors }) => {
  const message = typeof log[messageKey] === "string" ? (log[messageKey] as string) : "";
  if (message === "request" && typeof log.method === "string" && typeof log.url === "string" && typeof log.status === "number") {
    const latency = typeof log.latency_ms === "number" ? ` ${colors.gray(`${log.latency_ms}ms`)}` : "";
    const served = log[SERVED] as Served | undefined;
    const summary =
      served === undefined
        ? ""
        : ` ${colors.gray("model=")}${served.model}${served.keyId === undefined ? "" : ` ${colors.gray("key=")}${served.keyId}`} ${served.promptTokens}${served.completionTokens === undefined ? "" : `+${served.completionTokens}`} tok`;
    return `${log.method} ${log.url} ${colors[statusColor(log.status)](String(log.status))}${latency}${summary}`;
  }
  const fields: string[] = [];
  let stack: string | undefined;
  for (const [key, value] of Object.entries(log)) {
    if (NOISE.has(key) || key === messageKey) continue;
    if (typeof value === "string" && value.length > 1 && message.includes(value)) continue;
    if (typeof value === "object" && value !== null && "stack" in value && typeof value.stack === "string") stack = value.stack;
    // `logger.error(error)` makes the error's message the record's: said once.
    if (typeof value === "object" && value !== null && "message" in value && value.message === message) continue;
    const text = fieldText(value);
    if (text === undefined) continue;
    fields.push(`${colors.gray(`${key}=`)}${text}`);
  }
  const line = fields.length === 0 ? message : `${message} ${fields.join(" ")}`;
  const level = typeof log.level === "number" ? log.level : 0;
  // An error's place in the code matters when it is one (error and fatal), not for warnings.
  return stack !== undefined && level >= 50 ? `${line}\n${stack.replace(/^/gm, "    ")}` : line;
};

/** A generation's record: logged on the request's logger with its model, key and tokens, just before the request's own record. */
function servedBy(record: Record<string, unknown>): Served | undefined {
  if (typeof record.reqId !== "string" || typeof record.model !== "string" || typeof record.prompt_tokens !== "number" || record.level !== 30) return undefined;
  return {
    model: record.model,
    ...(typeof record.key_id === "string" ? { keyId: record.key_id } : {}),
    promptTokens: record.prompt_tokens,
    ...(typeof record.completion_tokens === "number" ? { completionTokens: record.completion_tokens } : {}),
  };
}

/**
 * Turns JSON log lines into readable lines (each with its line end; empty when held back). A
 * generation's record is held back and shown on its request's line (model, key id, prompt +
 * completion tokens), so a request reads as one line; should it come after the request's line
 * instead, it is shown on its own.
 */
export function prettyPrinter(options: { color: boolean }): (jsonLine: string) => string {
  const pretty = prettyLine(options);
  const waiting = new Map<string, Served>();
  /** Requests whose line went out with nothing joined: a generation's record coming later is shown on its own. */
  const shown = new Set<string>();
  const remember = <T>(collection: { size: number; keys(): IterableIterator<T>; delete(key: T): boolean }) => {
    if (collection.size > MOST_REMEMBERED) collection.delete(collection.keys().next().value!);
  };
  return (jsonLine) => {
    let record: Record<string, unknown>;
    try {
      record = JSON.parse(jsonLine) as Record<string, unknown>;
    } catch {
      return jsonLine.endsWith("\n") ? jsonLine : `${jsonLine}\n`;
    }
    const served = servedBy(record);
    if (served !== undefined && !shown.delete(record.reqId as string)) {
      waiting.set(record.reqId as string, served);
      remember(waiting);
      return "";
    }
    if (record.msg === "request" && typeof record.reqId === "string") {
      const found = waiting.get(record.reqId);
      if (found === undefined) {
        shown.add(record.reqId);
        remember(shown);
      } else {
        waiting.delete(record.reqId);
        record[SERVED] = found;
      }
    }
    return pretty(record);
  };
}

/** Turns one log record (a JSON line or its object) into its readable line, with its line end. */
export function prettyLine(options: { color: boolean }): (record: string | object) => string {
  return prettyFactory({
    colorize: options.color,
    translateTime: "SYS:HH:MM:ss",
    messageFormat: formatMessage,
    // `formatMessage` shows the fields that matter; pino-pretty's own object dump is off.
    hideObject: true,
    ignore: "pid,hostname,service,reqId",
  });
}

/**
 * A pino destination writing readable lines to standard output, synchronously: what was logged
 * is on the terminal before the next statement runs (and before an exit).
 */
export function prettyLogStream(options: { color: boolean; fd?: number }): DestinationStream {
  const pretty = prettyPrinter(options);
  const out = pino.destination({ dest: options.fd ?? 1, sync: true });
  return {
    write(line: string) {
      const text = pretty(line);
      if (text !== undefined && text !== "") out.write(text);
    },
  };
}
