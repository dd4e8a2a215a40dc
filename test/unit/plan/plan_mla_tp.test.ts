/**
 * `hisparse plan` for MLA / DSA models and tensor parallelism, every figure from the one KV
 * formula (core modelKVCacheGroups, sizeKVMemory) and worked out by hand in the comments:
 * GLM-5 (configs/glm-5: 78 layers, latent 512 + 64, indexer keys 128 on every layer) and
 * Llama-3.1-8B (8 KV heads × 128) split over ranks.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import { loadModelConfig } from "../../../src/config/model_config.js";
import { countParameters, weightSplit } from "../../../src/config/parameter_count.js";
import {
  KV_CACHE_DTYPE_BYTES,
  kvStorageFor,
  resolveKVCacheDtype,
} from "../../../src/core/kv/kv_cache_dtype.js";
import { decodeOnlyConcurrency } from "../../../src/core/kv/kv_concurrency.js";
import { denseLines } from "../../../src/plan/format.js";
import { planHiSparseKnobs } from "../../../src/plan/hisparse_knobs.js";
import { PlanError, type PlanInput, planDense, planHiSparse } from "../../../src/plan/plan.js";
import { repoRoot } from "../../helpers/reference.js";

const glm5 = loadModelConfig(join(repoRoot, "configs", "glm-5"));
const llama = loadModelConfig(join(repoRoot, "configs", "llama-3.1-8b"));
/** 36 GiB of KV per rank. */
const BUDGET = 36 * 2 ** 30;

const input = (over: Partial<PlanInput>): PlanInput => ({
  model: glm5,
  kvBudgetBytes: BUDGET,
  contextTokens: 131072,
  blockSize: 64,
  kvElementBytes: 1,
  tensorParallelSize: 8,
  hisparse: planHiSparseKnobs({}),
  ...over,
});

describe("KV cache dtype (core/kv/kv_cache_dtype.ts)", () => {
  it("maps vLLM's names to bytes; auto is the activation dtype; fp8 scales add no bytes per token", () => {
    assert.deepEqual(KV_CACHE_DTYPE_BYTES, { bf16: 2, f16: 2, f32: 4, fp8: 1 });
    assert.equal(resolveKVCacheDtype("auto", "bf16"), "bf16");
    assert.equal(resolveKVCacheDtype("fp8", "bf16"), "fp8");
    assert.deepEqual(kvStorageFor("fp8", 8), {
      elementBytes: 1,
      scaleBytesPerToken: 0,
      tensorParallelSize: 8,
    });
  });
});

describe("plan of an MLA / DSA model (GLM-5)", () => {
  it("KV per token: latent 576 × 1 B × 78 + indexer 128 × 1 B × 78 = 54,912 B in fp8, the same on every rank", () => {
    const d = planDense(input({}));
    assert.deepEqual(
      d.groups.map((g) => [g.name, g.spec.bytesPerToken, g.layers.length]),
      [
        ["mla latent", 576, 78],
        ["indexer keys", 128, 78],
      ],
    );
    assert.equal(d.kvBytesPerToken, 78 * 576 + 78 * 128);
    // 36 GiB / (64 × 54,912 B = 3,514,368 B) = 10,999 blocks; 128K = 2,048 blocks: 5 requests.
    assert.deepEqual([d.kvBytesPerBlock, d.numGpuBlocks, d.maxConcurrent], [3_514_368, 10_999, 5]);
    assert.deepEqual(planDense(input({ tensorParallelSize: 1 })), d, "MLA rows are replicated, not split");
    // bf16: 78 × (1,152 + 256) = 109,824 B, the "~1.1 KB/token/layer" latent.
    assert.equal(planDense(input({ kvElementBytes: 2 })).kvBytesPerToken, 109_824);
    assert.ok(
      denseLines(input({}), d)[1]!.includes(
        "MLA latent (512 + 64) × 1 B = 576 B/layer × 78 layers + indexer keys 128 × 1 B = 128 B/layer × 78 layers = 54,912 B",
      ),
    );
  });

  it("HiSparse: latent of the sparse layers offloadable, indexer keys and dense layers' latent on the GPU, no digests", () => {
    const h = planHiSparse(input({}));
    // m = 76 layers × 64 × 576 B = 2,801,664 B; h = 2 × 64 × 576 + 78 × 64 × 128 = 712,704 B.
    assert.deepEqual(
      [h.mainBytesPerBlock, h.deviceBytesPerHostBlock, h.digestBytesPerPage],
      [2_801_664, 712_704, 0],
    );
    // d = ceil((64 + 256 + 4096) / 64) + 1 = 70; best N = floor((38,654,705,664 − 1,978 × m) /
    // (2,048 × h + 70 × m)) = floor(33,113,014,272 / 1,655,734,272) = floor(19.9990) = 19.
    assert.deepEqual([h.devicePagesPerRequest, h.bestN, h.best.maxConcurrent], [70, 19, 19]);
    // Without the one prefill's 1,978 extra blocks: floor(38,654,705,664 / 1,655,734,272) = 23.
    assert.equal(h.decodeOnly, 23);
    assert.equal(
      decodeOnlyConcurrency(
        BUDGET,
        { mainBytesPerBlock: 2_801_664, hostBytesPerBlock: 2_801_664, deviceBytesPerHostBlock: 712_704 },
        2048,
        70,
      ),
      23,
    );
  });

  it("weights per rank: routed experts and TP-sharded weights split, the rest replicated; the sum is the model", () => {
    const w = weightSplit(glm5);
    assert.equal(w.routedExperts + w.sharded + w.replicated, countParameters(glm5));
    // 75 MoE layers × 256 experts × 3 × 6,144 × 2,048.
    assert.equal(w.routedExperts, 75 * 256 * 3 * 6144 * 2048);
    // Replicated per layer: q_a 6,144 × 2,048 + 2,048, kv_a 6,144 × 576 + 512, indexer
    // 2,048 × 32 × 128 + 6,144 × 128 + 256 + 6,144 × 32, norms 2 × 6,144; routers 75 × 256 × (6,144 + 1); final norm.
    const perLayer =
      6144 * 2048 + 2048 + 6144 * 576 + 512 + 2048 * 32 * 128 + 6144 * 128 + 256 + 6144 * 32 + 2 * 6144;
    assert.equal(w.replicated, 78 * perLayer + 75 * 256 * 6145 + 6144);
  });
});

describe("plan with --tensor-parallel-size on a GQA model (Llama-3.1-8B, 8 KV heads)", () => {
  const llamaInput = (tp: number): PlanInput =>
    input({ model: llama, kvElementBytes: 2, tensorParallelSize: tp });
  it("2 ranks hold 4 heads each (half the KV per token); 16 ranks hold one head each, replicated", () => {
    assert.equal(planDense(llamaInput(1)).kvBytesPerToken, 2 * 32 * 8 * 128 * 2);
    assert.equal(planDense(llamaInput(2)).kvBytesPerToken, 2 * 32 * 4 * 128 * 2);
    assert.equal(planDense(llamaInput(16)).kvBytesPerToken, 2 * 32 * 1 * 128 * 2);
  });
  it("3 ranks cannot split 8 heads: a PlanError naming the flag", () => {
    assert.throws(
      () => planDense(llamaInput(3)),
      (e: Error) => {
        assert.ok(e instanceof PlanError);
        assert.equal(
          e.message,
          "--tensor-parallel-size 3: 8 KV heads cannot be split over 3 ranks (not a multiple)",
        );
        return true;
      },
    );
  });
});
