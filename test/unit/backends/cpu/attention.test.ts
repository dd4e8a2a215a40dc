/**
 * reshapeAndCache slot arithmetic and pagedAttention against a naive dense causal attention, with
 * the KV scattered over non-contiguous blocks in random order, GQA, chunked prefill and several
 * requests of different lengths in one batch.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import type { QkvLayout, Tensor } from "../../../../src/backends/backend.js";
import { CpuBackend } from "../../../../src/backends/cpu/index.js";
import { PAD_SLOT_ID } from "../../../../src/core/ids.js";
import {
  assertClose,
  buildMetadata,
  makeRand,
  naiveAttention,
  randF32,
  type StepRequest,
  shuffle,
} from "./helpers.js";

const single = new CpuBackend({ numThreads: 1 });
const threaded = new CpuBackend({ numThreads: 2, chunkMacs: 1 });
after(() => {
  single.dispose();
  threaded.dispose();
});

describe("reshapeAndCache", () => {
  it("writes k and v of token t to block slot / blockSize at offset slot % blockSize, skipping PAD slots", () => {
    const layout: QkvLayout = { numHeads: 2, numKvHeads: 1, headDim: 2 };
    const W = 8; // q0 q0 q1 q1 k k v v
    const blockSize = 4;
    const kv = single.allocateKvCache({
      numLayers: 1,
      numBlocks: 3,
      blockSize,
      numKvHeads: 1,
      headDim: 2,
      dtype: "f32",
    })[0]!;
    // Token t's row: q = 0, k = (10t+1, 10t+2), v = (10t+3, 10t+4).
    const rows = new Float32Array(3 * W);
    for (let t = 0; t < 3; t++) rows.set([0, 0, 0, 0, 10 * t + 1, 10 * t + 2, 10 * t + 3, 10 * t + 4], t * W);
    // Slot 9 = block 2 offset 1; PAD; slot 3 = block 0 offset 3.
    const slots = Int32Array.from([9, PAD_SLOT_ID, 3]);
    single.reshapeAndCache(
      single.stage(rows, [3, W], "f32"),
      layout,
      kv,
      single.stage(slots, [3], "i32"),
      blockSize,
    );
    const c = single.toHost(kv);
    // Element index of (block b, kv k/v, offset o, dim d) in [3, 2, 4, 1, 2].
    const at = (b: number, which: number, o: number, d: number) =>
      c[((b * 2 + which) * blockSize + o) * 2 + d];
    assert.deepEqual([at(2, 0, 1, 0), at(2, 0, 1, 1), at(2, 1, 1, 0), at(2, 1, 1, 1)], [1, 2, 3, 4]);
    assert.deepEqual([at(0, 0, 3, 0), at(0, 0, 3, 1), at(0, 1, 3, 0), at(0, 1, 3, 1)], [21, 22, 23, 24]);
    // Exactly 8 non-zero values: token 1 (PAD) wrote nothing.
    assert.equal(Array.from(c).filter((v) => v !== 0).length, 8);
    assert.throws(
      () =>
        single.reshapeAndCache(
          single.stage(rows, [3, W], "f32"),
          layout,
          kv,
          single.stage(Int32Array.from([0, 12, 1]), [3], "i32"),
          blockSize,
        ),
      /slot 12 of token 1 is outside the cache's 12 slots/,
    );
    single.resetWorkspace();
  });
});

/** Per request of the test batch: its full K/V/Q history and this step's shape. */
interface ReqCase {
  seqLen: number;
  queryLen: number;
}

/**
 * Runs one attention step on `backend`: fills every request's history (seqLen tokens of random
 * K/V) into scattered blocks through reshapeAndCache, then attends with the last queryLen tokens
 * of each request as queries. Returns the output and the naive reference.
 */
