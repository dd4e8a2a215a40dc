/**
 * HiSparse exactness on CUDA with the real reference models (GPU machine; issue 6's "the part-1
 * exactness tests pass on CUDA"): with `topk` covering the whole context, sparse decoding attends
 * over every page (resolved through the hot buffer and the pinned host tier) and must return the
 * dense CUDA engine's greedy tokens exactly; `auto` without pressure, and `on` with residency
 * `hybrid` without pressure (sparse over resident pages), must copy nothing to the device; decode steps replayed from CUDA graphs must equal eager ones. Block size 8 (the CUDA
 * attention kernels take powers of two >= 8) gives each request up to 8 pages, so spills,
 * hot-buffer hits and misses occur. ref-base is skipped unless present ($HISPARSE_MODELS or
 * ../shared/models; the lead carries it in a second call).
 */
import assert from "node:assert/strict";
import { before, describe, it } from "node:test";
import { loadAddon } from "../../src/backends/cuda/addon.js";
import { type HiSparseConfig, resolveHiSparseConfig } from "../../src/config/hisparse_config.js";
import type { LLMOptions } from "../../src/engine/llm.js";
import { type HiSparseRunResult, runPrompts } from "../helpers/hisparse_run.js";
import { loadFixture, type RefModel, refModelDir } from "../helpers/reference.js";
import { gpuSkip } from "./helpers.js";

/** Prompts of at most 13 tokens + 48 outputs: 61 tokens, within topk = 64. */
const MAX_TOKENS = 48;
const PARAMS = { temperature: 0, maxTokens: MAX_TOKENS, ignoreEos: true };
const BLOCK = 8;
/** Sinks = page 0, window = the last 2 pages, topk = every page of the longest context. */
const SPARSE: Partial<HiSparseConfig> = { topk: 64, deviceBufferTokens: 64, sinkTokens: 8, windowTokens: 16 };
/** A device pool too small for the five requests at once (requests are preempted; measured on CPU). */
const PRESSURE_BLOCKS = 30;

function skip(name: RefModel): string | false {
  const g = gpuSkip();
  if (g !== false) return g;
  if (!loadAddon().buildInfo.hasHiSparse) return "the addon was built without the HiSparse kernels";
  return refModelDir(name) === null ? `${name} not found` : false;
}

/** Generates the fixture prompts in one batch on CUDA with the given engine options. */
function run(dir: string, prompts: number[][], opts: Partial<LLMOptions>): Promise<HiSparseRunResult> {
  const base: LLMOptions = {
    model: dir,
    device: "cuda",
    maxModelLen: 128,
    blockSize: BLOCK,
    maxNumSeqs: 8,
    gpuMemoryUtilization: 0.5,
  };
  return runPrompts({ ...base, ...opts }, prompts, PARAMS);
}

const hisparse = (c: Partial<HiSparseConfig>) => ({ hisparse: resolveHiSparseConfig({ ...SPARSE, ...c }) });

