/**
 * The engine contract: what every `Engine` must do, as the serving layer relies on it, registered
 * as node:test cases against one engine. It runs against the fake (`fake.test.ts`), the embedded
 * llama.cpp engine on stories260K (`llamacpp.test.ts`) and the upstream engine in front of the
 * fault-injecting upstream (`upstream.test.ts`), so the fake the serving layer's tests use cannot
 * drift from the engines it stands in for. Where the fake differs, the fake is fixed, not this.
 *
 * The cases: status moves (loading, ready once open, nothing taken once closed); `prepare` tells
 * the truth about prompt, limit and choices; a reply's parts end with one `finish` per choice;
 * `n` choices interleave; a cut (abort, a consumer that stops, a close) ends every choice
 * `cancelled` with usage final at what was generated; a full queue refuses at `start`,
 * synchronously; slots come back however a generation ends; a choice that a stop string ended
 * says which (or, from an engine that cannot tell, says none rather than guess).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { Engine, GenerationRequest, RunningGeneration, StreamPart, UsageSource } from "../../src/engines/engine.ts";
import { ApiError, EngineOverloadedError, ModelNotReadyError } from "../../src/protocol/errors.ts";

/** An engine made for one case, not yet open, and how to free what it stands on. */
export type EngineUnderTest = { engine: Engine; close(): Promise<void> };

/**
 * What an engine declares about itself: its configuration (how many requests it runs and queues),
 * and the few differences between engines that are legitimate, each for a reason given here.
 */
export type EngineTraits = {
  /** Requests it runs at once (slots, or the upstream's `max_in_flight`), and how many more may wait. */
  capacity: { running: number; waiting: number };
  /**
   * Where a whole reply's usage comes from: `counted` by an engine that tokenizes itself,
   * `upstream` for one that settles from what its upstream reports.
   */
  usageSource: UsageSource;
  /**
   * Where a cut reply's usage comes from: an upstream cut before its usage chunk can only
   * `estimate` (a token per content chunk); an engine that counts keeps `counted`.
   */
  cutUsageSource: UsageSource;
  /**
   * `exact` for an engine with the model's tokenizer; `upper-bound` for an upstream, which is
   * never asked to tokenize a request that has a `maxTokens` (the bound is what billing reserves).
   */
  promptCount: "exact" | "upper-bound";
  /**
   * Merged into the request of the cases that need a reply long enough to interleave and to be
   * cut mid-way (e.g. a banned end-of-text token for a real model that could stop after a word).
   */
  longRequest?: Partial<GenerationRequest>;
  /**
   * `stop`: a string the greedy reply to the contract's request (with `longRequest`) surely
   * writes within 40 tokens. `reported`: whether the engine can tell which stop string ended a
   * choice; one that cannot (an upstream whose kind does not say) must name none, never guess.
   * `choices`: how many choices the case asks for (default 2; 1 for a kind that takes one only).
   */
  stopSequence: { stop: string; reported: boolean; choices?: number };
};

/** A stop string no reply writes. */
const NEVER_WRITTEN = "\u0007never\u0007";

/** A plain chat request: greedy, 8 tokens, one choice; `overrides` on top. */
export function contractRequest(overrides: Partial<GenerationRequest> = {}): GenerationRequest {
  return {
    messages: [
      { role: "system", content: "You tell short stories." },
      { role: "user", content: "Tell me a story about a cat." },
    ],
    sampling: { temperature: 0, topP: 1, frequencyPenalty: 0, presencePenalty: 0, stop: [] },
    maxTokens: 8,
    choices: 1,
    ...overrides,
  };
}

/** Parts that carry generated tokens (each stands for one token or more). */
function carriesTokens(part: StreamPart): boolean {
  return (part.type === "text-delta" && part.text !== "") || part.type === "reasoning-delta" || part.type === "tool-call-delta";
}

/** Reads every part; `onPart` may act mid-way (abort, close). */
async function collect(generation: RunningGeneration, onPart?: (part: StreamPart, index: number) => void | Promise<void>): Promise<StreamPart[]> {
  const parts: StreamPart[] = [];
  for await (const part of generation.parts) {
    parts.push(part);
    await onPart?.(part, parts.length - 1);
  }
  return parts;
}

/** Lets timers and pending I/O run: anything that would still change usage has its chance. */
function settle(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 50));
}

/**
 * The parts of each choice end with exactly one `finish`, nothing of that choice after it, and
 * the finishes' completion tokens add up to the request's usage. Returns the finishes by choice.
 */
