/**
 * Backend.mla on the CPU backend against hand computations and naive formulas: the causal top-k
 * and its tie rule (the one the CUDA radix select follows), indexer logits over paged keys,
 * strided RoPE in both layouts, LayerNorm, paged row writes, and MLA attention: dense, over a
 * selection, expanded == absorbed, a full selection == dense bit for bit.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import type { AttentionMetadata, MlaDims, Tensor } from "../../../../src/backends/backend.js";
import { CpuBackend } from "../../../../src/backends/cpu/index.js";
import { mlaAttentionAbsorbedKernel } from "../../../../src/backends/cpu/kernels/mla.js";
import { buildCosSinCache, computeInvFreq } from "../../../../src/models/rope.js";
import { assertClose, buildMetadata, makeRand, maxAbsDiff, randF32, shuffle } from "./helpers.js";

const backend = new CpuBackend({ numThreads: 1 });
after(() => backend.dispose());
const mla = backend.mla;
const f32 = (t: Tensor) => backend.toHost(t) as Float32Array;
const i32 = (t: Tensor) => Array.from(backend.toHost(t) as Int32Array);
const NEG = Number.NEGATIVE_INFINITY;

describe("mla.topkIndices: causal top-k, larger first, ties to the lower position, ascending out", () => {
  const row = (vals: number[], width = 8): Tensor => {
    const a = new Float32Array(width).fill(NEG);
    a.set(vals);
    return backend.stage(a, [1, width], "f32");
  };
  const pos = (p: number) => backend.stage(Int32Array.from([p]), [1], "i32");

  it("picks the largest values; equal values go to the lower position", () => {
    const l = row([1, 3, 3, 2, 0, -1, 0, 3]);
    assert.deepEqual(i32(mla.topkIndices(l, pos(7), 3)), [1, 2, 7]);
    assert.deepEqual(i32(mla.topkIndices(l, pos(7), 2)), [1, 2], "ties at 3: positions 1 and 2 before 7");
    assert.deepEqual(i32(mla.topkIndices(l, pos(7), 4)), [1, 2, 3, 7]);
    assert.deepEqual(
      i32(mla.topkIndices(l, pos(7), 6)),
      [0, 1, 2, 3, 4, 7],
      "ties at 0: position 4 before 6",
    );
  });

  it("only positions <= the row's own are candidates; fewer than k: all of them, then -1", () => {
    const l = row([1, 3, 3, 2, 0, -1, 0, 9]);
    assert.deepEqual(i32(mla.topkIndices(l, pos(2), 4)), [0, 1, 2, -1]);
    assert.deepEqual(i32(mla.topkIndices(l, pos(6), 2)), [1, 2], "position 7's 9 is in the future");
  });

  it("NaN counts as -inf and -0 as +0, ties still to the lower position", () => {
    assert.deepEqual(i32(mla.topkIndices(row([Number.NaN, NEG, -1]), pos(2), 2)), [0, 2]);
    assert.deepEqual(i32(mla.topkIndices(row([0, -0, 0]), pos(2), 1)), [0]);
    assert.deepEqual(i32(mla.topkIndices(row([-0, 0, -0]), pos(2), 2)), [0, 1]);
  });
});

/** Two requests on shuffled 4-token pages: 7 cached + 5 new, and 10 cached + 1 decode token. */
function twoRequests(rand: () => number): {
  full: AttentionMetadata;
  step: AttentionMetadata;
  positions: Tensor;
  fullPositions: Tensor;
  lens: number[];
  qLens: number[];
  slotOf: (r: number, i: number) => number;
} {
  const bs = 4;
  const blocks = shuffle(
    rand,
    Array.from({ length: 8 }, (_, i) => i),
  );
  const tables = [blocks.slice(0, 3), blocks.slice(3, 6)];
  const lens = [12, 11];
  const qLens = [5, 1];
  const full = buildMetadata(
    backend,
    tables.map((b, r) => ({ numComputed: 0, numNew: lens[r]!, blockIds: b })),
    bs,
  );
  const step = buildMetadata(
    backend,
    tables.map((b, r) => ({ numComputed: lens[r]! - qLens[r]!, numNew: qLens[r]!, blockIds: b })),
    bs,
  );
  const slotOf = (r: number, i: number) => tables[r]![Math.floor(i / bs)]! * bs + (i % bs);
  return {
    full: full.meta,
    step: step.meta,
    positions: step.positions,
    fullPositions: full.positions,
    lens,
    qLens,
    slotOf,
  };
}

