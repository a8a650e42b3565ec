/** Reading a named-event SSE body (the Responses API's stream) as its events. */

export type SseEvent = { name: string | undefined; data: string };

/** Splits an SSE body into its events: each one's `event:` name and its `data:` text (lines joined). */
export function parseSse(text: string): SseEvent[] {
  const events: SseEvent[] = [];
  for (const block of text.split("\n\n")) {
    let name: string | undefined;
    const data: string[] = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event: ")) name = line.slice(7);
      else if (line.startsWith("data: ")) data.push(line.slice(6));
    }
    if (data.length > 0) events.push({ name, data: data.join("\n") });
  }
  return events;
}
