/**
 * A service tier as an upstream's own `priority` request field, for members started with priority
 * scheduling. vLLM (`--scheduling-policy priority`) serves lower values first; SGLang
 * (`--enable-priority-scheduling`, without `--schedule-low-priority-values-first`) higher ones.
 * Either way `default` is 0, the value both give a request that names none.
 */
import type { ServiceTier } from "../../protocol/service-tiers.ts";
import type { UpstreamKind } from "./config-schema.ts";

const VLLM: Record<ServiceTier, number> = { priority: -1, default: 0, flex: 1 };
const SGLANG: Record<ServiceTier, number> = { priority: 1, default: 0, flex: -1 };

/** The `priority` field for a tier on a kind that schedules by it; undefined for the others (nothing is sent). */
export function upstreamPriority(kind: UpstreamKind | undefined, tier: ServiceTier): number | undefined {
  if (kind === "vllm") return VLLM[tier];
  if (kind === "sglang") return SGLANG[tier];
  return undefined;
}
