/**
 * `--kv-cache-dtype fp8` on CUDA against the CPU oracle (which emulates e4m3 exactly,
 * src/backends/fp8.ts): from the same bf16 inputs, reshapeAndCache stores the same e4m3 values
 * in both backends (read back exactly), and paged attention (decode and prefill) over the fp8
 * caches agrees with the CPU within the bf16 tolerance and equals, bit for bit, CUDA attention
 * over a bf16 cache holding the dequantised values. With `--calculate-kv-scales` (scales from the
 * first batch, hsKvAmax on CUDA) both backends compute the same scales, store the same codes and
 * attend within the bf16 tolerance. Skipped without a GPU.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { AttentionMetadata, Backend, DType, QkvLayout, Tensor } from "../../src/backends/backend.js";
import { CpuBackend } from "../../src/backends/cpu/index.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import { assertClose, assertSame, BF16_TOL, gpuSkip, makeBackend, Rng, randBf16 } from "./helpers.js";

interface Step {
  queryLens: readonly number[];
  seqLens: readonly number[];
}

/** Metadata of one step on `be` (blocks: request r owns blocks blockIds[r]). */
function metadata(
  be: Backend,
  step: Step,
  blockIds: number[][],
  blockSize: number,
  maxBlocks: number,
): AttentionMetadata {
  const R = step.seqLens.length;
  const qsl = new Int32Array(R + 1);
  step.queryLens.forEach((q, r) => {
    qsl[r + 1] = qsl[r]! + q;
  });
  const T = qsl[R]!;
  const bt = new Int32Array(R * maxBlocks);
  const slots = new Int32Array(T);
  const positions = new Int32Array(T);
  let t = 0;
  step.seqLens.forEach((len, r) => {
    blockIds[r]!.forEach((b, j) => {
      bt[r * maxBlocks + j] = b;
    });
    for (let p = len - step.queryLens[r]!; p < len; p++, t++) {
      slots[t] = blockIds[r]![Math.floor(p / blockSize)]! * blockSize + (p % blockSize);
      positions[t] = p;
    }
  });
  const seqLens = Int32Array.from(step.seqLens);
  return {
    numReqs: R,
    numTokens: T,
    queryStartLoc: be.upload(qsl, [R + 1], "i32"),
    seqLens: be.upload(seqLens, [R], "i32"),
    blockTables: be.upload(bt, [R, maxBlocks], "i32"),
    slotMapping: be.upload(slots, [T], "i32"),
    maxQueryLen: Math.max(...step.queryLens),
    maxSeqLen: Math.max(...step.seqLens),
    host: {
      queryStartLoc: qsl,
      seqLens,
      blockTables: bt,
      maxBlocksPerReq: maxBlocks,
      slotMapping: slots,
      positions,
    },
  };
}