describe("mla.indexerLogits over paged keys", () => {
  it("equals sum_h w * Hi^-0.5 * relu(Di^-0.5 q.k) for past positions, -inf after", () => {
    const rand = makeRand(7);
    const [Hi, Di] = [3, 8];
    const s = twoRequests(rand);
    const cache = mla.allocatePagedRows(8, 4, Di, "f32");
    const keys = randF32(rand, 23 * Di);
    mla.writeRows(backend.stage(keys, [23, Di], "f32"), cache, 0, s.full.slotMapping);
    const T = 6;
    const q = randF32(rand, T * Hi * Di);
    const w = randF32(rand, T * Hi);
    const width = 16;
    const scales = { softmaxScale: Di ** -0.5, headWeightScale: Hi ** -0.5 };
    const out = f32(
      mla.indexerLogits(
        backend.stage(q, [T, Hi * Di], "f32"),
        backend.stage(w, [T, Hi], "f32"),
        cache,
        s.step,
        4,
        scales,
        width,
      ),
    );
    const rowOf = (r: number, i: number) => (r === 0 ? i : 12 + i); // rows of `keys`
    for (let t = 0; t < T; t++) {
      const r = t < 5 ? 0 : 1;
      const p = r === 0 ? 7 + t : 10;
      for (let i = 0; i < width; i++) {
        if (i > p) {
          assert.equal(out[t * width + i], NEG, `token ${t}, position ${i}`);
          continue;
        }
        let want = 0;
        for (let h = 0; h < Hi; h++) {
          let dot = 0;
          for (let e = 0; e < Di; e++) dot += q[(t * Hi + h) * Di + e]! * keys[rowOf(r, i) * Di + e]!;
          want += w[t * Hi + h]! * Hi ** -0.5 * Math.max(0, dot * Di ** -0.5);
        }
        assert.ok(
          Math.abs(out[t * width + i]! - want) < 1e-5,
          `token ${t}, position ${i}: ${out[t * width + i]} vs ${want}`,
        );
      }
    }
    assert.throws(
      () =>
        mla.indexerLogits(
          backend.stage(q, [T, Hi * Di], "f32"),
          backend.stage(w, [T, Hi], "f32"),
          cache,
          s.step,
          4,
          scales,
          11,
        ),
      /width 11 is below the step's longest context \(12\)/,
    );
  });
});