function runCase(
  backend: CpuBackend,
  cases: readonly ReqCase[],
  layout: QkvLayout,
  blockSize: number,
  seed: number,
): { got: Float32Array; ref: number[] } {
  const rand = makeRand(seed);
  const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
  const W = (Hq + 2 * Hkv) * D;
  const blocksPer = cases.map((c) => Math.ceil(c.seqLen / blockSize));
  const numBlocks = blocksPer.reduce((a, b) => a + b, 0) + 3; // spare blocks stay unused
  const order = shuffle(
    rand,
    Array.from({ length: numBlocks }, (_, i) => i),
  );
  const starts = blocksPer.map((_, i) => blocksPer.slice(0, i).reduce((a, b) => a + b, 0));
  const reqs = cases.map((c, i) => ({
    c,
    blockIds: order.slice(starts[i]!, starts[i]! + blocksPer[i]!),
    qkv: randF32(rand, c.seqLen * W),
  }));
  const kv = backend.allocateKvCache({
    numLayers: 1,
    numBlocks,
    blockSize,
    numKvHeads: Hkv,
    headDim: D,
    dtype: "f32",
  })[0]!;
  // Step 1: cache the history before this step's queries (the "earlier steps").
  const history: StepRequest[] = reqs.map((r) => ({
    numComputed: 0,
    numNew: r.c.seqLen - r.c.queryLen,
    blockIds: r.blockIds,
  }));
  const histRows = reqs.flatMap((r) => [...r.qkv.subarray(0, (r.c.seqLen - r.c.queryLen) * W)]);
  const T0 = histRows.length / W;
  if (T0 > 0) {
    const h = buildMetadata(backend, history, blockSize);
    backend.reshapeAndCache(
      backend.stage(Float32Array.from(histRows), [T0, W], "f32"),
      layout,
      kv,
      h.meta.slotMapping,
      blockSize,
    );
  }
  // Step 2: this step's tokens of every request, in one batch.
  const step: StepRequest[] = reqs.map((r) => ({
    numComputed: r.c.seqLen - r.c.queryLen,
    numNew: r.c.queryLen,
    blockIds: r.blockIds,
  }));
  const rows = Float32Array.from(reqs.flatMap((r) => [...r.qkv.subarray((r.c.seqLen - r.c.queryLen) * W)]));
  const T = rows.length / W;
  const { meta } = buildMetadata(backend, step, blockSize);
  const qkv: Tensor = backend.stage(rows, [T, W], "f32");
  backend.reshapeAndCache(qkv, layout, kv, meta.slotMapping, blockSize);
  const got = backend.toHost(backend.pagedAttention(qkv, layout, kv, meta, blockSize)) as Float32Array;
  const ref: number[] = [];
  for (const r of reqs) {
    const L = r.c.seqLen;
    const q: number[] = [];
    const k: number[] = [];
    const v: number[] = [];
    for (let t = 0; t < L; t++) {
      const o = t * W;
      if (t >= L - r.c.queryLen) q.push(...r.qkv.subarray(o, o + Hq * D));
      k.push(...r.qkv.subarray(o + Hq * D, o + (Hq + Hkv) * D));
      v.push(...r.qkv.subarray(o + (Hq + Hkv) * D, o + W));
    }
    ref.push(...naiveAttention(q, k, v, r.c.queryLen, L, Hq, Hkv, D));
  }
  backend.free(kv);
  backend.resetWorkspace();
  return { got, ref };
}

describe("pagedAttention", () => {
  const gqa: QkvLayout = { numHeads: 4, numKvHeads: 2, headDim: 8 };

  it("prefill of one request (queries at positions 0..L-1) equals dense causal attention", () => {
    const { got, ref } = runCase(single, [{ seqLen: 11, queryLen: 11 }], gqa, 4, 1);
    assertClose(got, ref, 1e-5, 1e-6, "prefill");
  });

  it("decode of one request over 3 scattered blocks equals dense attention at the last position", () => {
    const { got, ref } = runCase(single, [{ seqLen: 10, queryLen: 1 }], gqa, 4, 2);
    assertClose(got, ref, 1e-5, 1e-6, "decode");
  });

  it("a batch mixing decode, a mid-sequence prefill chunk and a full prefill, with GQA 4:1 and odd headDim", () => {
    const layout: QkvLayout = { numHeads: 4, numKvHeads: 1, headDim: 5 };
    const cases = [
      { seqLen: 23, queryLen: 1 },
      { seqLen: 17, queryLen: 6 }, // chunk: queries at positions 11..16
      { seqLen: 3, queryLen: 3 },
      { seqLen: 32, queryLen: 9 },
    ];
    const { got, ref } = runCase(single, cases, layout, 8, 3);
    assertClose(got, ref, 1e-5, 1e-6, "mixed batch");
  });

  it("multi-head attention (no GQA) with headDim 64 and blockSize 16", () => {
    const layout: QkvLayout = { numHeads: 2, numKvHeads: 2, headDim: 64 };
    const { got, ref } = runCase(
      single,
      [
        { seqLen: 40, queryLen: 7 },
        { seqLen: 5, queryLen: 1 },
      ],
      layout,
      16,
      4,
    );
    assertClose(got, ref, 1e-5, 1e-6, "mha");
  });

  it("the threaded kernel returns the same bits as the single-threaded one", () => {
    const cases = [
      { seqLen: 37, queryLen: 37 },
      { seqLen: 20, queryLen: 1 },
      { seqLen: 50, queryLen: 13 },
    ];
    const a = runCase(single, cases, gqa, 4, 5);
    const b = runCase(threaded, cases, gqa, 4, 5);
    assert.deepEqual([...b.got], [...a.got]);
    assertClose(b.got, b.ref, 1e-5, 1e-6, "threaded vs naive");
  });

  it("throws on inconsistent metadata: a block id outside the cache", () => {
    const layout: QkvLayout = { numHeads: 1, numKvHeads: 1, headDim: 2 };
    const kv = single.allocateKvCache({
      numLayers: 1,
      numBlocks: 2,
      blockSize: 2,
      numKvHeads: 1,
      headDim: 2,
      dtype: "f32",
    })[0]!;
    const { meta } = buildMetadata(single, [{ numComputed: 2, numNew: 1, blockIds: [0, 5] }], 2);
    const qkv = single.stage(new Float32Array(6), [1, 6], "f32");
    assert.throws(
      () => single.pagedAttention(qkv, layout, kv, meta, 2),
      /request 0 block 1 is 5, outside \[0, 2\)/,
    );
    single.resetWorkspace();
  });
});
