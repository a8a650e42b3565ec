/**
 * A payload already written as JSON: a stream's chunk framed from its reply's constant fields
 * (`chat-completions/from-generation.ts`), where stringifying a whole object a chunk cost more
 * than the chunk's content. The SSE writer sends `json` as it is; `JSON.stringify` of it gives the
 * same text (`toJSON`), so any other writer or reader sees the same payload.
 */
export class JsonText {
  readonly json: string;
  constructor(json: string) {
    this.json = json;
  }
  toJSON(): unknown {
    return JSON.parse(this.json);
  }
}
