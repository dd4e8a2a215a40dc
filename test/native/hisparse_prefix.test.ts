/**
 * HiSparse prefix caching on CUDA (GPU machine), the twin of test/e2e/hisparse/prefix_cache:
 * ref-small, block size 8, `auto` and `on` (host residency) with prefix caching. B shares A's
 * 160-token document; C has evicted some of its device copies, so B's prefill starts from device
 * copies read in place and host-only pages loaded back by hsLoadPages; B's greedy tokens (and A's
 * and C's) must equal the cold dense CUDA run's. topk covers every context, so `on` is exact.
 */
import assert from "node:assert/strict";
import { before, describe, it } from "node:test";
import { loadAddon } from "../../src/backends/cuda/addon.js";
import { type HiSparseConfig, resolveHiSparseConfig } from "../../src/config/hisparse_config.js";
import { DOC, type PrefixRunResult, runPrefixSequence } from "../helpers/hisparse_prefix_run.js";
import { refModelDir } from "../helpers/reference.js";
import { gpuSkip } from "./helpers.js";

const BLOCK = 8;
const SPARSE: Partial<HiSparseConfig> = {
  topk: 288,
  deviceBufferTokens: 288,
  sinkTokens: 8,
  windowTokens: 16,
};

function skip(): string | false {
  const g = gpuSkip();
  if (g !== false) return g;
  if (!loadAddon().buildInfo.hasHiSparse) return "the addon was built without the HiSparse kernels";
  return refModelDir("ref-small") === null ? "ref-small not found" : false;
}

describe("HiSparse prefix caching on CUDA: ref-small", { skip: skip() }, () => {
  const base = {
    model: refModelDir("ref-small")!,
    device: "cuda" as const,
    blockSize: BLOCK,
    gpuMemoryUtilization: 0.5,
  };
  let cold: PrefixRunResult;
  before(async () => {
    cold = await runPrefixSequence(base);
  });

  // Pools sized (as measured on the CPU backend with the same block size) so that C evicts some
  // of A's device copies: 3 pages loaded back in auto, 8 in on.
  for (const [label, cfg, numGpuBlocks] of [
    ["auto", { mode: "auto" }, 51],
    ["on (host residency)", { mode: "on", minSparseTokens: 0 }, 121],
  ] as const)
    it(`${label}: B starts from the cached document (device copies and loaded host pages), greedy tokens equal the cold run`, async () => {
      const r = await runPrefixSequence({
        ...base,
        numGpuBlocksOverride: numGpuBlocks,
        enablePrefixCaching: true,
        extensions: { hisparse: resolveHiSparseConfig({ ...SPARSE, ...cfg }) },
      });
      assert.deepEqual(r.tokens, cold.tokens);
      assert.deepEqual(r.cached, [0, 0, DOC.length]);
      const loaded = r.stats!.loadedPagesTotal ?? 0;
      assert.ok(loaded > 0 && loaded < DOC.length / BLOCK, JSON.stringify(r.stats));
      assert.equal(r.numPreemptions, 0);
    });
});
