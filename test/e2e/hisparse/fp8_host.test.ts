/**
 * fp8 host pages (`host_kv_cache_dtype` fp8, issue 18) on the reference models, CPU backend: the
 * host tier holds e4m3 codes whatever the device pool's dtype. `auto` without pressure never
 * reads the host tier, so it stays exact; `on` (host residency, topk >= context) recalls every
 * spilled page through the hot buffer, dequantised: the copies move a quarter of f32's bytes
 * per miss (half of bf16's on CUDA), the selection and the hits and misses are those of f32 host
 * pages (digests stay on the device, exact), and the tokens stay close to the dense engine's.
 * Geometry as exactness.test.ts (block size 4, up to 16 pages a request).
 */
import assert from "node:assert/strict";
import { before, it } from "node:test";
import { type HiSparseConfig, resolveHiSparseConfig } from "../../../src/config/hisparse_config.js";
import type { LLMOptions } from "../../../src/engine/llm.js";
import { type HiSparseRunResult, runPrompts } from "../../helpers/hisparse_run.js";
import { describeIfFound, loadFixture, type RefModel, refModelDir } from "../../helpers/reference.js";

const MAX_TOKENS = 48;
/**
 * Least share of greedy tokens equal to the dense engine's with fp8 host pages. Measured on
 * 2026-12-02: 100% (5 prompts x 48 tokens, ref-small); the bound leaves room for rounding to
 * flip a near-tie after a model or kernel change without hiding a broken dequantisation (which
 * gives noise).
 */
const AGREEMENT_MIN = 0.9;
const PARAMS = { temperature: 0, maxTokens: MAX_TOKENS, ignoreEos: true };
const SPARSE: Partial<HiSparseConfig> = { topk: 64, deviceBufferTokens: 64, sinkTokens: 4, windowTokens: 8 };
/** ref-small's head dim (../shared/models/README.md: 2 KV heads of 64). */
const HEAD_DIM = 64;
/** Bytes of one (page, layer, kv head) slice of an fp8 host page: 2 (K, V) x blockSize 4 x headDim x 1 B. */
const FP8_SLICE_BYTES = 2 * 4 * HEAD_DIM;

function run(dir: string, prompts: number[][], opts: Partial<LLMOptions>): Promise<HiSparseRunResult> {
  return runPrompts({ model: dir, device: "cpu", maxModelLen: 128, blockSize: 4, ...opts }, prompts, PARAMS);
}

const hisparse = (c: Partial<HiSparseConfig>) => ({ hisparse: resolveHiSparseConfig({ ...SPARSE, ...c }) });

/** Share of output tokens equal to the reference's, position by position. */
function agreement(a: number[][], b: number[][]): number {
  let same = 0;
  let all = 0;
  for (const [i, row] of a.entries())
    for (const [j, t] of row.entries()) {
      same += t === b[i]![j] ? 1 : 0;
      all++;
    }
  return same / all;
}

for (const name of ["ref-small"] as RefModel[]) {
  const dir = refModelDir(name);
  describeIfFound(`HiSparse fp8 host pages: ${name}`, name, dir, () => {
    const prompts = loadFixture(name).map((c) => c.input_ids);
    let dense: HiSparseRunResult;
    let f32Host: HiSparseRunResult;
    before(async () => {
      dense = await run(dir!, prompts, {});
      f32Host = await run(dir!, prompts, {
        numGpuBlocksOverride: 256,
        extensions: hisparse({ mode: "on", minSparseTokens: 0 }),
      });
    });

    it("auto without pressure, fp8 host pages: the dense path, greedy tokens equal off; mirrors move 1 byte an element", async () => {
      const r = await run(dir!, prompts, {
        numGpuBlocksOverride: 256,
        extensions: hisparse({ mode: "auto", hostKvCacheDtype: "fp8" }),
      });
      assert.deepEqual(r.tokens, dense.tokens);
      const st = r.stats!;
      assert.deepEqual([st.spilledPagesTotal, st.missesTotal, st.hostToDeviceBytesTotal], [0, 0, 0]);
      assert.ok(st.mirroredPagesTotal > 0 && st.deviceToHostBytesTotal > 0);
    });

    it("on, topk >= context, fp8 host pages: the same hits and misses as f32 host pages, a quarter of the bytes, tokens close to off", async () => {
      const r = await run(dir!, prompts, {
        numGpuBlocksOverride: 256,
        extensions: hisparse({ mode: "on", minSparseTokens: 0, hostKvCacheDtype: "fp8" }),
      });
      const [st, ref] = [r.stats!, f32Host.stats!];
      assert.ok(st.spilledPagesTotal > 0 && st.missesTotal > 0, JSON.stringify(st));
      // The recall path itself is exact-f32 with f32 host pages (exactness.test.ts).
      assert.deepEqual(f32Host.tokens, dense.tokens);
      // topk >= context selects every page whatever the scores, so the LRU sees the same rounds.
      assert.deepEqual([st.hitsTotal, st.missesTotal], [ref.hitsTotal, ref.missesTotal]);
      assert.equal(st.hostToDeviceBytesTotal, st.missesTotal * FP8_SLICE_BYTES);
      assert.equal(ref.hostToDeviceBytesTotal, ref.missesTotal * 4 * FP8_SLICE_BYTES);
      const share = agreement(r.tokens, dense.tokens);
      assert.ok(
        share >= AGREEMENT_MIN,
        `fp8 host pages: ${(share * 100).toFixed(1)}% of greedy tokens equal off's`,
      );
    });
  });
}
