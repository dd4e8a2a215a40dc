/**
 * The run behind the HiSparse exactness tests on both backends (test/e2e/hisparse/exactness,
 * test/native/hisparse_engine): the fixture prompts generated in one batch, greedy, with the
 * engine options given; when HiSparse is on, every pool must be whole again afterwards.
 */
import assert from "node:assert/strict";
import type { HiSparseStats } from "../../src/core/hisparse/plan.js";
import type { SamplingParams } from "../../src/core/sampling_params.js";
import { LLM, type LLMOptions } from "../../src/engine/llm.js";

/** What one run gives: tokens per prompt, the HiSparse stats (undefined when off), preemptions. */
export interface HiSparseRunResult {
  tokens: number[][];
  stats: HiSparseStats | undefined;
  numPreemptions: number;
}

/**
 * Generates `prompts` (token ids) in one batch with `params`.
 * @throws AssertionError when HiSparse is on and a device or host block is still held afterwards.
 */
export async function runPrompts(
  options: LLMOptions,
  prompts: number[][],
  params: Partial<SamplingParams>,
): Promise<HiSparseRunResult> {
  const llm = new LLM(options);
  try {
    const engine = await llm.getEngine();
    const outs = await llm.generate(
      prompts.map((p) => ({ promptTokenIds: p })),
      params,
    );
    const stats = engine.hisparse?.stats();
    if (engine.hisparse !== null) {
      // Every pool is whole again once the requests finished.
      assert.equal(
        engine.scheduler.kvCacheManager.numFreeBlocks,
        engine.info.numGpuBlocks,
        "device pool freed",
      );
      assert.equal(stats!.hostPoolUsedBlocks, 0, "host pool freed");
    }
    return {
      tokens: outs.map((o) => o.outputs[0]!.tokenIds),
      stats,
      numPreemptions: engine.scheduler.makeStats().numPreemptions,
    };
  } finally {
    await llm.shutdown();
  }
}
