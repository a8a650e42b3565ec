import { startTestServer } from "../test/helpers/server.ts";
const t = await startTestServer({ flags: { parallel: "1" } });
const c = t.client;
const weather = { type: "function" as const, function: { name: "get_weather", description: "Weather in a city", parameters: { type: "object", properties: { city: { type: "string", maxLength: 20 }, days: { type: "integer" } }, required: ["city", "days"], additionalProperties: false } } };
const msgs = [{ role: "user" as const, content: "Tell me a story about the weather" }];
const show = (label: string, x: unknown) => console.log(label, JSON.stringify(x));
try {
  let r: any = await c.chat.completions.create({ model: "stories260K", messages: msgs, temperature: 0, max_tokens: 100, response_format: { type: "json_object" } });
  show("json_object", r.choices[0]);
  r = await c.chat.completions.create({ model: "stories260K", messages: msgs, temperature: 0, max_tokens: 100, response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", properties: { name: { type: "string" }, age: { type: ["integer", "null"] } }, required: ["name","age"] } } } });
  show("json_schema", r.choices[0]);
  r = await c.chat.completions.create({ model: "stories260K", messages: msgs, temperature: 0, max_tokens: 100, tools: [weather], tool_choice: "required" });
  show("required", r.choices[0]);
  r = await c.chat.completions.create({ model: "stories260K", messages: msgs, temperature: 0, max_tokens: 100, tools: [weather], tool_choice: "auto" });
  show("auto", r.choices[0]);
  r = await c.chat.completions.create({ model: "stories260K", messages: msgs, temperature: 0, max_tokens: 200, tools: [weather, {type:"function", function:{name:"noop"}}], tool_choice: "required", parallel_tool_calls: true });
  show("required-parallel", r.choices[0]);
  const s = await c.chat.completions.create({ model: "stories260K", messages: msgs, temperature: 0, max_tokens: 100, tools: [weather], tool_choice: { type: "function", function: { name: "get_weather" } }, stream: true });
  for await (const ch of s) show("chunk", ch.choices[0]);
  r = await c.chat.completions.create({ model: "stories260K", messages: [...msgs, { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris","days":1}' } }] }, { role: "tool", tool_call_id: "call_1", content: '{"temp": 20}' }], temperature: 0, max_tokens: 40, tools: [weather] });
  show("continued", r.choices[0]);
} catch (e) { console.log("ERR", e); }
await t.close();
