import { z } from "zod";
import { zodResponseFormat, zodFunction } from "openai/helpers/zod";
const Item = z.object({ label: z.string(), qty: z.number().int() });
const S = z.object({ name: z.string(), age: z.number().int().nullable(), kind: z.enum(["a","b"]), opt: z.string().optional(), items: z.array(Item), lit: z.literal("x"), u: z.union([z.string(), z.number()]),
  d: z.discriminatedUnion("t", [z.object({t: z.literal("p"), v: z.string()}), z.object({t: z.literal("q"), w: z.number()})]) });
console.log(JSON.stringify(z.toJSONSchema(S)));
console.log(JSON.stringify(zodResponseFormat(S, "s")));
console.log(JSON.stringify(zodFunction({name:"weather", parameters: z.object({city: z.string()})})));