for (const name of ["ref-small", "ref-base"] as RefModel[]) {
  describe(`HiSparse exactness on CUDA: ${name}`, { skip: skip(name) }, () => {
    const dir = refModelDir(name)!;
    const prompts = loadFixture(name).map((c) => c.input_ids);
    let dense: HiSparseRunResult;
    before(async () => {
      dense = await run(dir, prompts, { numGpuBlocksOverride: 256 });
    });

    it("on, topk >= context: every request goes host-resident after prefill, greedy tokens equal off", async () => {
      const r = await run(dir, prompts, {
        numGpuBlocksOverride: 256,
        extensions: hisparse({ mode: "on", minSparseTokens: 0 }),
      });
      assert.deepEqual(r.tokens, dense.tokens);
      const st = r.stats!;
      assert.ok(st.spilledPagesTotal > 0 && st.missesTotal > 0 && st.hitsTotal > 0, JSON.stringify(st));
      assert.ok(st.hostToDeviceBytesTotal > 0);
    });

    it("on, topk >= context, fp8 host pages (host_kv_cache_dtype fp8): the same hits and misses as bf16 pages, half the bytes per miss, tokens close to off", async () => {
      const opts = (hostKvCacheDtype: "auto" | "fp8") => ({
        numGpuBlocksOverride: 256,
        extensions: hisparse({ mode: "on", minSparseTokens: 0, hostKvCacheDtype }),
      });
      const [bf16, fp8] = [await run(dir, prompts, opts("auto")), await run(dir, prompts, opts("fp8"))];
      const [b, f] = [bf16.stats!, fp8.stats!];
      // topk >= context selects every page, so the LRU rounds are the same whatever the values.
      assert.deepEqual([f.hitsTotal, f.missesTotal], [b.hitsTotal, b.missesTotal]);
      assert.ok(f.missesTotal > 0);
      assert.equal(
        2 * f.hostToDeviceBytesTotal,
        b.hostToDeviceBytesTotal,
        "half the host-link bytes per miss",
      );
      let same = 0;
      fp8.tokens.forEach((row, i) => {
        for (const [j, t] of row.entries()) same += t === dense.tokens[i]![j] ? 1 : 0;
      });
      const share = same / (prompts.length * MAX_TOKENS);
      console.log(`# fp8 host pages (${name}): ${(share * 100).toFixed(1)}% of greedy tokens equal off's`);
      // ref-small on CPU: 100% (test/e2e/hisparse/fp8_host.test.ts); rounding may flip a near-tie.
      assert.ok(share >= 0.9, `${(share * 100).toFixed(1)}% of greedy tokens equal off's`);
    });

    it("on with --enforce-eager equals on with CUDA graphs (same tokens, same hits and misses)", async () => {
      const opts = { numGpuBlocksOverride: 256, extensions: hisparse({ mode: "on", minSparseTokens: 0 }) };
      const graphs = await run(dir, prompts, opts);
      const eager = await run(dir, prompts, { ...opts, enforceEager: true });
      assert.deepEqual(eager.tokens, graphs.tokens);
      assert.deepEqual(
        [eager.stats!.hitsTotal, eager.stats!.missesTotal],
        [graphs.stats!.hitsTotal, graphs.stats!.missesTotal],
      );
    });

    it("on, residency hybrid, topk >= context: sparse decoding over resident pages (no hot buffer), greedy tokens equal off, nothing copied", async () => {
      const r = await run(dir, prompts, {
        numGpuBlocksOverride: 256,
        extensions: hisparse({ mode: "on", residency: "hybrid", minSparseTokens: 0 }),
      });
      assert.deepEqual(r.tokens, dense.tokens);
      const st = r.stats!;
      assert.ok(st.sparseDecodesTotal >= prompts.length * (MAX_TOKENS - 1), JSON.stringify(st));
      assert.deepEqual(
        [st.spilledPagesTotal, st.hitsTotal, st.missesTotal, st.hostToDeviceBytesTotal],
        [0, 0, 0, 0],
      );
    });

    for (const [label, cfg] of [
      ["on, residency hybrid", { mode: "on", residency: "hybrid", minSparseTokens: 0 }],
      ["auto", { mode: "auto" }],
    ] as const)
      it(`${label} under forced pressure, topk >= context: no spill can free a block, so requests are preempted as with off; greedy tokens equal off`, async () => {
        // The hot buffer (64 tokens) holds a whole request: a spill would free no block once its
        // hot buffer is taken, so the policy spills nothing (HybridPolicy; on CPU with this
        // configuration: 0 pages spilled, 1 preemption). Spills and recalls are exercised by `on`.
        const r = await run(dir, prompts, {
          numGpuBlocksOverride: PRESSURE_BLOCKS,
          extensions: hisparse(cfg),
        });
        assert.deepEqual(r.tokens, dense.tokens);
        const st = r.stats!;
        assert.deepEqual([st.spilledPagesTotal, st.missesTotal], [0, 0], JSON.stringify(st));
        assert.ok(r.numPreemptions > 0);
      });

    it("on, residency hybrid, topk < context: pages read in place or recalled through the hot buffer give the same tokens", async () => {
      // topk 32 = 4 pages (sink page 0, window page, 2 chosen), hot buffer 4 blocks: requests of up
      // to 8 pages spill under PRESSURE_BLOCKS (on the CPU engine: 26 pages spilled, 64 misses,
      // no preemption), and every decode step attends sparsely in both runs.
      const cfg = {
        topk: 32,
        deviceBufferTokens: 32,
        sinkTokens: 8,
        windowTokens: 8,
        mode: "on",
        residency: "hybrid",
        minSparseTokens: 0,
      } as const;
      const roomy = await run(dir, prompts, { numGpuBlocksOverride: 256, extensions: hisparse(cfg) });
      const tight = await run(dir, prompts, {
        numGpuBlocksOverride: PRESSURE_BLOCKS,
        extensions: hisparse(cfg),
      });
      assert.equal(tight.numPreemptions, 0);
      assert.deepEqual(tight.tokens, roomy.tokens);
      const [r, t] = [roomy.stats!, tight.stats!];
      assert.deepEqual([r.spilledPagesTotal, r.missesTotal], [0, 0]);
      assert.ok(t.spilledPagesTotal > 0 && t.missesTotal > 0, JSON.stringify(t));
    });

    it("auto without pressure runs the dense path: no spill, no hit, no miss, no host-to-device byte", async () => {
      const r = await run(dir, prompts, {
        numGpuBlocksOverride: 256,
        extensions: hisparse({ mode: "auto" }),
      });
      assert.deepEqual(r.tokens, dense.tokens);
      const st = r.stats!;
      assert.deepEqual(
        [st.spilledPagesTotal, st.hitsTotal, st.missesTotal, st.hostToDeviceBytesTotal, r.numPreemptions],
        [0, 0, 0, 0, 0],
      );
      assert.ok(st.mirroredPagesTotal > 0 && st.deviceToHostBytesTotal > 0);
    });
  });
}
