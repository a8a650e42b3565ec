/**
 * `turnpike check`: reads the same settings as `serve` and checks that each part they name serves,
 * without starting anything: the configuration, the database (reachable, migrations against this
 * binary's), Redis when configured (PING), the llama.cpp binding and each embedded model's file, and each upstream member
 * (reachable, kind, models, context length, credentials accepted). One line per thing (`--json`:
 * one document). Exit status: 0 when everything serves, 1 when something does not, 2 when the
 * settings are invalid. Every probe waits `--timeout` seconds at most; nothing is downloaded,
 * loaded or migrated, and no password or key is printed.
 */
import type { Command } from "commander";
import { ConfigError, loadProcessSettings, type ResolvedSettings } from "../config/load.ts";
import { serveFlagsOf, withServeOptions, type RawServeFlags } from "./serve-options.ts";
import { formatResults, resultsJson, type CheckResult } from "./check/result.ts";

/** Which llama.cpp binding embedded models run on (`runtime.ts`): informational, never a failure. */
async function checkBinding(): Promise<CheckResult> {
  const { patchedBindingInstalled } = await import("../engines/llamacpp/runtime.ts");
  const patched = patchedBindingInstalled();
  return {
    check: "runtime",
    name: "llama.cpp",
    ok: true,
    detail: patched
      ? "Turnpike's patched node-llama-cpp binding (embedding inputs decode together on the CPU)"
      : "node-llama-cpp's prebuilt binding (embedding inputs decode one at a time; npm run build:binding decodes them together)",
    facts: { binding: patched ? "patched" : "prebuilt" },
  };
}

/** Seconds each probe may take by default. */
const DEFAULT_TIMEOUT_SECONDS = 5;

/** Every check the settings call for, in the order printed (they run at once). */
export async function runChecks(settings: ResolvedSettings, timeoutMs: number): Promise<CheckResult[]> {
  const { checkDatabase } = await import("./check/database.ts");
  const { checkRedis } = await import("./check/redis.ts");
  const { checkEmbeddedModel } = await import("./check/models.ts");
  const { checkUpstreamMember } = await import("./check/upstream.ts");
  const embedded = settings.models.filter((entry) => entry.upstream === undefined).length;
  const configuration: CheckResult = {
    check: "configuration",
    name: "settings",
    ok: true,
    detail: `valid: ${settings.models.length} model(s) (${embedded} embedded, ${settings.models.length - embedded} upstream)${settings.config === "" ? "" : `, from ${settings.config} and the environment`}`,
  };
  const hub = { endpoint: settings.hf_endpoint, ...(settings.hf_token === null ? {} : { token: settings.hf_token.reveal() }) };
  const checks: Array<Promise<CheckResult>> = [checkDatabase(settings, timeoutMs)];
  if (settings.redis_url !== "") checks.push(checkRedis(settings.redis_url, timeoutMs));
  if (embedded > 0) checks.push(checkBinding());
  for (const entry of settings.models) {
    const upstream = entry.upstream;
    if (upstream === undefined) {
      checks.push(checkEmbeddedModel(entry, settings, hub, timeoutMs));
      continue;
    }
    const apiKey = upstream.api_key_env === undefined ? undefined : settings.upstream_api_keys[upstream.api_key_env]?.reveal();
    const model = { id: entry.id, upstream, ...(entry.context_length !== undefined ? { context_length: entry.context_length } : {}) };
    upstream.urls.forEach((member, index) => checks.push(checkUpstreamMember(model, member, index, apiKey, timeoutMs)));
  }
  return [configuration, ...(await Promise.all(checks))];
}

export function registerCheckCommand(program: Command): void {
  const command = program
    .command("check")
    .alias("doctor")
    .description("check the settings, database, Redis, models and upstream servers serve (exit 0), without starting the server")
    .option("--json", "print the report as JSON")
    .option("--timeout <seconds>", `how long each probe may take (default: ${DEFAULT_TIMEOUT_SECONDS})`);
  withServeOptions(command);
  command.action(async (raw: RawServeFlags) => {
    const timeoutSeconds = raw.timeout === undefined ? DEFAULT_TIMEOUT_SECONDS : Number(raw.timeout);
    if (!Number.isFinite(timeoutSeconds) || timeoutSeconds <= 0 || timeoutSeconds > 600) {
      process.stderr.write(`turnpike: --timeout must be a number of seconds (0 < seconds ≤ 600), not '${String(raw.timeout)}'\n`);
      process.exit(2);
    }
    let settings: ResolvedSettings;
    try {
      settings = loadProcessSettings(serveFlagsOf(raw));
    } catch (error) {
      if (error instanceof ConfigError) {
        if (raw.json === true) process.stdout.write(resultsJson([{ check: "configuration", name: "settings", ok: false, detail: error.message }]));
        process.stderr.write(`turnpike: ${error.message}\n`);
        process.exit(2);
      }
      throw error;
    }
    const results = await runChecks(settings, timeoutSeconds * 1000);
    process.stdout.write(raw.json === true ? resultsJson(results) : formatResults(results, process.stdout.isTTY === true));
    // Sockets the probes left (keep-alive agents) must not hold the exit.
    process.exit(results.every((result) => result.ok) ? 0 : 1);
  });
}
