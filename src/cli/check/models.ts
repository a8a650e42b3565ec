/**
 * `turnpike check`'s line per embedded model: its GGUF file exists and is readable, and what its
 * header says (architecture, training context); a remote source (`hf:`, https) already downloaded
 * into the data dir is checked as a file, one not downloaded yet is only asked for with a `HEAD`
 * (nothing is downloaded, and no model is loaded).
 */
import fs from "node:fs";
import { serveOptions } from "../../config/options.ts";
import { downloadedModelPath, probeHeaders, probeUrl, type HuggingFaceHub } from "../../engines/llamacpp/model-file.ts";
import { messageOf, redactUrl, type CheckResult } from "./result.ts";

/** The GGUF header's facts: architecture and training context (tokens), when it says them. */
async function ggufFacts(file: string): Promise<{ architecture?: string; trainingContext?: number }> {
  const { readGgufFileInfo } = await import("node-llama-cpp");
  const info = await readGgufFileInfo(file, { readTensorInfo: false, logWarnings: false });
  const metadata = info.architectureMetadata as { context_length?: unknown } | undefined;
  const architecture = (info.metadata as { general?: { architecture?: unknown } }).general?.architecture;
  return {
    ...(typeof architecture === "string" ? { architecture } : {}),
    ...(typeof metadata?.context_length === "number" ? { trainingContext: metadata.context_length } : {}),
  };
}

/** Checks one local GGUF file: there, readable, with a GGUF header. */
async function checkFile(id: string, file: string, contextSize: number, source: string): Promise<CheckResult> {
  try {
    fs.accessSync(file, fs.constants.R_OK);
    if (!fs.statSync(file).isFile()) throw new Error("not a file");
  } catch (error) {
    const why = (error as { code?: unknown }).code === "ENOENT" ? "no such file" : (error as { code?: unknown }).code === "EACCES" ? "not readable by this user" : messageOf(error);
    return { check: "model", name: id, ok: false, detail: `${file}: ${why}: fix the model's path (--model, TURNPIKE_MODELS, or the config file's models)`, facts: { source, path: file, readable: false } };
  }
  try {
    const facts = await ggufFacts(file);
    const context = facts.trainingContext === undefined ? contextSize : Math.min(contextSize, facts.trainingContext);
    const trained = facts.trainingContext === undefined ? "" : ` (trained on ${facts.trainingContext})`;
    return {
      check: "model",
      name: id,
      ok: true,
      detail: `${file}: readable, ${facts.architecture ?? "unknown architecture"}, context ${context} tokens per sequence${trained}`,
      facts: { source, path: file, readable: true, architecture: facts.architecture, training_context_length: facts.trainingContext, context_length: context },
    };
  } catch (error) {
    return { check: "model", name: id, ok: false, detail: `${file}: not a readable GGUF file: ${messageOf(error)}`, facts: { source, path: file, readable: true } };
  }
}

/** Checks an embedded model entry: its file, or its remote source when not downloaded yet. */
export async function checkEmbeddedModel(
  entry: { id: string; path?: string; hf?: string },
  settings: { data_dir: string; context_size: number },
  hub: HuggingFaceHub,
  timeoutMs: number,
): Promise<CheckResult> {
  if (entry.path !== undefined) return checkFile(entry.id, entry.path, settings.context_size, entry.path);
  const remote = entry.hf!;
  const shown = remote.startsWith("hf:") ? remote : redactUrl(remote);
  const downloaded = downloadedModelPath(settings.data_dir, remote);
  if (fs.existsSync(downloaded)) return checkFile(entry.id, downloaded, settings.context_size, shown);
  const url = probeUrl(remote, hub);
  const facts = { source: shown, path: downloaded, downloaded: false };
  try {
    const response = await fetch(url, { method: "HEAD", headers: probeHeaders(remote, hub), redirect: "manual", signal: AbortSignal.timeout(timeoutMs) });
    if (response.status === 401 || response.status === 403) {
      return { check: "model", name: entry.id, ok: false, detail: `${shown}: not downloaded yet, and the hub refused access (${response.status}): a gated model needs ${serveOptions.hf_token.flag.split(" ")[0]} (${serveOptions.hf_token.env})`, facts };
    }
    if (response.status >= 400) return { check: "model", name: entry.id, ok: false, detail: `${shown}: not downloaded yet, and ${new URL(url).host} answered ${response.status}: check the reference`, facts };
    return { check: "model", name: entry.id, ok: true, detail: `${shown}: not downloaded yet (serve downloads it into ${downloaded}; ${new URL(url).host} answers)`, facts };
  } catch (error) {
    return { check: "model", name: entry.id, ok: false, detail: `${shown}: not downloaded yet, and ${new URL(url).host} cannot be reached: ${messageOf(error)}`, facts };
  }
}
