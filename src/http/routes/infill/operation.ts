/**
 * `POST /infill` and `POST /v1/infill` as `/openapi.json` describes them, beside their route
 * (which registers itself, as chat's does: the generation core's hooks run on the headers before
 * the body is read).
 */
import type { ApiOperation } from "../../../protocol/openapi.ts";
import { GENERATION_ERROR_CODES } from "../../generation/operation-errors.ts";
import { infillRequestSchema } from "../../../protocol/infill/request.ts";
import { infillEventSchema, infillPartialSchema, infillResultSchema, infillTimingsSchema } from "../../../protocol/infill/response.ts";

const infillOperation = (path: string): ApiOperation => ({
  method: "post",
  path,
  tag: "Completions",
  summary:
    "Fill in the middle in llama-server's native dialect (`/infill`), for editor plugins such as llama.vim and llama.vscode: `input_prefix`, `input_suffix`, `input_extra` files, the middle's start in `prompt`. `model` is optional when one model on offer fills in the middle. Answers llama-server's JSON result, or with `stream` its events (no `[DONE]`); errors in Turnpike's (OpenAI's) error shape.",
  auth: "key",
  body: infillRequestSchema,
  example: {
    input_prefix: "def fibonacci(n):\n    ",
    input_suffix: "\n    return a\n",
    input_extra: [{ filename: "util.py", text: "def square(x):\n    return x * x\n" }],
    prompt: "",
    n_predict: 64,
    top_k: 40,
    top_p: 0.99,
    samplers: ["top_k", "top_p", "infill"],
    cache_prompt: true,
    t_max_prompt_ms: 500,
    t_max_predict_ms: 1000,
    n_indent: 4,
  },
  success: { status: 200, description: "llama-server's infill result, or with `stream` a `text/event-stream` of its partial results and then the final one (`stop: true`), with no `[DONE]`." },
  response: infillResultSchema,
  streamEvent: infillEventSchema,
  // The generation core's codes, with a model that serves no completions.
  errors: [...GENERATION_ERROR_CODES, "invalid_request_error"],
  schemas: {
    InfillRequest: infillRequestSchema,
    InfillResult: infillResultSchema,
    InfillPartial: infillPartialSchema,
    InfillEvent: infillEventSchema,
    InfillTimings: infillTimingsSchema,
  },
});

export const INFILL_OPERATIONS: readonly ApiOperation[] = [infillOperation("/infill"), infillOperation("/v1/infill")];
