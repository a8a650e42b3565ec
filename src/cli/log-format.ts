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
export function colorsFor(stream: OutputStream, env: NodeJS.ProcessEnv = process.env): boolean {
  if (stream.isTTY === true && typeof stream.hasColors === "function") return stream.hasColors();
  const force = env.FORCE_COLOR;
  return force !== undefined && force !== "0" && force !== "false";
}

/** Fields every record carries that a person at a terminal does not need. */
const NOISE = new Set(["level", "time", "msg", "pid", "hostname", "service", "reqId"]);

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
 * `POST /v1/chat/completions 200 312ms`; any other record is its message, then its fields as
 * `key=value` (leaving out those already in the message), then an error's stack at error level.
 */
export const formatMessage: MessageFormatFunc = (log, messageKey, _levelLabel, { colors }) => {
  const message = typeof log[messageKey] === "string" ? (log[messageKey] as string) : "";
  if (message === "request" && typeof log.method === "string" && typeof log.url === "string" && typeof log.status === "number") {
    const latency = typeof log.latency_ms === "number" ? ` ${colors.gray(`${log.latency_ms}ms`)}` : "";
    return `${log.method} ${log.url} ${colors[statusColor(log.status)](String(log.status))}${latency}`;
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

/** Turns one JSON log line into its readable line (with its line end). */
export function prettyLine(options: { color: boolean }): (jsonLine: string) => string {
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
  const pretty = prettyLine(options);
  const out = pino.destination({ dest: options.fd ?? 1, sync: true });
  return {
    write(line: string) {
      const text = pretty(line);
      if (text !== undefined && text !== "") out.write(text);
    },
  };
}