describe("mla.rotaryStrided, layerNorm, writeRows", () => {
  it("interleaved rotates pairs (2i, 2i+1), half-split pairs (i, i + R/2), only the named heads", () => {
    const R = 4;
    const cs = buildCosSinCache(computeInvFreq({ type: "default", theta: 10000 } as never, R), 8);
    const table = backend.upload(cs, [8, R], "f32");
    const x0 = Float32Array.from([9, 1, 2, 3, 4, 9, 5, 6, 7, 8]); // head h at 1 + 5h: [1,2,3,4], [5,6,7,8]
    const p = 3;
    const c = [cs[p * R]!, cs[p * R + 1]!];
    const s = [cs[p * R + 2]!, cs[p * R + 3]!];
    const rot = (a: number, b: number, i: number): [number, number] => [
      Math.fround(a * c[i]!) - Math.fround(b * s[i]!),
      Math.fround(b * c[i]!) + Math.fround(a * s[i]!),
    ];
    for (const interleaved of [true, false]) {
      const x = backend.stage(x0, [1, 10], "f32");
      mla.rotaryStrided(
        x,
        { offset: 1, stride: 5, count: 2 },
        backend.stage(Int32Array.from([p]), [1], "i32"),
        table,
        interleaved,
      );
      const want = Array.from(x0);
      for (const o of [1, 6]) {
        const [a, b] = interleaved ? [o, o + 1] : [o, o + 2];
        const [e, f] = interleaved ? [o + 2, o + 3] : [o + 1, o + 3];
        [want[a], want[b]] = rot(x0[a]!, x0[b]!, 0);
        [want[e], want[f]] = rot(x0[e]!, x0[f]!, 1);
      }
      assert.deepEqual(Array.from(f32(x)), Array.from(Float32Array.from(want)), `interleaved ${interleaved}`);
    }
  });

  it("layerNorm is torch's (biased variance, weight and bias)", () => {
    const x = backend.stage(Float32Array.from([1, 2, 3, 6]), [1, 4], "f32");
    const w = backend.upload(Float32Array.from([1, 2, 1, 1]), [4], "f32");
    const b = backend.upload(Float32Array.from([0, 0, 1, 0]), [4], "f32");
    const sd = Math.sqrt((4 + 1 + 0 + 9) / 4 + 1e-6);
    // mean 3, biased variance (4 + 1 + 0 + 9) / 4
    assertClose(f32(mla.layerNorm(x, w, b, 1e-6)), [-2 / sd, (2 * -1) / sd, 1, 3 / sd], 1e-6, 1e-7);
  });

  it("writeRows places each token's row at its slot and column, skipping padding", () => {
    const cache = mla.allocatePagedRows(2, 2, 3, "f32");
    const src = backend.stage(Float32Array.from([1, 2, 3, 4]), [2, 2], "f32");
    mla.writeRows(src, cache, 1, backend.stage(Int32Array.from([3, -1]), [2], "i32"));
    assert.deepEqual(Array.from(f32(cache)), [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2]);
    assert.throws(
      () => mla.writeRows(src, cache, 1, backend.stage(Int32Array.from([4, 0]), [2], "i32")),
      /slot 4/,
    );
  });
});

