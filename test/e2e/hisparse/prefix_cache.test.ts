/**
 * Prefix caching through both HiSparse tiers on the real ref-small model (CPU backend): a second
 * request sharing a long prefix, whose pages are partly on the device and partly only in the
 * host tier (their device copies evicted by a third request), must give the cold run's greedy
 * tokens, in `auto` and `on` (host residency: the first request's pages spilled while it ran).
 * The host-only pages are loaded back for the prefill (`loadedPagesTotal`), the shared prefix is
 * not recomputed (the scheduler's prefix hits), and every pool is whole at the end
 * (test/helpers/hisparse_prefix_run.ts). Block size 4 and small pools force the evictions; topk
 * covers the context. test/native/hisparse_prefix.test.ts is the same on CUDA (block size 8).
 */
import assert from "node:assert/strict";
import { before, it } from "node:test";
import { type HiSparseConfig, resolveHiSparseConfig } from "../../../src/config/hisparse_config.js";
import { DOC, type PrefixRunResult, runPrefixSequence } from "../../helpers/hisparse_prefix_run.js";
import { describeIfFound, refModelDir } from "../../helpers/reference.js";

const dir = refModelDir("ref-small");
/** topk covers the longest context (C: 272 tokens), so `on` is exact too. */
const SPARSE: Partial<HiSparseConfig> = {
  topk: 288,
  deviceBufferTokens: 288,
  sinkTokens: 4,
  windowTokens: 8,
};
const BASE = { model: dir!, device: "cpu" as const, blockSize: 4 };

describeIfFound("HiSparse prefix caching: ref-small", "ref-small", dir, () => {
  let cold: PrefixRunResult;
  before(async () => {
    cold = await runPrefixSequence(BASE);
  });

  // Pools sized so that C takes every never-used block and some of A's cached ones (the free
  // queue hands out never-used blocks first, then freed ones, least recently freed first).
  for (const [label, cfg, numGpuBlocks] of [
    ["auto", { mode: "auto" }, 102],
    ["on (host residency)", { mode: "on", minSparseTokens: 0 }, 242],
  ] as const)
    it(`${label}: B reuses the document's pages (device copies and host-only pages loaded back), greedy tokens equal the cold run`, async () => {
      const r = await runPrefixSequence({
        ...BASE,
        numGpuBlocksOverride: numGpuBlocks,
        enablePrefixCaching: true,
        extensions: { hisparse: resolveHiSparseConfig({ ...SPARSE, ...cfg }) },
      });
      assert.deepEqual(r.tokens, cold.tokens);
      // B's whole document (40 pages of 4 tokens) came from the cache, C shares nothing.
      assert.deepEqual(r.cached, [0, 0, DOC.length]);
      const st = r.stats!;
      // C evicted the device copies of some of A's pages: B loaded them back from the host tier.
      const loaded = st.loadedPagesTotal ?? 0;
      assert.ok(loaded > 0 && loaded < DOC.length / 4, JSON.stringify(st));
      if (cfg.mode === "on") assert.ok(st.spilledPagesTotal > 0);
      assert.equal(r.numPreemptions, 0);
    });
});
