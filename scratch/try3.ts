import { startTestServer } from "../test/helpers/server.ts";
const t = await startTestServer({ flags: { parallel: "1" } });
const c = t.client;
for (const temperature of [0.7, 1]) for (let seed = 1; seed <= 12; seed++) {
  const r: any = await c.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "Reply with a JSON object." }], temperature, seed, max_tokens: 300, response_format: { type: "json_object" } });
  const m = r.choices[0];
  console.log(temperature, seed, m.finish_reason, r.usage.completion_tokens, JSON.stringify(m.message.content).slice(0, 100));
}
await t.close();
