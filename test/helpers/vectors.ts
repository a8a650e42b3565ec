/** Vector comparisons for the embeddings tests and benchmark. */

/** The cosine of the angle between two vectors of the same length (1: same direction). */
export function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let dot = 0;
  let aa = 0;
  let bb = 0;
  for (let index = 0; index < a.length; index++) {
    dot += a[index]! * b[index]!;
    aa += a[index]! * a[index]!;
    bb += b[index]! * b[index]!;
  }
  return dot / Math.sqrt(aa * bb);
}
