import type { StreamPart } from "../engine.ts";

/** A stream part before it is given its choice's index: what a reply's reader makes of the text. */
export type ReplyPart = StreamPart extends infer Part ? (Part extends { type: "finish" } ? never : Part extends unknown ? Omit<Part, "choice"> : never) : never;
