/**
 * Finds a model's GGUF file: a local path as it is, or a remote one (`hf:owner/repo/file.gguf`,
 * an https URL) downloaded once into `<data-dir>/models` with node-llama-cpp's downloader.
 * A file already downloaded is used without touching the network.
 */
import fs from "node:fs";
import path from "node:path";
import { createModelDownloader } from "node-llama-cpp";

export type DownloadProgress = { downloadedBytes: number; totalBytes: number };

export type ModelFileSource = { path: string } | { remote: string };

/** The file name a remote source is saved under. */
export function remoteFileName(remote: string): string {
  const withoutBranch = remote.replace(/#.*$/, "");
  const last = withoutBranch.split("/").pop() ?? withoutBranch;
  const name = last.replace(/[?].*$/, "");
  return name.toLowerCase().endsWith(".gguf") ? name : `${name.replace(/[^A-Za-z0-9._-]/g, "_")}.gguf`;
}

/** Where a remote source lands in the data dir. */
export function downloadedModelPath(dataDir: string, remote: string): string {
  return path.join(dataDir, "models", remoteFileName(remote));
}

export class ModelFileError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ModelFileError";
  }
}

/** Where `hf:` sources come from, and the token sent with them (gated models). */
export type HuggingFaceHub = {
  /** `https://huggingface.co`, or a mirror (`--hf-endpoint`, HF_ENDPOINT); no trailing slash. */
  endpoint: string;
  /** `--hf-token` (HF_TOKEN); sent to the hub only, never logged. */
  token?: string;
};

/** The public hub, without a token. */
export const HUGGING_FACE: HuggingFaceHub = { endpoint: "https://huggingface.co" };

/** The address to probe before a download: the file itself, or the Hugging Face host. */
export function probeUrl(remote: string, hub: HuggingFaceHub = HUGGING_FACE): string {
  if (!remote.startsWith("hf:")) return remote;
  const endpoint = hub.endpoint.replace(/\/+$/, "");
  const match = /^hf:([^/]+)\/([^/:#]+)\/([^#]+?)(?:#(.+))?$/.exec(remote);
  if (match === null) return `${endpoint}/`;
  const [, owner, repo, file, branch] = match;
  return `${endpoint}/${owner}/${repo}/resolve/${branch ?? "main"}/${file}`;
}

/**
 * Headers for the probe: the hub's token for `hf:` sources, as node-llama-cpp's downloader sends
 * it, so gated models are probed with the same rights.
 */
export function probeHeaders(remote: string, hub: HuggingFaceHub = HUGGING_FACE): Record<string, string> {
  const token = hub.token?.trim();
  return remote.startsWith("hf:") && token ? { authorization: `Bearer ${token}` } : {};
}

/** How long the reachability probe waits before calling the network unreachable. */
const PROBE_TIMEOUT_MS = 15_000;
/** A download that makes no progress for this long is given up. */
const STALL_TIMEOUT_MS = 120_000;

/**
 * Fails fast when the remote cannot be reached: node-llama-cpp's downloader retries for a
 * long time on its own, which would leave an offline server "downloading" for minutes.
 */
async function probeRemote(remote: string, hub: HuggingFaceHub, signal?: AbortSignal): Promise<void> {
  const url = probeUrl(remote, hub);
  const host = new URL(url).host;
  try {
    const response = await fetch(url, {
      method: "HEAD",
      headers: probeHeaders(remote, hub),
      redirect: "manual",
      signal: AbortSignal.any([AbortSignal.timeout(PROBE_TIMEOUT_MS), ...(signal ? [signal] : [])]),
    });
    if (response.status === 404) throw new ModelFileError(`${remote} does not exist (${host} answered 404)`);
    if (response.status === 401 || response.status === 403) {
      const advice = remote.startsWith("hf:") ? (hub.token ? "; the Hugging Face token (HF_TOKEN) may not read it" : "; set HF_TOKEN (or --hf-token) to a Hugging Face token that may read it") : "";
      throw new ModelFileError(`${remote} needs access rights (${host} answered ${response.status})${advice}`);
    }
  } catch (error) {
    if (error instanceof ModelFileError) throw error;
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    const reason = cause?.code ?? cause?.message ?? (error instanceof Error ? error.message : String(error));
    throw new ModelFileError(`cannot reach ${host} to download ${remote} (${reason}); is this machine offline?`, { cause: error });
  }
}

/**
 * Returns the path of a loadable GGUF file, downloading it first when needed.
 * Throws `ModelFileError` with a message fit for an operator.
 */
export async function resolveModelFile(
  source: ModelFileSource,
  dataDir: string,
  options: { onProgress?: (progress: DownloadProgress) => void; signal?: AbortSignal; hub?: HuggingFaceHub } = {},
): Promise<string> {
  if ("path" in source) {
    const resolved = path.resolve(source.path);
    if (!fs.existsSync(resolved)) throw new ModelFileError(`model file not found: ${resolved}`);
    return resolved;
  }
  const target = downloadedModelPath(dataDir, source.remote);
  if (fs.existsSync(target)) return target;
  fs.mkdirSync(path.dirname(target), { recursive: true });
  const hub = options.hub ?? HUGGING_FACE;
  await probeRemote(source.remote, hub, options.signal);
  const stalled = new AbortController();
  let watchdog = setTimeout(() => stalled.abort(), STALL_TIMEOUT_MS);
  try {
    const downloader = await createModelDownloader({
      modelUri: source.remote,
      dirPath: path.dirname(target),
      fileName: path.basename(target),
      showCliProgress: false,
      endpoints: { huggingFace: hub.endpoint },
      ...(hub.token ? { tokens: { huggingFace: hub.token } } : {}),
      deleteTempFileOnCancel: false,
      onProgress: (status) => {
        clearTimeout(watchdog);
        watchdog = setTimeout(() => stalled.abort(), STALL_TIMEOUT_MS);
        options.onProgress?.({ downloadedBytes: status.downloadedSize, totalBytes: status.totalSize });
      },
    });
    const signal = AbortSignal.any([stalled.signal, ...(options.signal ? [options.signal] : [])]);
    const downloaded = await downloader.download({ signal });
    // node-llama-cpp's downloader resolves, rather than rejects, when its signal aborts.
    if (signal.aborted) throw signal.reason;
    if (!fs.existsSync(downloaded)) throw new Error(`the downloader reported ${downloaded}, which is not there`);
    return downloaded;
  } catch (error) {
    const reason = stalled.signal.aborted ? `no progress for ${STALL_TIMEOUT_MS / 1000} s` : error instanceof Error ? error.message : String(error);
    throw new ModelFileError(`download of ${source.remote} failed (${reason})`, { cause: error });
  } finally {
    clearTimeout(watchdog);
  }
}
