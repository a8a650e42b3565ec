import { getLlama, QwenChatWrapper, Llama3_1ChatWrapper, FunctionaryChatWrapper, MistralChatWrapper, Llama3_2LightweightChatWrapper, GeneralChatWrapper, ChatMLChatWrapper, Gemma4ChatWrapper, HarmonyChatWrapper, SeedChatWrapper, DeepSeekChatWrapper } from "node-llama-cpp";
import { callSyntaxOf, GrammarFactory, replyGrammarText } from "../src/engines/llamacpp/grammar.ts";
const llama = await getLlama({ gpu: false, maxThreads: 1, build: "never" });
const f = new GrammarFactory(llama);
const tools = [{ name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } }, { name: "noop" }];
for (const W of [QwenChatWrapper, Llama3_1ChatWrapper, FunctionaryChatWrapper, MistralChatWrapper, Llama3_2LightweightChatWrapper, GeneralChatWrapper, ChatMLChatWrapper, Gemma4ChatWrapper, HarmonyChatWrapper, SeedChatWrapper, DeepSeekChatWrapper]) {
  try {
    const w = new (W as any)();
    const s = callSyntaxOf(w);
    const text = await replyGrammarText(f, { tools, choice: "auto", parallel: true, syntax: s });
    await f.grammar(text);
    console.log(W.name, JSON.stringify({ ...s, paramsPrefix: s.paramsPrefix("get_weather") }));
  } catch (e) { console.log(W.name, "ERR", (e as Error).message); }
}
