/** `servicesAt`: what a model serves, read back from the `endpoints` `/v1/models` lists (the console's badges). */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { MODEL_SERVICES, SERVICE_ENDPOINTS, servicesAt, type ModelService } from "./model-services.ts";

describe("servicesAt", () => {
  it("reads back every set of services from the endpoints they list, in catalog order", () => {
    const subsets: ModelService[][] = [[], ["chat"], ["completions"], ["embeddings"], ["chat", "completions"], ["chat", "embeddings"], ["completions", "embeddings"], [...MODEL_SERVICES]];
    for (const services of subsets) {
      const endpoints = services.flatMap((service) => SERVICE_ENDPOINTS[service]);
      assert.deepEqual(servicesAt(endpoints), services, endpoints.join(", "));
      assert.deepEqual(servicesAt([...endpoints].reverse()), services, "the endpoints' order does not matter");
    }
  });

  it("counts a service from any one of its endpoints, and ignores endpoints it does not know", () => {
    assert.deepEqual(servicesAt(["/v1/responses"]), ["chat"]);
    assert.deepEqual(servicesAt(["/v1/audio/speech", "/v1/embeddings"]), ["embeddings"]);
    assert.deepEqual(servicesAt(["/v1/audio/speech"]), []);
  });
});
