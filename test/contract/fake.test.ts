/**
 * The engine contract against the scripted fake engine the serving layer's tests use: it must
 * behave as the real engines do (see `engine-contract.ts`).
 */
import { FakeEngine, type ScriptStep } from "../../src/engines/fake/fake-engine.ts";
import { engineContract } from "./engine-contract.ts";

/**
 * Twelve one-token pieces: long enough to interleave choices and to be cut mid-way. The fifth is
 * written as a stop sequence: it ends the choice where the request's `stop` holds it, and is
 * text like the others where not.
 */
const STORY = Array.from({ length: 12 }, (_, index): ScriptStep => (index === 4 ? { stopSequence: " word4" } : { text: index === 0 ? "Once" : ` word${index}` }));

engineContract(
  "fake",
  async () => ({
    engine: new FakeEngine({ startLoading: true, capacity: 3, queueSize: 1, script: () => [{ steps: STORY }] }),
    close: async () => {},
  }),
  { capacity: { running: 3, waiting: 1 }, usageSource: "counted", cutUsageSource: "counted", promptCount: "exact", stopSequence: { stop: " word4", reported: true } },
);
