/**
 * The engine contract against the scripted fake engine the serving layer's tests use: it must
 * behave as the real engines do (see `engine-contract.ts`).
 */
import { FakeEngine } from "../../src/engines/fake/fake-engine.ts";
import { engineContract } from "./engine-contract.ts";

/** Twelve one-token pieces: long enough to interleave choices and to be cut mid-way. */
const STORY = Array.from({ length: 12 }, (_, index) => ({ text: index === 0 ? "Once" : ` word${index}` }));

engineContract(
  "fake",
  async () => ({
    engine: new FakeEngine({ startLoading: true, capacity: 3, queueSize: 1, script: () => [{ steps: STORY }] }),
    close: async () => {},
  }),
  { capacity: { running: 3, waiting: 1 }, usageSource: "counted", cutUsageSource: "counted", promptCount: "exact" },
);