function assertFinishes(parts: StreamPart[], choices: number, generation: RunningGeneration): Array<Extract<StreamPart, { type: "finish" }>> {
  const finishes: Array<Extract<StreamPart, { type: "finish" }>> = [];
  for (let choice = 0; choice < choices; choice++) {
    const own = parts.filter((part) => part.choice === choice);
    const ends = own.filter((part) => part.type === "finish");
    assert.equal(ends.length, 1, `choice ${choice} ends with exactly one finish: ${JSON.stringify(own)}`);
    assert.equal(own.at(-1)?.type, "finish", `nothing of choice ${choice} follows its finish`);
    finishes.push(ends[0] as Extract<StreamPart, { type: "finish" }>);
  }
  assert.ok(parts.every((part) => part.choice >= 0 && part.choice < choices), "every part names one of the request's choices");
  const usage = generation.usage();
  assert.equal(
    finishes.reduce((sum, finish) => sum + finish.usage.completionTokens, 0),
    usage.completionTokens,
    "the finishes' completion tokens add up to the request's usage",
  );
  assert.ok(usage.completionTokens >= parts.filter(carriesTokens).length, `every delta stands for a token at least (${usage.completionTokens} tokens)`);
  return finishes;
}

/** Usage read now and after a pause: the same (final). */
async function assertFinal(generation: RunningGeneration): Promise<void> {
  const now = generation.usage();
  await settle();
  assert.deepEqual(generation.usage(), now, "usage is final once the parts ended");
}

/** Every slot back and nobody waiting (in sum over the engine's members). */
function assertIdle(engine: Engine): void {
  const members = engine.members();
  assert.equal(members.reduce((sum, member) => sum + member.busy, 0), 0, `no slot is held: ${JSON.stringify(members)}`);
  assert.equal(members.reduce((sum, member) => sum + member.waiting, 0), 0, "nobody waits");
}

/** Waits until the engine's slots are all back (a slot goes back when its generation's last work ends). */
async function untilIdle(engine: Engine): Promise<void> {
  const deadline = Date.now() + 5000;
  while (engine.members().some((member) => member.busy > 0 || member.waiting > 0) && Date.now() < deadline) await settle();
  assertIdle(engine);
}

/** Runs `body` on a fresh engine, opened unless `open` is false; always frees it. */
type WithEngine = (body: (engine: Engine) => Promise<void>, open?: boolean) => Promise<void>;

/** `WithEngine` over the engines `makeEngine` makes. */
function withEngineFrom(makeEngine: () => Promise<EngineUnderTest>): WithEngine {
  return async (body, open = true) => {
    const made = await makeEngine();
    try {
      if (open) await made.engine.open();
      await body(made.engine);
    } finally {
      await made.engine.close();
      await made.close();
    }
  };
}

/**
 * Two choices (or `choices`) asked to stop at the engine's stop string (and at one never written) all end
 * `stop` before it, naming it when the engine can tell (only then); asked only for the one never
 * written, the same reply goes on past that place and no finish names a stop string.
 */
async function reportsStopSequence(withEngine: WithEngine, traits: Pick<EngineTraits, "longRequest" | "stopSequence">): Promise<void> {
  await withEngine(async (engine) => {
    const { stop, reported, choices = 2 } = traits.stopSequence;
    const long = (overrides: Partial<GenerationRequest> = {}) => contractRequest({ ...traits.longRequest, ...overrides });
    const sampling = long().sampling;
    /** Each choice's text and finish, for `stops`. */
    const reply = async (stops: string[]) => {
      const generation = (await engine.prepare(long({ choices, maxTokens: 40, sampling: { ...sampling, stop: stops } }))).start(new AbortController().signal);
      const parts = await collect(generation);
      const finishes = assertFinishes(parts, choices, generation);
      const texts = finishes.map(({ choice }) => parts.map((part) => (part.type === "text-delta" && part.choice === choice ? part.text : "")).join(""));
      await untilIdle(engine);
      return finishes.map((finish, choice) => ({ finish, text: texts[choice]! }));
    };
    const stopped = await reply([NEVER_WRITTEN, stop]);
    for (const { finish, text } of stopped) {
      assert.equal(finish.reason, "stop", `choice ${finish.choice} ends on ${JSON.stringify(stop)}: ${JSON.stringify(text)}`);
      if (reported) assert.equal(finish.stopSequence, stop, `choice ${finish.choice} names the stop string met, as it was asked for`);
      else assert.ok(!("stopSequence" in finish), `an engine that cannot tell names none: ${JSON.stringify(finish)}`);
      assert.ok(!text.includes(stop), `nothing of the stop string is sent: ${JSON.stringify(text)}`);
    }
    // Asked for stop strings that it never writes: the same reply, longer, and no choice names one.
    for (const [choice, { finish, text }] of (await reply([NEVER_WRITTEN])).entries()) {
      assert.ok(!("stopSequence" in finish), `no stop string ended choice ${choice}: ${JSON.stringify(finish)}`);
      assert.ok(text.startsWith(stopped[choice]!.text + stop), `the reply went on where the stop string cut it: ${JSON.stringify(text)}`);
    }
  });
}

