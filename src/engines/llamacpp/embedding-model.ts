/**
 * Whether a GGUF is an embedding model, read from its metadata when it is loaded: what makes
 * llama.cpp pool a sequence into one vector is `<arch>.pooling_type` (mean 1, cls 2, last 3; rank 4
 * is a reranker's score), and the encoder architectures (BERT and its kin, T5's encoder, Llama's and
 * Gemma's embedding variants) or a model whose attention is not causal are embedding models whatever
 * they pool. llama-server serves whatever `--embeddings` tells it to; Turnpike decides from the file.
 */

/** llama.cpp's `llama_pooling_type` as the GGUF stores it (`-1` unspecified is never written). */
export const POOLING = { none: 0, mean: 1, cls: 2, last: 3, rank: 4 } as const;

/**
 * The architectures llama.cpp builds as encoders (`llama-arch.cpp`): they make no next-token
 * prediction worth serving, only embeddings.
 */
export const EMBEDDING_ARCHITECTURES: ReadonlySet<string> = new Set([
  "bert",
  "modern-bert",
  "nomic-bert",
  "nomic-bert-moe",
  "neo-bert",
  "jina-bert-v2",
  "jina-bert-v3",
  "eurobert",
  "gemma-embedding",
  "t5encoder",
  "llama-embed",
]);

export type EmbeddingKind =
  /** A generative model (chat, completions); it may still embed when its entry says so (last token's state). */
  | { kind: "generative"; dimensions: number }
  /** Served as an embedding model only: no generation context is made for it. */
  | { kind: "embedding"; pooling: number; dimensions: number }
  /** A reranker (`pooling_type` rank): its output is a relevance score, not a vector; not served. */
  | { kind: "reranker" };

/** The parts of node-llama-cpp's parsed GGUF metadata this reads. */
type Metadata = { general?: { architecture?: unknown } } & Record<string, unknown>;

function numberAt(section: unknown, ...keys: string[]): number | undefined {
  let value: unknown = section;
  for (const key of keys) {
    if (typeof value !== "object" || value === null) return undefined;
    value = (value as Record<string, unknown>)[key];
  }
  return typeof value === "number" ? value : typeof value === "bigint" ? Number(value) : undefined;
}

/**
 * What the model is, from its metadata: `embedding` when it pools (mean, cls, last), is an encoder
 * architecture or has non-causal attention; `reranker` for rank pooling; else `generative`.
 * `dimensions` is the pooled vector's length (`<arch>.embedding_length_out`, else `embedding_length`).
 */
export function embeddingKind(metadata: Metadata, fallbackDimensions: number): EmbeddingKind {
  const architecture = typeof metadata.general?.architecture === "string" ? metadata.general.architecture : "";
  const section = metadata[architecture];
  const pooling = numberAt(section, "pooling_type");
  const dimensions = numberAt(section, "embedding_length_out") ?? numberAt(section, "embedding_length") ?? fallbackDimensions;
  if (pooling === POOLING.rank) return { kind: "reranker" };
  const pools = pooling === POOLING.mean || pooling === POOLING.cls || pooling === POOLING.last;
  const encoder = EMBEDDING_ARCHITECTURES.has(architecture) || (section as { attention?: { causal?: unknown } } | undefined)?.attention?.causal === false;
  if (pools || encoder) return { kind: "embedding", pooling: pooling ?? POOLING.none, dimensions };
  return { kind: "generative", dimensions };
}
