/**
 * Sparse paged attention: with every page selected in order it is dense attention bit for bit
 * (the same kernel body), including after the pages went through the host tier and the hot
 * buffer; with a subset it is exact attention over the selected tokens.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { DensePagedAttention } from "../../../../src/attention/backend.js";
import {
  HISPARSE_STEP_META,
  HiSparseAttention,
  type HiSparseStepMeta,
} from "../../../../src/attention/sparse/hisparse_attention.js";
import { LruHotBufferResolver } from "../../../../src/attention/sparse/hot_buffer.js";
import { QuestSelector } from "../../../../src/attention/sparse/quest.js";
import type { PerHeadBlockTables, QkvLayout, Tensor } from "../../../../src/backends/backend.js";
import { CpuBackend } from "../../../../src/backends/cpu/index.js";
import { roundToE4m3 } from "../../../../src/backends/fp8.js";
import { newExtensionData } from "../../../../src/core/extension_data.js";
import { CpuHostKvCache } from "../../../../src/worker/hisparse/host_kv_cache.js";
import {
  buildMetadata,
  makeRand,
  naiveAttention,
  randF32,
  type StepRequest,
} from "../../backends/cpu/helpers.js";
import { sparseBatch } from "./helpers.js";

const single = new CpuBackend({ numThreads: 1 });
const threaded = new CpuBackend({ numThreads: 2, chunkMacs: 1 });
after(() => {
  single.dispose();
  threaded.dispose();
});

const layout: QkvLayout = { numHeads: 4, numKvHeads: 2, headDim: 8 };
const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
const W = (Hq + 2 * Hkv) * D;
const BS = 4;
const NUM_BLOCKS = 24;

/** A cache filled with random K/V, and per-head tables built from per-request rows. */
function setup(b: CpuBackend, seed: number) {
  const kv = b.allocateKvCache({
    numLayers: 1,
    numBlocks: NUM_BLOCKS,
    blockSize: BS,
    numKvHeads: Hkv,
    headDim: D,
    dtype: "f32",
  })[0]!;
  b.writeTensor(kv, randF32(makeRand(seed), NUM_BLOCKS * 2 * BS * Hkv * D));
  return kv;
}

function perHead(b: CpuBackend, rows: number[][][], seqLens: number[][]): PerHeadBlockTables {
  const R = rows.length;
  const maxBlocks = Math.max(...rows.flat().map((r) => r.length));
  const bt = new Int32Array(R * Hkv * maxBlocks);
  for (const [r, heads] of rows.entries())
    for (const [g, row] of heads.entries()) bt.set(row, (r * Hkv + g) * maxBlocks);
  const sl = Int32Array.from(seqLens.flat());
  return {
    blockTables: b.stage(bt, [R, Hkv, maxBlocks], "i32"),
    seqLens: b.stage(sl, [R, Hkv], "i32"),
    maxBlocks,
    host: { blockTables: bt, seqLens: sl },
  };
}

describe("sparsePagedAttention", () => {
  // A chunked prefill (5 new tokens after 6), two decodes, blocks scattered over the cache.
  const reqs: StepRequest[] = [
    { numComputed: 6, numNew: 5, blockIds: [9, 3, 17] },
    { numComputed: 13, numNew: 1, blockIds: [4, 20, 1, 11] },
    { numComputed: 22, numNew: 1, blockIds: [0, 2, 5, 7, 8, 12] },
  ];
  for (const [name, b] of [
    ["single thread", single],
    ["two threads", threaded],
  ] as const) {
    it(`with each head's row equal to the request's row, returns pagedAttention's bits (${name})`, () => {
      b.resetWorkspace();
      const kv = setup(b, 1);
      const { meta } = buildMetadata(b, reqs, BS);
      const T = meta.numTokens;
      const qkv = b.stage(randF32(makeRand(2), T * W), [T, W], "f32");
      const dense = b.toHost(b.pagedAttention(qkv, layout, kv, meta, BS));
      const tables = perHead(
        b,
        reqs.map((r) => [r.blockIds, r.blockIds]),
        reqs.map((r) => [r.numComputed + r.numNew, r.numComputed + r.numNew]),
      );
      const sparse = b.toHost(b.sparsePagedAttention(qkv, layout, kv, meta, tables, BS));
      assert.deepEqual(sparse, dense);
    });
  }

  it("with a subset of pages per head, equals exact attention over the selected tokens", () => {
    const b = single;
    b.resetWorkspace();
    const kv = setup(b, 3);
    const kvHost = b.toHost(kv) as Float32Array;
    // One decode at position 13 (14 tokens in blocks 4, 20, 1, 11; the tail holds 2 tokens).
    // Head 0 attends pages 0, 2, 3 (10 tokens); head 1 pages 1, 3 (6 tokens).
    const { meta } = buildMetadata(b, [{ numComputed: 13, numNew: 1, blockIds: [4, 20, 1, 11] }], BS);
    const q = randF32(makeRand(4), W);
    const qkv = b.stage(q, [1, W], "f32");
    const heads = [
      [4, 1, 11],
      [20, 11],
    ];
    const tables = perHead(b, [heads], [[10, 6]]);
    const out = b.toHost(b.sparsePagedAttention(qkv, layout, kv, meta, tables, BS));
    for (let g = 0; g < Hkv; g++) {
      const L = tables.host.seqLens[g]!;
      // The selected tokens of head g, dense: [L, 1, D] (one kv head).
      const k = new Float32Array(L * D);
      const v = new Float32Array(L * D);
      for (let j = 0; j < L; j++) {
        const blk = heads[g]![Math.floor(j / BS)]!;
        const o = (blk * 2 * BS + (j % BS)) * Hkv * D + g * D;
        k.set(kvHost.subarray(o, o + D), j * D);
        v.set(kvHost.subarray(o + BS * Hkv * D, o + BS * Hkv * D + D), j * D);
      }
      const qg = q.subarray(2 * g * D, (2 * g + 2) * D);
      const ref = naiveAttention(qg, k, v, 1, L, 2, 1, D);
      for (let i = 0; i < 2 * D; i++)
        assert.ok(Math.abs(out[2 * g * D + i]! - ref[i]!) < 1e-6, `head ${g} element ${i}`);
    }
  });
});

