/**
 * `turnpike serve`: validates the settings, starts the server, and stops gracefully on
 * SIGINT/SIGTERM (running requests finish within the shutdown timeout), exiting 0.
 */
import fs from "node:fs";
import path from "node:path";
import type { Command } from "commander";
import { ConfigError, loadProcessSettings, type ResolvedSettings } from "../config/load.ts";
import type { RunningServer } from "../main.ts";
import { serveOptions } from "../config/options.ts";
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
    command: process.env.npm_lifecycle_event === undefined ? "turnpike" : "npx turnpike",
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
    const color = pretty && colorsFor(process.stdout);
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
    let stopping = false;
    const stop = (signal: NodeJS.Signals) => {
      if (stopping) {
        logger.warn({ signal }, "second signal: exiting now");
        process.exit(1);
      }
      stopping = true;
      logger.info({ signal, grace_seconds: settings.shutdown_timeout }, "shutting down: finishing running requests");
      server.close().then(
        () => {
          logger.info("stopped");
          logger.flush();
          process.exit(0);
        },
        (error: unknown) => {
          logger.error({ err: error }, "error while shutting down");
          process.exit(1);
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
