/**
 * Aborting many controllers from one long-lived signal (an engine's closing, the server's
 * shutdown) without a listener each: one listener per signal aborts the controllers that joined
 * and have not left. `AbortSignal.any` does the same with weak references, a composite signal and
 * a strong hold on every listener added to it, which on the path of every request cost more than
 * the rest of setting a generation up (the gateway bench's profile).
 */

const groups = new WeakMap<AbortSignal, Set<AbortController>>();

/**
 * Aborts `controller` with `source`'s reason when `source` aborts (at once if it has). Returns
 * how to leave: call it once the controller's work is over, or the group keeps it until then.
 */
export function abortWith(source: AbortSignal, controller: AbortController): () => void {
  if (source.aborted) {
    controller.abort(source.reason);
    return () => {};
  }
  let group = groups.get(source);
  if (group === undefined) {
    const members = new Set<AbortController>();
    groups.set(source, members);
    source.addEventListener(
      "abort",
      () => {
        for (const member of members) member.abort(source.reason);
        members.clear();
      },
      { once: true },
    );
    group = members;
  }
  const joined = group;
  joined.add(controller);
  return () => {
    joined.delete(controller);
  };
}
