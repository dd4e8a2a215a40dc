/**
 * Prefix caching through both HiSparse tiers on the real ref-small model (CPU backend): a second
 * request sharing a long prefix, whose pages are partly on the device and partly only in the
 * host tier (their device copies evicted by a third request), must give the cold run's greedy
 * tokens, in `auto` and `on` (host residency: the first request's pages spilled while it ran).
 * The host-only pages are loaded back for the prefill (`loadedPagesTotal`), the shared prefix is
 * not recomputed (the scheduler's prefix hits), and every pool is whole at the end.
 * Block size 4 and small pools force the evictions; topk covers the context.
 */
import assert from "node:assert/strict";
import { before, it } from "node:test";
import { type HiSparseConfig, resolveHiSparseConfig } from "../../../src/config/hisparse_config.js";
import { LLM, type LLMOptions } from "../../../src/engine/llm.js";
import { describeIfFound, refModelDir } from "../../helpers/reference.js";

const dir = refModelDir("ref-small");
const PARAMS = { temperature: 0, maxTokens: 12, ignoreEos: true };
/** Token ids 100.. of a fixed pseudo-random walk (the same prompts in every run). */
function ids(seed: number, n: number): number[] {
  const out: number[] = [];
  let x = seed;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    out.push(100 + (x % 8000));
  }
  return out;
}
/** A 160-token shared document, two questions, and an unrelated 260-token filler. */
const DOC = ids(7, 160);
const A = [...DOC, ...ids(11, 9)];
const B = [...DOC, ...ids(13, 7)];
const C = ids(17, 260);

const SPARSE: Partial<HiSparseConfig> = {
  topk: 192,
  deviceBufferTokens: 192,
  sinkTokens: 4,
  windowTokens: 8,
};

/** Runs A, then C (evicts part of A's device copies), then B, one after another. */
async function runSequence(opts: LLMOptions) {
  const llm = new LLM({ model: dir!, device: "cpu", maxModelLen: 384, blockSize: 4, ...opts });
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
    const kv = engine.scheduler.kvCacheManager;
    assert.equal(kv.numFreeBlocks, engine.info.numGpuBlocks, "device pool freed");
    if (stats !== undefined) assert.equal(stats.hostPoolUsedBlocks, 0, "host pool freed");
    return { tokens, cached, stats, numPreemptions: engine.scheduler.makeStats().numPreemptions };
  } finally {
    await llm.shutdown();
  }
}

describeIfFound("HiSparse prefix caching: ref-small", "ref-small", dir, () => {
  let cold: Awaited<ReturnType<typeof runSequence>>;
  before(async () => {
    cold = await runSequence({});
  });

  // Pools sized so that C takes every never-used block and some of A's cached ones (the free
  // queue hands out never-used blocks first, then freed ones, least recently freed first).
  for (const [label, cfg, numGpuBlocks] of [
    ["auto", { mode: "auto" }, 96],
    ["on (host residency)", { mode: "on", minSparseTokens: 0 }, 196],
  ] as const)
    it(`${label}: B reuses the document's pages (device copies and host-only pages loaded back), greedy tokens equal the cold run`, async () => {
      const r = await runSequence({
        numGpuBlocksOverride: numGpuBlocks,
        enablePrefixCaching: true,
        extensions: { hisparse: resolveHiSparseConfig({ ...SPARSE, ...cfg }) },
      });
      assert.deepEqual(r.tokens, cold.tokens);
      // B's whole document (40 pages of 4 tokens) came from the cache, C shares nothing.
      assert.deepEqual(r.cached, [0, 0, 160]);
      const st = r.stats!;
      // C evicted the device copies of A's last pages: B loaded them back from the host tier.
      assert.ok((st.loadedPagesTotal ?? 0) > 0 && (st.loadedPagesTotal ?? 0) < 40, JSON.stringify(st));
      if (cfg.mode === "on") assert.ok(st.spilledPagesTotal > 0);
      assert.equal(r.numPreemptions, 0);
    });
});
