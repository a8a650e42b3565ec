/**
 * The seam between a wire dialect (chat completions, responses, …) and the one generation core:
 * a dialect validates its body and maps it to the internal `GenerationRequest` (`parse`), and
 * turns the generation's parts into its own reply (`complete`) or stream events (`stream`,
 * `endStream`). Admission, the run and the settlement (`admit.ts`, `run.ts`) are shared: limits,
 * holds, leases, checkpoints and metrics see only the generation request and its usage.
 */
import type { CatalogModel } from "../../catalog/catalog.ts";
import type { PreparedGeneration } from "../../engines/engine.ts";
import type { PromptBound } from "../../engines/prompt-bound.ts";
import type { GenerationOutcome, GenerationOutput, GenerationRequest, ImageUrlPart } from "../../protocol/generation.ts";
import type { Catalog } from "../../catalog/catalog.ts";
import type { RequestedServiceTier } from "../../protocol/service-tiers.ts";
import type { ChunkSink } from "./sink.ts";

/** A request validated and mapped to the core: cheap work, bounded by the request caps; nothing rendered or tokenized yet. */
export type ParsedGeneration<Shape> = {
  model: CatalogModel;
  stream: boolean;
  request: GenerationRequest;
  /** The request's image URLs (data URLs too), each with its place: admission checks them against the image URL policy before anything goes upstream. */
  imageUrls: ImageUrlPart[];
  /** What the dialect needs to answer besides the generated content (ids, echoed fields, the served tier). */
  shape: Shape;
  /** The service tier asked for (admission resolves it against the plan: `admit.ts`); absent: `auto`. */
  serviceTier?: RequestedServiceTier;
  /**
   * Prepares the request on its engine, in place of `model.engine.prepare(request, bound)`
   * (`bound`: the cheap bound of `request`): where a dialect fits the prompt to the context
   * (the Responses API's `truncation: "auto"`) or names fields in its own spelling in the
   * engine's refusals. Called once, at admission's expensive step.
   */
  prepare?: (bound: PromptBound) => Promise<PreparedGeneration>;
};

/** An admitted request: its model, its shape, and the engine's prepared generation (tokenized, bounded). */
export type GenerationJob<Shape> = {
  model: CatalogModel;
  stream: boolean;
  shape: Shape;
  prepared: PreparedGeneration;
};

/** How a stream ended, for its dialect's last words. */
export type StreamEnding =
  /** Every part was sent: the dialect's terminator (`[DONE]`, `response.completed`). */
  | { kind: "done"; outcome: GenerationOutcome | undefined }
  /** A failure or a shutdown after the stream began: the dialect's error event; never mixed with a normal end. */
  | { kind: "failed"; error: unknown; outcome: GenerationOutcome | undefined };

export type WireDialect<Shape, Reply, Event> = {
  /** For the request's log line (`chat completion`, `response`). */
  readonly logName: string;
  /** Validates the body, finds the model and maps the request (cheap; throws typed API errors). */
  parse(catalog: Catalog, body: unknown): ParsedGeneration<Shape>;
  /** Runs a non-streamed request's parts to their end: the reply and how it ended. */
  complete(shape: Shape, generation: GenerationOutput): Promise<{ reply: Reply; outcome: GenerationOutcome }>;
  /**
   * The stream's events, from the generation's parts; fills `outcome` once every choice finished.
   * A batch (an array) is the events of one part, or of one batch of parts (`partBatches`), written to the client together.
   */
  stream(shape: Shape, generation: GenerationOutput, outcome: { value?: GenerationOutcome }): AsyncIterable<Event | readonly Event[]>;
  /**
   * Called once the request is settled (billed), however it ended, before the client hears the
   * end (`endStream`, or the reply returned): where a dialect keeps what it answered (a stored
   * response). `failure` is the error a failed generation threw. Its own errors are logged; the
   * request's answer stands.
   */
  settled?(shape: Shape, end: { outcome: GenerationOutcome | undefined; failure: unknown; status: number }): Promise<void>;
  /** The SSE event name of a stream event (`event: response.created`); undefined: a plain `data:` event, as chat completions stream. */
  eventName?(event: Event): string | undefined;
  /**
   * The stream's keep-alive once its first event went out: this event (Anthropic's `ping`)
   * instead of a comment line. Before the first event, and for a dialect without one, a comment.
   */
  keepAliveEvent?: { name: string; payload: Event };
  /** Writes the stream's last words and ends it; called once the request is settled. */
  endStream(shape: Shape, sink: ChunkSink, ending: StreamEnding): void | Promise<void>;
};
