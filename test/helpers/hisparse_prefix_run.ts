/**
 * The scenario behind the HiSparse prefix-cache exactness tests on both backends
 * (test/e2e/hisparse/prefix_cache, test/native/hisparse_prefix): request A reads a 160-token
 * document and a question; C (unrelated, longer) then takes every never-used device block and
 * some of A's cached ones, so part of the document is left only in the host tier; B asks
 * another question about the same document. With prefix caching B starts from the cached pages
 * (device copies read in place, host-only pages loaded back) and must give the cold run's greedy
 * tokens. Every pool must be whole at the end.
 */
import assert from "node:assert/strict";
import type { HiSparseStats } from "../../src/core/hisparse/plan.js";
import { LLM, type LLMOptions } from "../../src/engine/llm.js";

/** Token ids 100.. of a fixed pseudo-random walk (the same prompts in every run). */
export function walkIds(seed: number, n: number): number[] {
  const out: number[] = [];
  let x = seed;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    out.push(100 + (x % 8000));
  }
  return out;
}

/** The 160-token shared document (also its token count). */
export const DOC = walkIds(7, 160);
const A = [...DOC, ...walkIds(11, 9)];
const B = [...DOC, ...walkIds(13, 7)];
const C = walkIds(17, 260);
const PARAMS = { temperature: 0, maxTokens: 12, ignoreEos: true };

/** What one sequence gave: tokens and cached prompt tokens of A, C, B; stats; preemptions. */
export interface PrefixRunResult {
  tokens: number[][];
  cached: number[];
  stats: HiSparseStats | undefined;
  numPreemptions: number;
}

/**
 * Runs A, then C, then B, one after another.
 * @throws AssertionError when a device or host block is still in use afterwards.
 */
export async function runPrefixSequence(opts: LLMOptions): Promise<PrefixRunResult> {
  const llm = new LLM({ maxModelLen: 384, ...opts });
  try {
    const engine = await llm.getEngine();
    const tokens: number[][] = [];
    const cached: number[] = [];
    for (const p of [A, C, B]) {
      const [o] = await llm.generate([{ promptTokenIds: p }], PARAMS);
      tokens.push(o!.outputs[0]!.tokenIds);
      cached.push(o!.numCachedTokens ?? 0);
    }
    const stats = engine.hisparse?.stats();
    assert.equal(
      engine.scheduler.kvCacheManager.numFreeBlocks,
      engine.info.numGpuBlocks,
      "device pool freed",
    );
    if (stats !== undefined) assert.equal(stats.hostPoolUsedBlocks, 0, "host pool freed");
    return { tokens, cached, stats, numPreemptions: engine.scheduler.makeStats().numPreemptions };
  } finally {
    await llm.shutdown();
  }
}
