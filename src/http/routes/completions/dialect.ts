/**
 * Text completions (`/v1/completions`, OpenAI's legacy API) as a dialect of the generation core:
 * validate and map the body (`protocol/completions/to-generation.ts`), answer with a
 * `text_completion` or its chunks (`from-generation.ts`), end a stream with `data: [DONE]` or an
 * error event. Refuses at parse what the model cannot serve: a model that serves no completions
 * (an embedding model), a `suffix` on a model without fill-in-the-middle tokens.
 */
import { validatedInWorker } from "../../json-body/json-body-parser.ts";
import { pooledRandomBytes } from "../../../store/random.ts";
import { requireService, type Catalog } from "../../../catalog/catalog.ts";
import { checkSupported } from "../../../engines/parameters.ts";
import { UnsupportedParameterError } from "../../../protocol/errors.ts";
import { completionRequestSchema, type CompletionRequest } from "../../../protocol/completions/request.ts";
import type { Completion, CompletionChunk } from "../../../protocol/completions/response.ts";
import { completeTextCompletion, streamTextCompletion, type CompletionReplyShape } from "../../../protocol/completions/from-generation.ts";
import { rejectUnsupportedCompletion, toCompletionGeneration } from "../../../protocol/completions/to-generation.ts";
import { parseWithSchema } from "../../../protocol/parse.ts";
import { errorBody } from "../../errors.ts";
import type { ParsedGeneration, WireDialect } from "../../generation/dialect.ts";

export type { CompletionReplyShape } from "../../../protocol/completions/from-generation.ts";

/**
 * Validates the body, finds the model and maps the request to the generation core. Cheap (linear
 * in the body, which the request caps bound): nothing is tokenized here. Throws typed API errors.
 */
export function parseCompletion(catalog: Catalog, body: unknown): ParsedGeneration<CompletionReplyShape> {
  // A large body was validated already, off the event loop, by the body worker.
  const request = validatedInWorker(body) ? (body as CompletionRequest) : parseWithSchema(completionRequestSchema, body);
  const model = catalog.get(request.model);
  requireService(model, "completions");
  rejectUnsupportedCompletion(request);
  const capabilities = model.engine.capabilities();
  if (request.suffix != null && capabilities.fillInTheMiddle !== true) {
    throw new UnsupportedParameterError(
      `Model '${model.id}' cannot fill in the middle: 'suffix' needs a model with fill-in-the-middle tokens (<|fim_prefix|>, <|fim_suffix|>, <|fim_middle|> or its own spelling). Leave 'suffix' out for a plain completion.`,
      "suffix",
    );
  }
  if (request.echo === true && request.suffix != null) {
    throw new UnsupportedParameterError("'echo' cannot be used with 'suffix': a fill-in-the-middle answer is the middle alone.", "echo");
  }
  const generation = toCompletionGeneration(request);
  checkSupported(model.id, capabilities, generation, (parameter) => (parameter === "top_logprobs" ? "logprobs" : parameter));
  if (request.stream !== true) generation.buffered = true;
  return {
    model,
    stream: request.stream === true,
    request: generation,
    imageUrls: [],
    ...(request.service_tier == null ? {} : { serviceTier: request.service_tier }),
    shape: {
      id: `cmpl-${pooledRandomBytes(18).toString("base64url")}`,
      created: Math.floor(Date.now() / 1000),
      model: model.id,
      choices: generation.choices,
      includeUsage: request.stream_options?.include_usage === true,
      logprobs: request.logprobs != null,
    },
  };
}

export const completionsDialect: WireDialect<CompletionReplyShape, Completion, CompletionChunk> = {
  logName: "text completion",
  parse: parseCompletion,
  async complete(shape, generation) {
    const { completion, outcome } = await completeTextCompletion(shape, generation);
    return { reply: completion, outcome };
  },
  stream: streamTextCompletion,
  endStream(_shape, sink, ending) {
    if (ending.kind === "done") return sink.done();
    sink.data(errorBody(ending.error));
    sink.end();
  },
};
