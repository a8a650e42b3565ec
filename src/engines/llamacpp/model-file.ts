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

/**
 * Returns the path of a loadable GGUF file, downloading it first when needed.
 * Throws `ModelFileError` with a message fit for an operator.
 */
export async function resolveModelFile(
  source: ModelFileSource,
  dataDir: string,
  options: { onProgress?: (progress: DownloadProgress) => void; signal?: AbortSignal } = {},
): Promise<string> {
  if ("path" in source) {
    const resolved = path.resolve(source.path);
    if (!fs.existsSync(resolved)) throw new ModelFileError(`model file not found: ${resolved}`);
    return resolved;
  }
  const target = downloadedModelPath(dataDir, source.remote);
  if (fs.existsSync(target)) return target;
  fs.mkdirSync(path.dirname(target), { recursive: true });
  try {
    const downloader = await createModelDownloader({
      modelUri: source.remote,
      dirPath: path.dirname(target),
      fileName: path.basename(target),
      showCliProgress: false,
      deleteTempFileOnCancel: false,
      onProgress: (status) => options.onProgress?.({ downloadedBytes: status.downloadedSize, totalBytes: status.totalSize }),
    });
    const downloaded = await downloader.download({ signal: options.signal });
    return downloaded;
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new ModelFileError(`download of ${source.remote} failed (${reason})`, { cause: error });
  }
}
