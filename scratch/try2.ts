import { startTestServer } from "../test/helpers/server.ts";
const t = await startTestServer({ flags: { parallel: "1" } });
const c = t.client;
const prompts = ["Reply with a JSON object.", "Give me a JSON object with a name.", "What is your name?", "Hi", "Once upon a time"];
for (const p of prompts) for (const sys of [undefined, "You answer in JSON."]) {
  const messages: any[] = sys ? [{ role: "system", content: sys }, { role: "user", content: p }] : [{ role: "user", content: p }];
  const r: any = await c.chat.completions.create({ model: "stories260K", messages, temperature: 0, max_tokens: 200, response_format: { type: "json_object" } });
  console.log(JSON.stringify(p), !!sys, r.choices[0].finish_reason, JSON.stringify(r.choices[0].message.content).slice(0, 150));
}
await t.close();
