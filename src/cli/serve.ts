/**
 * `turnpike serve`: validates the settings, starts the server, and stops gracefully on
 * SIGTERM (after the drain delay) or SIGINT (at once): running requests finish within the
 * shutdown timeout, then exit 0.
 */
import fs from "node:fs";
import path from "node:path";
import type { Command } from "commander";
import { ConfigError, loadProcessSettings, type ResolvedSettings } from "../config/load.ts";
import type { RunningServer } from "../main.ts";
import { serveOptions } from "../config/options.ts";
import { terminalEnvironment } from "../config/terminal.ts";
import { chooseLogFormat, colorsFor, prettyLogStream } from "./log-format.ts";
import { renderStartBanner, type StartFacts } from "./start-banner.ts";
import { serveFlagsOf, withServeOptions, type RawServeFlags } from "./serve-options.ts";

/** A path as a shell reads it back: quoted when it holds anything but plain characters. */
function shellWord(text: string): string {
  return /^[\w./:@%+=-]+$/.test(text) ? text : `'${text.replaceAll("'", "'\\''")}'`;
}

/** What the start banner shows, from the settings and the running server. */
async function startFacts(
  settings: ResolvedSettings,
  server: RunningServer,
  consoleDirectory: string,
): Promise<StartFacts> {
  const { serverVersion } = await import("../http/routes/openapi/route.ts");
  const storeFlags =
    settings.config !== ""
      ? `--config ${shellWord(settings.config)}`
      : settings.database_url === "" && path.resolve(settings.data_dir) !== path.resolve(serveOptions.data_dir.default)
        ? `--data-dir ${shellWord(settings.data_dir)}`
        : "";
  return {
    version: serverVersion(),
    baseUrl: settings.public_url.replace(/\/$/, "") || server.url,
    consoleBuilt: fs.existsSync(path.join(consoleDirectory, "index.html")),
    ...(server.metricsUrl === undefined ? {} : { metricsUrl: server.metricsUrl }),
    models: server.catalog.list().map((model) => ({ id: model.id, status: model.engine.status() })),
    dataDir: path.resolve(settings.data_dir),
    databaseUrl: settings.database_url,
    redisUrl: settings.redis_url,
    setupCode: server.setupCode,
    // npm puts node_modules/.bin on the PATH of its scripts only: from a shell, npx finds the command.
    command: terminalEnvironment().startedByNpm ? "npx turnpike" : "turnpike",
    storeFlags,
  };
}

export function registerServeCommand(program: Command): void {
  const command = withServeOptions(program.command("serve").description("serve the OpenAI-compatible API"));
  command.action(async (raw: RawServeFlags) => {
    const flags = serveFlagsOf(raw);
    let settings;
    try {
      settings = loadProcessSettings(flags);
    } catch (error) {
      if (error instanceof ConfigError) {
        process.stderr.write(`turnpike: ${error.message}\n`);
        process.exit(2);
      }
      throw error;
    }
    // Loaded here, not at the top: `keys` and `migrate` need none of the engine code.
    const { createLogger, startServer, CONSOLE_DIRECTORY } = await import("../main.ts");
    // The log goes to standard output: it decides whether a person is reading.
    const pretty = chooseLogFormat(settings.log_format, process.stdout.isTTY === true) === "pretty";
    const color = pretty && colorsFor(process.stdout, terminalEnvironment());
    const logger = createLogger(settings.log_level, pretty ? prettyLogStream({ color }) : undefined);
    let server: Awaited<ReturnType<typeof startServer>>;
    try {
      server = await startServer(settings, logger, { announceStart: !pretty });
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      const { isDatabaseUnavailable } = await import("../store/errors.ts");
      const advice = isDatabaseUnavailable(error) ? "the database is unreachable; check --database-url (TURNPIKE_DATABASE_URL) and that the server is up: " : "";
      process.stderr.write(`turnpike: could not start: ${advice}${message}\n`);
      process.exit(1);
    }
    if (pretty) {
      process.stdout.write(renderStartBanner(await startFacts(settings, server, CONSOLE_DIRECTORY), { color }));
    } else if (server.setupCode !== null) {
      // Like Jupyter's token: on the terminal (or the service's journal), never in the JSON log.
      process.stderr.write(
        `\nturnpike: no admin account yet. To become the admin, sign up at ${settings.public_url.replace(/\/$/, "") || server.url}/signup with this one-time setup code:\n\n    ${server.setupCode}\n\n` +
          "It stops working once an admin exists. (Or create one with `turnpike accounts create --admin`.)\n\n",
      );
    }
    // SIGTERM (an orchestrator, a rolling restart): drain first, so the load balancer's health
    // check sees /ready 503 and stops sending before the port closes. SIGINT (Ctrl-C on a
    // terminal): nobody balances onto this process, so it stops accepting at once. Either way
    // running requests get --shutdown-timeout. A second signal cuts them now (billed for what
    // they generated, as at the timeout) and exits 1 once what is quick to flush is flushed,
    // within FORCED_STOP_MS; a third exits at once. Anything left held is swept by the other
    // nodes or by the next start, as after a crash.
    let signals = 0;
    const FORCED_STOP_MS = 3000;
    const exit = (code: number) => {
      logger.info({ exit_code: code }, "exit");
      logger.flush();
      process.exit(code);
    };
    const stop = (signal: NodeJS.Signals) => {
      signals++;
      if (signals === 2) {
        logger.warn({ signal }, "second signal: cutting running requests, flushing what is quick, exiting");
        setTimeout(() => exit(1), FORCED_STOP_MS).unref();
        server.abortNow().then(
          () => exit(1),
          () => exit(1),
        );
        return;
      }
      if (signals > 2) {
        logger.warn({ signal }, "third signal: exiting now");
        exit(1);
      }
      const drainMs = signal === "SIGTERM" ? settings.drain_delay * 1000 : 0;
      logger.info({ signal, drain_delay_seconds: drainMs / 1000, shutdown_timeout_seconds: settings.shutdown_timeout }, "shutting down");
      server.drain(drainMs).then(
        () => {
          logger.info("stopped");
          exit(0);
        },
        (error: unknown) => {
          logger.error({ err: error }, "error while shutting down");
          exit(1);
        },
      );
    };
    process.on("SIGINT", stop);
    process.on("SIGTERM", stop);
    // A promise rejection nobody handled is a bug to log, not a reason to cut every other stream
    // and unload the models (Node's default is to exit).
    process.on("unhandledRejection", (reason) => {
      logger.error({ err: reason }, "unhandled promise rejection (a bug: please report it)");
    });
  });
}
