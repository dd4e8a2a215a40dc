/**
 * The pure parts of the CUDA DSA HiSparse set-up (worker/hisparse/cuda/dsa_setup_cuda.ts): which
 * indexer each layer's selection is and its LRU lane, and the refusals of what the CUDA row
 * kernels cannot run, with their reasons.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { makeEngineArgs } from "../../../../src/config/engine_args.js";
import { resolveHiSparseConfig } from "../../../../src/config/hisparse_config.js";
import type { MlaConfig } from "../../../../src/config/mla_config.js";
import { loadModelConfig } from "../../../../src/config/model_config.js";
import {
  cudaDsaReasons,
  dsaLayerPlan,
  ROW_RESOLVE_LIMITS,
} from "../../../../src/worker/hisparse/cuda/dsa_setup_cuda.js";
import type { KVCacheSetupContext } from "../../../../src/worker/kv_cache_setup.js";
import { refModelDir } from "../../../helpers/reference.js";

const mlaWith = (layerTypes: ("full" | "shared")[]): MlaConfig =>
  ({
    indexer: { topk: 32, headDim: 32, numHeads: 4, ropeInterleave: true, layerTypes },
  }) as unknown as MlaConfig;

describe("dsaLayerPlan", () => {
  it("GLM-5 pattern full, shared, full, shared, layer 0 dense: indexers 0 and 2, lanes 0 and 1", () => {
    const plan = dsaLayerPlan(mlaWith(["full", "shared", "full", "shared"]), 4, [-1, 0, 1, 2]);
    assert.deepEqual(plan.sourceLayer, [0, 0, 2, 2]);
    // Layer 1 shares layer 0's indexer (a dense layer's own rows need no lane, but its selection
    // still serves layer 1): the lanes follow the sparse layers' indexers in order.
    assert.deepEqual(plan.sourceIndex, [-1, 0, 1, 1]);
  });

  it("every layer full (DeepSeek-V3.2): one lane per sparse layer", () => {
    const plan = dsaLayerPlan(mlaWith(["full", "full", "full"]), 3, [0, 1, 2]);
    assert.deepEqual(plan.sourceIndex, [0, 1, 2]);
  });
});

describe("cudaDsaReasons", {
  skip: refModelDir("tiny-glm5-dsa-pv") === null && "tiny-glm5-dsa-pv not found",
}, () => {
  const config = loadModelConfig(refModelDir("tiny-glm5-dsa-pv")!);
  const ctx = (kvCacheDtype: "bf16" | "fp8", row?: number): KVCacheSetupContext => ({
    model: {
      config:
        row === undefined
          ? config
          : { ...config, mla: { ...config.mla!, kvLoraRank: row - config.mla!.qkRopeHeadDim } },
      layout: { numHeads: 4, numKvHeads: 4, headDim: 32 } as never,
    },
    args: makeEngineArgs({ blockSize: 8 }),
    kvCacheDtype,
    deviceBudgetBytes: 0,
    maxModelLen: 256,
  });
  const hs = resolveHiSparseConfig({ mode: "on", topk: 32, deviceBufferTokens: 64 });

  it("the tiny GLM-5 (64 + 16 = 80-wide rows, bf16) runs", () => {
    assert.deepEqual(cudaDsaReasons(ctx("bf16"), hs), []);
  });

  it("refuses fp8 latent rows, rows not a multiple of 16, a top-k or hot buffer past the resolver's bounds", () => {
    const big = {
      ...hs,
      topk: ROW_RESOLVE_LIMITS.maxTopk + 1,
      deviceBufferTokens: ROW_RESOLVE_LIMITS.maxHotRows + 8,
    };
    const r = cudaDsaReasons(ctx("fp8", 88), big);
    assert.equal(r.length, 4, r.join("\n"));
    assert.match(r[0]!, /keeps the latent rows in bf16, not fp8/);
    assert.match(r[1]!, /multiple of 16 .* got 88/);
    assert.match(r[2]!, /index_topk <= 8192, got 8193/);
    assert.match(r[3]!, /device_buffer_tokens <= 16384/);
  });
});
