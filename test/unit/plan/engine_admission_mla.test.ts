/**
 * `hisparse plan` against what the engine really does for an MLA / DSA model (CPU backend, the
 * tiny GLM-5 config of test/fixtures with dummy weights): plan and engine take their figures from
 * the one KV memory formula (core modelKVCacheGroups: "mla latent" + "indexer keys"; sizeKVMemory),
 * so the engine sizes the planned number of blocks and runs the planned number of requests at
 * once, with no preemption.
 *
 * The tiny GLM-5: 4 layers, latent 64 + 16 = 80 elements, indexer keys 32 elements on every layer;
 * in f32 a token costs 4 × (80 + 32) × 4 B = 1,792 B, a 16-token block 28,672 B.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import { type EngineArgs, makeEngineArgs } from "../../../src/config/engine_args.js";
import { loadModelConfig } from "../../../src/config/model_config.js";
import { makeSamplingParams } from "../../../src/core/sampling_params.js";
import { LLMEngine } from "../../../src/engine/llm_engine.js";
import { planHiSparseKnobs } from "../../../src/plan/hisparse_knobs.js";
import { type PlanInput, planDense } from "../../../src/plan/plan.js";
import { repoRoot } from "../../helpers/reference.js";

const DIR = join(repoRoot, "test", "fixtures", "models", "tiny-glm5-dsa-pv");

/** Runs `n` requests of `prompt` + `maxTokens` tokens to the end; the peak running count. */
async function run(args: EngineArgs, n: number, prompt: number, maxTokens: number) {
  const engine = await LLMEngine.create(args);
  try {
    for (let i = 0; i < n; i++) {
      const ids = Array.from({ length: prompt }, (_, j) => 1 + ((i * 7 + j) % 300));
      engine.addRequest(
        `r${i}`,
        { promptTokenIds: ids },
        makeSamplingParams({ maxTokens, ignoreEos: true, temperature: 0 }),
      );
    }
    let peak = 0;
    let finished = 0;
    while (engine.hasPendingWork()) {
      for (const o of await engine.step()) if (o.finished) finished++;
      peak = Math.max(peak, engine.scheduler.numRunning);
    }
    return {
      peak,
      finished,
      preemptions: engine.scheduler.makeStats().numPreemptions,
      numGpuBlocks: engine.info.numGpuBlocks,
    };
  } finally {
    await engine.shutdown();
  }
}

describe("plan vs the engine's admission: MLA + DSA indexer (CPU, tiny GLM-5, dummy weights)", () => {
  const plan = (kvBudgetBytes: number, contextTokens: number, tensorParallelSize?: number): PlanInput => ({
    model: loadModelConfig(DIR),
    kvBudgetBytes,
    contextTokens,
    blockSize: 16,
    kvElementBytes: 4,
    ...(tensorParallelSize === undefined ? {} : { tensorParallelSize }),
    hisparse: planHiSparseKnobs({}),
  });

  it("the plan's figures are the formula's: 1,792 B a token, both groups in every block", () => {
    const d = planDense(plan(30 * 28672 + 5000, 101));
    assert.deepEqual(
      d.groups.map((g) => [g.name, g.layers.length, g.spec.bytesPerToken]),
      [
        ["mla latent", 4, 320],
        ["indexer keys", 4, 128],
      ],
    );
    assert.deepEqual([d.kvBytesPerToken, d.kvBytesPerBlock, d.numGpuBlocks], [1792, 28672, 30]);
    // MLA rows are the same on every rank: TP 8 changes no KV figure.
    assert.deepEqual(planDense(plan(30 * 28672 + 5000, 101, 8)), d);
  });

  for (const [budget, prompt, maxTokens, maxModelLen, blocks, atOnce] of [
    // 30 blocks + 5000 B (max_model_len 480 = 30 × 16); 99 + 2 tokens = 7 blocks each: 4 at once.
    [30 * 28672 + 5000, 99, 2, 480, 30, 4],
    // 73 blocks; 150 + 10 tokens = 10 blocks each: 7 at once.
    [73 * 28672 + 28000, 150, 10, 512, 73, 7],
  ] as const) {
    it(`dense-resident DSA: ${budget} B, ${prompt} + ${maxTokens} tokens: the planned blocks and requests at once`, async () => {
      const d = planDense(plan(budget, prompt + maxTokens));
      assert.deepEqual([d.numGpuBlocks, d.maxConcurrent], [blocks, atOnce]);
      const args = makeEngineArgs({
        model: DIR,
        device: "cpu",
        loadFormat: "dummy",
        kvCacheDtype: "f32",
        blockSize: 16,
        cpuKvCacheBytes: budget,
        maxModelLen,
        maxNumBatchedTokens: 8192,
        enableChunkedPrefill: false,
        inprocWorker: true,
      });
      const r = await run(args, d.maxConcurrent + 2, prompt, maxTokens);
      assert.equal(r.numGpuBlocks, d.numGpuBlocks, "the engine sizes the planned number of blocks");
      assert.equal(r.peak, d.maxConcurrent, "the planned number of requests runs at once, no more");
      assert.equal(r.preemptions, 0);
      assert.equal(r.finished, d.maxConcurrent + 2);
    });
  }
});