/**
 * One request decoding its token 21 (22 tokens, 6 pages in blocks 0-5, host blocks 10-15):
 * pages 1-4 are mirrored to the host tier (f32, or fp8 codes), then spilled (their device
 * blocks overwritten), and recalled into hot blocks 20-23 by a selection of every page. Returns
 * the sparse output, dense attention over `reference` (the cache as the recall should rebuild
 * it), the resolver's counters and the tier.
 */
function recall(fp8: boolean) {
  const b = single;
  b.resetWorkspace();
  const view = (t: Tensor) => b.hostView(t) as Float32Array;
  const blockIds = [0, 1, 2, 3, 4, 5];
  const hostBlockIds = [10, 11, 12, 13, 14, 15];
  const kv = setup(b, 5);
  const reference = b.allocateKvCache({
    numLayers: 1,
    numBlocks: NUM_BLOCKS,
    blockSize: BS,
    numKvHeads: Hkv,
    headDim: D,
    dtype: "f32",
  })[0]!;
  const expected = Float32Array.from(b.toHost(kv) as Float32Array);
  const page = 2 * BS * Hkv * D;
  // fp8 host pages: recalled pages read what an fp8 cache (scale 1) reads, e4m3-rounded.
  if (fp8) roundToE4m3(expected, 1 * page, 5 * page, 1);
  b.writeTensor(reference, expected);
  const { meta } = buildMetadata(b, [{ numComputed: 21, numNew: 1, blockIds }], BS);
  const qkv = b.stage(randF32(makeRand(6), W), [1, W], "f32");
  const dense = b.toHost(new DensePagedAttention(b, layout, BS).forward(0, qkv, reference, meta));
  const tier = new CpuHostKvCache(
    {
      numSparseLayers: 1,
      numHostBlocks: 16,
      blockSize: BS,
      numKvHeads: Hkv,
      headDim: D,
      fp8: fp8 ? {} : false,
    },
    view,
  );
  tier.mirror(0, kv, [1, 2, 3, 4], [11, 12, 13, 14]);
  (b.hostView(kv) as Float32Array).fill(7, 1 * page, 5 * page);
  const selector = new QuestSelector(
    {
      layout,
      blockSize: BS,
      numSparseLayers: 1,
      numHostBlocks: 16,
      topk: 32,
      sinkTokens: 4,
      windowTokens: 4,
    },
    view,
  );
  const resolver = new LruHotBufferResolver(tier, BS, Hkv, 1);
  const attention = new HiSparseAttention(b, layout, BS, { sparseIndex: [0] }, selector, resolver);
  const batch = sparseBatch([
    {
      id: "A",
      batchIdx: 0,
      tokenIdx: 0,
      numTokens: 22,
      hostBlockIds,
      blockIds: [0, -1, -1, -1, -1, 5],
      hotBlockIds: [20, 21, 22, 23],
    },
  ]);
  const hostSlotMapping = Int32Array.from([15 * BS + 1]);
  const stepMeta: HiSparseStepMeta = { hostSlotMapping, denseMeta: meta, batch, streamed: null };
  const out = b.toHost(
    attention.forward(0, qkv, kv, {
      ...meta,
      extensions: newExtensionData().set(HISPARSE_STEP_META, stepMeta),
    }),
  );
  return { out, dense, counters: resolver.takeCounters(), tier };
}

describe("HiSparseAttention", () => {
  it("pages recalled from the host tier into hot blocks give the dense output bit for bit", () => {
    const { out, dense, counters, tier } = recall(false);
    assert.deepEqual(out, dense);
    assert.deepEqual(counters, { hits: 0, misses: 8, hostToDeviceBytes: 8 * tier.sliceBytes });
    assert.equal(tier.sliceBytes, 2 * BS * D * 4);
  });

  it("fp8 host pages: recalled pages are the e4m3-rounded K/V (dense attention over them, bit for bit), a quarter of f32's bytes", () => {
    const { out, dense, counters, tier } = recall(true);
    assert.deepEqual(out, dense);
    assert.deepEqual(counters, { hits: 0, misses: 8, hostToDeviceBytes: 8 * 2 * BS * D });
    assert.equal(tier.sliceBytes, 2 * BS * D);
    // The rounding matters here: the output differs from attention over the exact K/V.
    assert.notDeepEqual(out, recall(false).out);
  });
});