describe("fp8 KV cache: CUDA vs the CPU oracle", { skip: gpuSkip() }, () => {
  let gpu: CudaBackend;
  let cpu: CpuBackend;
  before(() => {
    gpu = makeBackend();
    cpu = new CpuBackend({ numThreads: 2 });
  });
  after(() => {
    gpu?.dispose();
    cpu?.dispose();
  });

  /**
   * Writes every token's K/V (history as a prefill, then the step) into a fresh cache of `dtype`
   * and attends with the step's tokens; `replaceCache` (values) overwrites the cache before the
   * attention. Returns the cache as read back and the output.
   */
  function run(
    be: Backend,
    dtype: DType,
    actDtype: DType,
    layout: QkvLayout,
    blockSize: number,
    step: Step,
    seed: number,
    replaceCache?: Float32Array,
    calculateScales = false,
  ) {
    const rng = new Rng(seed);
    const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
    const W = (Hq + 2 * Hkv) * D;
    const blocksPer = step.seqLens.map((l) => Math.ceil(l / blockSize));
    const numBlocks = blocksPer.reduce((a, b) => a + b, 0) + 3;
    const order = rng.permutation(numBlocks);
    let next = 0;
    const blockIds = blocksPer.map((n) => Array.from({ length: n }, () => order[next++]!));
    const maxBlocks = Math.max(...blocksPer);
    const cache = be.allocateKvCache({
      numLayers: 1,
      numBlocks,
      blockSize,
      numKvHeads: Hkv,
      headDim: D,
      dtype,
      calculateScales,
    })[0]!;
    // History (every position before the step's queries) as one prefill write.
    const hist: Step = {
      queryLens: step.seqLens.map((l, r) => l - step.queryLens[r]!),
      seqLens: step.seqLens.map((l, r) => l - step.queryLens[r]!),
    };
    const T0 = hist.queryLens.reduce((a, b) => a + b, 0);
    const histRows = randBf16(rng, T0 * W, 3); // magnitudes up to ~3: normal and subnormal e4m3 both occur
    const stepMeta = metadata(be, step, blockIds, blockSize, maxBlocks);
    const stepRows = randBf16(rng, stepMeta.numTokens * W, 3);
    const tensors: Tensor[] = [
      stepMeta.queryStartLoc,
      stepMeta.seqLens,
      stepMeta.blockTables,
      stepMeta.slotMapping,
    ];
    if (T0 > 0) {
      const hm = metadata(be, hist, blockIds, blockSize, maxBlocks);
      be.reshapeAndCache(be.stage(histRows, [T0, W], actDtype), layout, cache, hm.slotMapping, blockSize);
      tensors.push(hm.queryStartLoc, hm.seqLens, hm.blockTables, hm.slotMapping);
    }
    const qkv = be.stage(stepRows, [stepMeta.numTokens, W], actDtype);
    be.reshapeAndCache(qkv, layout, cache, stepMeta.slotMapping, blockSize);
    if (replaceCache !== undefined) be.writeTensor(cache, replaceCache);
    const out = Float32Array.from(be.toHost(be.pagedAttention(qkv, layout, cache, stepMeta, blockSize)));
    const cacheHost = Float32Array.from(be.toHost(cache));
    const scales = { ...be.kvCacheScales?.(cache) };
    be.resetWorkspace();
    for (const t of [...tensors, cache]) be.free(t);
    return { out, cache: cacheHost, numBlocks, blockIds, scales };
  }

  for (const [name, layout, blockSize, step] of [
    [
      "decode, Llama-8B heads",
      { numHeads: 32, numKvHeads: 8, headDim: 128 },
      16,
      { queryLens: [1, 1, 1], seqLens: [700, 33, 1] },
    ],
    [
      "prefill + decodes, ref-base heads",
      { numHeads: 6, numKvHeads: 2, headDim: 64 },
      16,
      { queryLens: [40, 1, 9], seqLens: [40, 300, 77] },
    ],
  ] as const) {
    it(`${name}: same e4m3 values as the CPU; attention within bf16 tolerance`, () => {
      const g = run(gpu, "fp8", "bf16", layout, blockSize, step, 11);
      const c = run(cpu, "fp8", "f32", layout, blockSize, step, 11);
      // Slots no request owns stay 0 in both caches.
      assertSame(g.cache, c.cache, "fp8 cache values");
      assertClose(g.out, c.out, BF16_TOL, "attention over fp8 KV");
      const f = run(cpu, "f32", "f32", layout, blockSize, step, 11);
      const e = Math.max(...g.out.map((v, i) => Math.abs(v - f.out[i]!)));
      assert.ok(e > 0, "fp8 changes the result");
    });
  }

  for (const step of [
    { queryLens: [1, 1], seqLens: [257, 64] },
    { queryLens: [1, 1, 5], seqLens: [257, 64, 90] },
  ]) {
    it(`fp8 attention equals bf16 attention over the dequantised values, bit for bit (queries ${step.queryLens})`, () => {
      const layout = { numHeads: 8, numKvHeads: 2, headDim: 128 };
      const g = run(gpu, "fp8", "bf16", layout, 16, step, 12);
      const b = run(gpu, "bf16", "bf16", layout, 16, step, 12, g.cache);
      assertSame(b.out, g.out, "fp8 vs bf16-of-dequantised attention");
    });
  }

  it("--calculate-kv-scales: the first batch gives the same scales and codes on CUDA as on the CPU", () => {
    const layout = { numHeads: 6, numKvHeads: 2, headDim: 64 };
    const step = { queryLens: [40, 1, 9], seqLens: [40, 300, 77] };
    const g = run(gpu, "fp8", "bf16", layout, 16, step, 13, undefined, true);
    const c = run(cpu, "fp8", "f32", layout, 16, step, 13, undefined, true);
    assert.deepEqual(g.scales, c.scales, "amax / 200, amax / 100 of the same first batch");
    assert.ok(g.scales.kScale !== 1 && g.scales.pending === false);
    // toHost of an fp8 tensor gives the codes' values (scale 1): scale the K and V halves of each
    // block as the CPU stores them (e4m3 value * scale in f32).
    const half = 16 * layout.numKvHeads * layout.headDim;
    const scaled = g.cache.map((v, i) =>
      Math.fround(v * (Math.floor(i / half) % 2 === 0 ? g.scales.kScale! : g.scales.vScale!)),
    );
    assertSame(scaled, c.cache, "fp8 cache values at the calibrated scales");
    assertClose(g.out, c.out, BF16_TOL, "attention over calibrated fp8 KV");
  });
});
