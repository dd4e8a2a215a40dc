/**
 * `hisparse plan`'s Quest digest term on the CUDA engine (Llama-3.1-8B shape: 30 sparse layers,
 * 8 KV heads × 128, 16-token pages, dense layers 0 and 1): one bf16 digest per page by default,
 * sub-page digests (`digest_tokens`) in bf16 or outward-rounded fp8 (`digest_dtype`).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import { loadModelConfig } from "../../../src/config/model_config.js";
import { planHiSparseKnobs } from "../../../src/plan/hisparse_knobs.js";
import { cudaDigestElementBytes, type PlanInput, planHiSparse } from "../../../src/plan/plan.js";

const llama = loadModelConfig(join(import.meta.dirname, "../../../configs/llama-3.1-8b"));

function hostPageBytes(json: string): number {
  const hisparse = planHiSparseKnobs({ json });
  const input: PlanInput = {
    model: llama,
    kvBudgetBytes: 118_049_831_321,
    contextTokens: 131072,
    blockSize: 16,
    kvElementBytes: 2,
    digestElementBytes: cudaDigestElementBytes(hisparse),
    hisparse,
  };
  return planHiSparse(input).deviceBytesPerHostBlock;
}

describe("plan: Quest digests on CUDA", () => {
  it("bf16 by default; fp8 halves the digest bytes; sub-pages multiply them", () => {
    assert.equal(cudaDigestElementBytes({}), 2);
    assert.equal(cudaDigestElementBytes({ digestDtype: "fp8" }), 1);
    // Dense layers' K and V: 2 layers × 2 × 16 × 8 × 128 × 2 B = 131,072 B; digests: 30 layers ×
    // S sub-pages × (min, max) × 8 × 128 × element bytes.
    assert.equal(hostPageBytes("{}"), 131072 + 30 * 1 * 2 * 1024 * 2); // 248 KiB
    assert.equal(hostPageBytes('{"digest_tokens":4}'), 131072 + 30 * 4 * 2 * 1024 * 2); // 608 KiB
    assert.equal(hostPageBytes('{"digest_tokens":4,"digest_dtype":"fp8"}'), 131072 + 30 * 4 * 2 * 1024); // 368 KiB
  });
});