describe("mla.attention", () => {
  const dims: MlaDims = {
    numHeads: 2,
    qkNopeHeadDim: 4,
    qkRopeHeadDim: 2,
    vHeadDim: 3,
    kvLoraRank: 5,
    softmaxScale: 0.4,
  };
  const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd, kvLoraRank: C } = dims;
  const rand = makeRand(11);
  const s = twoRequests(rand);
  const T = 6;
  const latent = randF32(rand, 23 * (C + R));
  const cache = mla.allocatePagedRows(8, 4, C + R, "f32");
  mla.writeRows(backend.upload(latent, [23, C + R], "f32"), cache, 0, s.full.slotMapping);
  const kvB = backend.upload(randF32(rand, Hq * (N + Vd) * C), [Hq * (N + Vd), C], "f32");
  const q = backend.upload(randF32(rand, T * Hq * (N + R)), [T, Hq * (N + R)], "f32");
  const position = (t: number) => (t < 5 ? 7 + t : 10);
  const sel = (rows: number[][]) =>
    backend.upload(Int32Array.from(rows.flat()), [rows.length, rows[0]!.length], "i32");

  /** Naive expanded attention of token t over `list` in float64. */
  const naive = (t: number, list: number[]): number[] => {
    const r = t < 5 ? 0 : 1;
    const row = (i: number) => (r === 0 ? i : 12 + i);
    const W = backend.toHost(kvB) as Float32Array;
    const Q = backend.toHost(q) as Float32Array;
    const out: number[] = [];
    for (let h = 0; h < Hq; h++) {
      const k = (i: number, n: number) => {
        let a = 0;
        for (let c = 0; c < C; c++) a += W[(h * (N + Vd) + n) * C + c]! * latent[row(i) * (C + R) + c]!;
        return a;
      };
      const sc = list.map((i) => {
        let d = 0;
        for (let n = 0; n < N; n++) d += Q[t * Hq * (N + R) + h * (N + R) + n]! * Math.fround(k(i, n));
        for (let n = 0; n < R; n++)
          d += Q[t * Hq * (N + R) + h * (N + R) + N + n]! * latent[row(i) * (C + R) + C + n]!;
        return d * dims.softmaxScale;
      });
      const mx = Math.max(...sc);
      const p = sc.map((x) => Math.exp(x - mx));
      const sum = p.reduce((a, b) => a + b, 0);
      for (let v = 0; v < Vd; v++)
        out.push(list.reduce((a, i, j) => a + p[j]! * Math.fround(k(i, N + v)), 0) / sum);
    }
    return out;
  };

  it("dense: every causal position, as the naive formula", () => {
    const out = f32(mla.attention(q, cache, kvB, s.step, dims, 4, null));
    for (let t = 0; t < T; t++) {
      const got = Array.from(out.subarray(t * Hq * Vd, (t + 1) * Hq * Vd));
      assertClose(
        got,
        naive(
          t,
          Array.from({ length: position(t) + 1 }, (_, i) => i),
        ),
        1e-5,
        1e-6,
        `token ${t}`,
      );
    }
  });

  it("over a selection (with -1 padding) as the naive formula; a full selection is dense bit for bit", () => {
    const lists = [
      [0, 3, 7],
      [1, 8],
      [2, 4, 9],
      [0, 10],
      [5, 11],
      [3, 10],
    ];
    const out = f32(
      mla.attention(q, cache, kvB, s.step, dims, 4, sel(lists.map((l) => [...l, -1, -1].slice(0, 3)))),
    );
    for (let t = 0; t < T; t++)
      assertClose(
        Array.from(out.subarray(t * Hq * Vd, (t + 1) * Hq * Vd)),
        naive(t, lists[t]!),
        1e-5,
        1e-6,
        `token ${t}`,
      );
    const all = Array.from({ length: T }, (_, t) =>
      Array.from({ length: 12 }, (_, i) => (i <= position(t) ? i : -1)),
    );
    assert.deepEqual(
      Array.from(f32(mla.attention(q, cache, kvB, s.step, dims, 4, sel(all)))),
      Array.from(f32(mla.attention(q, cache, kvB, s.step, dims, 4, null))),
    );
  });

  it("the absorbed form (decode kernels) equals the expanded one", () => {
    const lists = [
      [0, 3, 7],
      [1, 8, -1],
      [2, 4, 9],
      [0, 10, -1],
      [5, 11, 6],
      [3, 10, 0],
    ];
    for (const topk of [null, lists]) {
      const expanded = f32(mla.attention(q, cache, kvB, s.step, dims, 4, topk === null ? null : sel(topk)));
      const absorbed = new Float32Array(T * Hq * Vd);
      mlaAttentionAbsorbedKernel(
        backend.toHost(q) as Float32Array,
        backend.toHost(cache) as Float32Array,
        backend.toHost(kvB) as Float32Array,
        absorbed,
        {
          queryStartLoc: backend.toHost(s.step.queryStartLoc) as Int32Array,
          seqLens: backend.toHost(s.step.seqLens) as Int32Array,
          blockTables: backend.toHost(s.step.blockTables) as Int32Array,
          maxBlocksPerReq: s.step.host.maxBlocksPerReq,
          numReqs: 2,
          blockSize: 4,
        },
        { Hq, N, R, Vd, C, scale: dims.softmaxScale },
        topk === null ? null : Int32Array.from(topk.flat()),
        3,
      );
      assert.ok(maxAbsDiff(absorbed, expanded) < 1e-5, `max diff ${maxAbsDiff(absorbed, expanded)}`);
    }
  });

  it("a selected future position is a programming error", () => {
    const bad = [[0], [1], [2], [3], [4], [11]];
    assert.throws(
      () => mla.attention(q, cache, kvB, s.step, dims, 4, sel(bad)),
      /token 5 at position 10 selects position 11/,
    );
  });
});