/**
 * Registers only the stop sequence case, for an engine set up otherwise than its contract's
 * (an upstream of another kind: each kind says the stop string met in its own field, or not at all).
 */
export function stopSequenceContract(name: string, makeEngine: () => Promise<EngineUnderTest>, traits: Pick<EngineTraits, "longRequest" | "stopSequence">): void {
  describe(`engine contract: ${name}`, () => {
    it("reports the stop sequence that ended a choice", () => reportsStopSequence(withEngineFrom(makeEngine), traits));
  });
}

/**
 * Registers the contract's cases for the engine `makeEngine` makes (a fresh one per case, not
 * yet open: the cases open it).
 */
export function engineContract(name: string, makeEngine: () => Promise<EngineUnderTest>, traits: EngineTraits): void {
  const long = (overrides: Partial<GenerationRequest> = {}) => contractRequest({ ...traits.longRequest, ...overrides });

  const withEngine = withEngineFrom(makeEngine);

  describe(`engine contract: ${name}`, () => {
    it("is loading until open, then ready with its context length, and refuses work once closed", async () => {
      await withEngine(async (engine) => {
        assert.equal(engine.status().state, "loading");
        assert.equal(engine.info(), undefined, "no context length before it is open");
        await assert.rejects(engine.prepare(contractRequest()), ModelNotReadyError);
        assert.throws(() => engine.boundPrompt(contractRequest()), ModelNotReadyError);
        await engine.open();
        assert.equal(engine.status().state, "ready");
        assert.ok((engine.info()?.contextLength ?? 0) > 0, "a context length once ready");
        assert.ok(engine.capabilities().supportedParameters.includes("n"));
        await engine.close();
        // Closed: a new request is refused (by prepare, or at the latest when it would start), a 503.
        const refusal = await (async () => {
          try {
            const later = await engine.prepare(contractRequest());
            const parts = await collect(later.start(new AbortController().signal));
            return new Error(`a closed engine generated: ${JSON.stringify(parts)}`);
          } catch (error) {
            return error;
          }
        })();
        assert.ok(refusal instanceof ApiError && refusal.status === 503, `closed: refused with a 503 (${String(refusal)})`);
      }, false);
    });

    it("prepares honestly: the prompt, the limit and the choices it will bill", async () => {
      await withEngine(async (engine) => {
        const contextLength = engine.info()!.contextLength;
        const prepared = await engine.prepare(contractRequest({ maxTokens: 8, choices: 1 }));
        assert.equal(prepared.promptCount, traits.promptCount);
        assert.ok(Number.isInteger(prepared.promptTokens) && prepared.promptTokens > 0, `prompt tokens: ${prepared.promptTokens}`);
        assert.equal(prepared.maxTokens, 8);
        assert.equal(prepared.choices, 1);
        const generation = prepared.start(new AbortController().signal);
        const parts = await collect(generation);
        const usage = generation.usage();
        if (traits.promptCount === "exact") assert.equal(usage.promptTokens, prepared.promptTokens, "the exact count is the one billed");
        else assert.ok(usage.promptTokens > 0 && usage.promptTokens <= prepared.promptTokens, `the prompt billed (${usage.promptTokens}) within the bound (${prepared.promptTokens})`);
        for (const finish of assertFinishes(parts, 1, generation)) assert.ok(finish.usage.completionTokens <= prepared.maxTokens);

        // Without a limit: what the context leaves, never more.
        const open = await engine.prepare(contractRequest({ maxTokens: undefined, choices: 2 }));
        assert.equal(open.choices, 2);
        assert.ok(open.maxTokens >= 1 && open.promptTokens + open.maxTokens <= contextLength, `${open.promptTokens} + ${open.maxTokens} within ${contextLength}`);
      });
    });

    it("ends a reply with one finish per choice and usage final, counted once for the prompt", async () => {
      await withEngine(async (engine) => {
        const prepared = await engine.prepare(contractRequest());
        const generation = prepared.start(new AbortController().signal);
        await generation.admitted;
        const parts = await collect(generation);
        assert.ok(parts.some(carriesTokens), "something was generated");
        const [finish] = assertFinishes(parts, 1, generation);
        assert.ok(finish!.reason === "stop" || finish!.reason === "length", `a whole reply ends stop or length: ${finish!.reason}`);
        assert.equal(finish!.stopSequence, undefined, "no stop string was asked for: none ended it");
        const usage = generation.usage();
        assert.equal(usage.source, traits.usageSource);
        assert.ok(usage.completionTokens >= 1 && usage.completionTokens <= prepared.maxTokens);
        await assertFinal(generation);
        await untilIdle(engine);
      });
    });

    for (const choices of [2, 3]) {
      it(`interleaves n = ${choices} choices, each with its own finish, the prompt counted once`, async () => {
        await withEngine(async (engine) => {
          const prepared = await engine.prepare(long({ choices, maxTokens: 12 }));
          assert.equal(prepared.choices, choices);
          const generation = prepared.start(new AbortController().signal);
          const parts = await collect(generation);
          const finishes = assertFinishes(parts, choices, generation);
          for (const finish of finishes) assert.ok(finish.reason === "stop" || finish.reason === "length", `choice ${finish.choice} ends ${finish.reason}`);
          // Interleaved: some choice's parts resume after another choice's parts came in between.
          const order = parts.filter(carriesTokens).map((part) => part.choice);
          const runs = order.filter((choice, index) => index === 0 || order[index - 1] !== choice).length;
          assert.ok(runs > choices, `the choices' parts interleave: ${order.join(",")}`);
          const usage = generation.usage();
          if (traits.promptCount === "exact") assert.equal(usage.promptTokens, prepared.promptTokens, "the prompt counts once for all choices");
          else assert.ok(usage.promptTokens <= prepared.promptTokens, "the prompt counts once for all choices");
          assert.ok(usage.completionTokens <= choices * prepared.maxTokens);
          await assertFinal(generation);
          await untilIdle(engine);
        });
      });
    }

    for (const choices of [1, 2]) {
      it(`ends every choice cancelled when aborted mid-generation (n = ${choices}), usage final at what was generated`, async () => {
        await withEngine(async (engine) => {
          const prepared = await engine.prepare(long({ choices, maxTokens: 200 }));
          const controller = new AbortController();
          const generation = prepared.start(controller.signal);
          const parts = await collect(generation, (part) => {
            if (carriesTokens(part)) controller.abort(new Error("the client left"));
          });
          const finishes = assertFinishes(parts, choices, generation);
          for (const finish of finishes) assert.equal(finish.reason, "cancelled", `choice ${finish.choice} ends cancelled`);
          const usage = generation.usage();
          assert.equal(usage.source, traits.cutUsageSource);
          assert.ok(usage.completionTokens >= 1, "what was generated before the cut is counted");
          assert.ok(usage.completionTokens < choices * prepared.maxTokens, `the cut stopped generation (${usage.completionTokens} tokens)`);
          assert.ok(usage.promptTokens > 0, "the prompt of a request that ran is counted");
          await assertFinal(generation);
          await untilIdle(engine);
        });
      });
    }

    it("reports the stop sequence that ended a choice", () => reportsStopSequence(withEngine, traits));

    it("answers a text completion: each prompt's n choices together, its echo first, every prompt counted once", async () => {
      // n as the stop case asks for it: 1 for a kind that takes one choice only.
      const n = traits.stopSequence.choices ?? 2;
      const prompts = [{ text: "Once upon a time" }, { text: "The little cat" }];
      const textCompletion = (of: typeof prompts, echo: boolean): GenerationRequest => ({
        ...long({ messages: [], maxTokens: 6, choices: of.length * n }),
        completion: { prompts: of, n, ...(echo ? { echo: true } : {}) },
      });
      /** Runs a request to its end: each choice's text, and the usage. */
      const run = async (engine: Engine, request: GenerationRequest) => {
        const prepared = await engine.prepare(request);
        assert.equal(prepared.choices, request.choices);
        const generation = prepared.start(new AbortController().signal);
        const parts = await collect(generation);
        const texts = Array.from({ length: request.choices }, (_, choice) => parts.flatMap((part) => (part.type === "text-delta" && part.choice === choice ? [part.text] : [])));
        // An echo is no generated token: the finishes are checked on the rest.
        const echoes = new Set(request.completion?.echo === true ? texts.map((_, choice) => parts.find((part) => part.type === "text-delta" && part.choice === choice && part.text !== "")) : []);
        assertFinishes(parts.filter((part) => !echoes.has(part)), request.choices, generation);
        await untilIdle(engine);
        return { texts, usage: generation.usage(), prepared };
      };
      await withEngine(async (engine) => {
        const alone = await Promise.all(prompts.map(async (prompt) => (await run(engine, textCompletion([prompt], false))).usage.promptTokens));
        const together = await run(engine, textCompletion(prompts, true));
        assert.equal(together.usage.promptTokens, alone[0]! + alone[1]!, "each prompt's tokens once, whatever n");
        if (traits.promptCount === "exact") assert.equal(together.prepared.promptTokens, together.usage.promptTokens);
        for (let choice = 0; choice < 2 * n; choice++) {
          const prompt = prompts[Math.floor(choice / n)]!.text;
          const pieces = together.texts[choice]!.filter((piece) => piece !== "");
          assert.equal(pieces[0], prompt, `choice ${choice} begins with its prompt's echo`);
          assert.ok(pieces.length > 1, `choice ${choice} goes on after its echo: ${JSON.stringify(pieces)}`);
        }
      });
    });

    it("stops when the consumer stops reading, with usage final and its slot back", async () => {
      await withEngine(async (engine) => {
        const prepared = await engine.prepare(long({ maxTokens: 200 }));
        const generation = prepared.start(new AbortController().signal);
        let seen = 0;
        for await (const part of generation.parts) {
          if (carriesTokens(part)) seen++;
          if (seen === 1) break;
        }
        const usage = generation.usage();
        assert.ok(usage.completionTokens >= 1 && usage.completionTokens < prepared.maxTokens, `generation stopped early (${usage.completionTokens} tokens)`);
        await assertFinal(generation);
        await untilIdle(engine);
      });
    });

    it("cancels a generation running when the engine closes", async () => {
      await withEngine(async (engine) => {
        const prepared = await engine.prepare(long({ maxTokens: 200 }));
        const generation = prepared.start(new AbortController().signal);
        let closing: Promise<void> | undefined;
        const parts = await collect(generation, (part) => {
          if (carriesTokens(part)) closing ??= engine.close();
        });
        await closing;
        const [finish] = assertFinishes(parts, 1, generation);
        assert.equal(finish!.reason, "cancelled");
        await assertFinal(generation);
      });
    });

    it("refuses at start, synchronously, once its slots and queue are full; a cut waiter leaves uncounted; slots come back", async () => {
      await withEngine(async (engine) => {
        const { running, waiting } = traits.capacity;
        const prepared = await engine.prepare(long({ maxTokens: 200 }));
        const started = Array.from({ length: running + waiting }, () => {
          const controller = new AbortController();
          return { controller, generation: prepared.start(controller.signal) };
        });
        // Those within the slots are admitted; the rest wait.
        await Promise.all(started.slice(0, running).map(({ generation }) => generation.admitted));
        const waiters = started.slice(running);
        assert.equal(engine.members().reduce((sum, member) => sum + member.busy, 0), running, "every slot taken at start");
        assert.equal(engine.members().reduce((sum, member) => sum + member.waiting, 0), waiting, "the rest wait");

        // One more: refused by `start` itself, before the caller could have sent anything.
        let refused: unknown;
        try {
          prepared.start(new AbortController().signal);
        } catch (error) {
          refused = error;
        }
        assert.ok(refused instanceof EngineOverloadedError, `refused synchronously with EngineOverloadedError: ${String(refused)}`);
        assert.equal(refused.status, 503);
        assert.equal(refused.code, "engine_overloaded");

        // A waiter cut while it waits: not admitted, nothing counted, its place freed.
        if (waiters.length > 0) {
          const [cut] = waiters;
          cut!.controller.abort(new Error("the client left while waiting"));
          await assert.rejects(cut!.generation.admitted);
          await assert.rejects(collect(cut!.generation));
          assert.equal(cut!.generation.usage().promptTokens, 0, "a request that never ran counts no prompt");
          assert.equal(cut!.generation.usage().completionTokens, 0);
          assert.equal(engine.members().reduce((sum, member) => sum + member.waiting, 0), waiting - 1);
        }

        // Cut before anyone read them: every slot comes back, and the engine serves again.
        for (const { controller } of started) controller.abort(new Error("the client left"));
        await Promise.allSettled(started.map(({ generation }) => generation.admitted));
        await untilIdle(engine);
        const again = (await engine.prepare(contractRequest())).start(new AbortController().signal);
        assertFinishes(await collect(again), 1, again);
        await untilIdle(engine);
      });
    });
  });
}
