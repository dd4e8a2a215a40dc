/**
 * Quest page digests, scores and selection (arXiv 2406.10774): scores equal the formula computed
 * by brute force and bound every key's logit from above, with exact (bf16) digests and with fp8
 * ones rounded outward; selection keeps sinks, the window and pinned pages, then the
 * best-scoring pages, per GQA group.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { QuestSelector, questScore } from "../../../../src/attention/sparse/quest.js";
import type { QkvLayout, Tensor } from "../../../../src/backends/backend.js";
import { CpuBackend } from "../../../../src/backends/cpu/index.js";
import { E4M3_VALUES, floatToE4m3Down, floatToE4m3Up } from "../../../../src/backends/fp8.js";
import type { DigestDtype } from "../../../../src/config/hisparse_config.js";
import { makeRand, randF32 } from "../../backends/cpu/helpers.js";
import { selected, sparseBatch } from "./helpers.js";

const backend = new CpuBackend({ numThreads: 1 });
after(() => backend.dispose());
const view = (t: Tensor) => backend.hostView(t) as Float32Array;

/** What a digest stores for an exact min (down) / max (up): the value, or its e4m3 rounding outward. */
const rounding = (dtype: DigestDtype) => ({
  down: (x: number) => (dtype === "fp8" ? E4M3_VALUES[floatToE4m3Down(x)]! : x),
  up: (x: number) => (dtype === "fp8" ? E4M3_VALUES[floatToE4m3Up(x)]! : x),
});

for (const digestDtype of ["bf16", "fp8"] as const)
  describe(`Quest digests and scores (${digestDtype} digests)`, () => {
    // 4 q heads in 2 GQA groups, head dim 8, pages of 4 tokens; 3 pages of 4 tokens in host
    // blocks 5, 2, 7. bf16 digests hold the exact min / max, fp8 ones the e4m3 value below the
    // min and above the max.
    const { down, up } = rounding(digestDtype);
    const layout: QkvLayout = { numHeads: 4, numKvHeads: 2, headDim: 8 };
    const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
    const W = (Hq + 2 * Hkv) * D;
    const rand = makeRand(7);
    const T = 12;
    const rows = randF32(rand, T * W);
    const hostBlocks = [5, 2, 7];
    const slots = Int32Array.from({ length: T }, (_, t) => hostBlocks[Math.floor(t / 4)]! * 4 + (t % 4));
    const sel = new QuestSelector(
      {
        layout,
        blockSize: 4,
        numSparseLayers: 1,
        numHostBlocks: 8,
        topk: 8,
        sinkTokens: 0,
        windowTokens: 4,
        digestDtype,
      },
      view,
    );
    // Written in two steps (tokens 0-6, then 7-11): the digest of page 1 is extended, not reset.
    backend.resetWorkspace();
    sel.updateDigests(0, backend.stage(rows.slice(0, 7 * W), [7, W], "f32"), slots.subarray(0, 7));
    sel.updateDigests(0, backend.stage(rows.slice(7 * W), [5, W], "f32"), slots.subarray(7));
    const key = (t: number, g: number, i: number) => rows[t * W + (Hq + g) * D + i]!;

    it("each page's digest is the element-wise min and max of its keys (rounded outward in fp8), per kv head", () => {
      // Written key by key, the fp8 digest folds each key into the rounded value it holds: the
      // same as rounding the exact min / max (rounding is monotone).
      const dg = sel.digests[0]!;
      for (const [p, hb] of hostBlocks.entries()) {
        for (let g = 0; g < Hkv; g++) {
          for (let i = 0; i < D; i++) {
            const ks = [0, 1, 2, 3].map((o) => key(p * 4 + o, g, i));
            const mn = dg[(hb * 2 + 0) * Hkv * D + g * D + i]!;
            const mx = dg[(hb * 2 + 1) * Hkv * D + g * D + i]!;
            assert.equal(mn, down(Math.min(...ks)));
            assert.equal(mx, up(Math.max(...ks)));
            assert.ok(mn <= Math.min(...ks) && mx >= Math.max(...ks), "the box holds every key");
          }
        }
      }
    });

    it("a page's first token resets its digest (host blocks are reused)", () => {
      const s2 = new QuestSelector(sel.config, view);
      backend.resetWorkspace();
      const big = new Float32Array(W).fill(100);
      s2.updateDigests(0, backend.stage(big, [1, W], "f32"), Int32Array.from([2 * 4 + 0]));
      s2.updateDigests(0, backend.stage(rows.slice(0, 2 * W), [2, W], "f32"), Int32Array.from([8, 9]));
      const k0 = key(0, 1, 3);
      const k1 = key(1, 1, 3);
      const base = 2 * 2 * Hkv * D + D + 3;
      assert.deepEqual(
        [s2.digests[0]![base], s2.digests[0]![base + Hkv * D]],
        [down(Math.min(k0, k1)), up(Math.max(k0, k1))],
      );
    });

    it("the f32 tree order: lanes of 8 dims summed in order, then a butterfly over the lanes", () => {
      // D = 24: 3 lanes of 8 dims, rounded up to 4 (lane 3 holds 0). One head, min = max = 1.
      const D24 = 24;
      const dg1 = new Float32Array(2 * D24).fill(1);
      const q1 = new Float32Array(D24);
      q1[0] = 2 ** 24; // lane 0: 2^24 + 1 + 1 rounds to 2^24 at each step (ties to even)
      q1[1] = 1;
      q1[2] = 1;
      q1[8] = 1; // lane 1: 1 + 1 = 2
      q1[9] = 1;
      q1[16] = -(2 ** 24); // lane 2: negative q reads min (1): -2^24
      const f = Math.fround;
      // butterfly: o = 2: s0 = f(l0 + l2) = 0, s1 = f(l1 + l3) = 2; o = 1: s0 + s1 = 2
      const expected = f(f(2 ** 24 - 2 ** 24) + f(2 + 0));
      assert.equal(questScore(q1, 1, dg1, 0, 0, 1, D24), expected);
      assert.equal(expected, 2); // a sequential f64 sum would give 4
    });

    it("the score equals max_h sum_i max(q*min, q*max) over the stored digest by brute force and bounds every head's q.k", () => {
      const q = randF32(makeRand(11), Hq * D, 2);
      const dg = sel.digests[0]!;
      for (const [p, hb] of hostBlocks.entries()) {
        for (let g = 0; g < Hkv; g++) {
          const perHead = [2 * g, 2 * g + 1].map((h) => {
            let b = 0;
            for (let i = 0; i < D; i++) {
              const qi = q[h * D + i]!;
              const mn = dg[(hb * 2 + 0) * Hkv * D + g * D + i]!;
              const mx = dg[(hb * 2 + 1) * Hkv * D + g * D + i]!;
              b += Math.max(qi * mn, qi * mx);
            }
            return b;
          });
          const brute = Math.max(...perHead);
          const qg = Float64Array.from(q.subarray(2 * g * D, (2 * g + 2) * D));
          const score = questScore(qg, 2, dg, hb * 2 * Hkv * D, g, Hkv, D);
          // float32 sums (the kernel's order): within a few f32 roundings of the exact bound
          assert.ok(Math.abs(score - brute) <= 1e-5 * (Math.abs(brute) + 1), `page ${p} head ${g}`);
          for (let o = 0; o < 4; o++)
            for (let h = 2 * g; h < 2 * g + 2; h++) {
              let logit = 0;
              for (let i = 0; i < D; i++) logit += q[h * D + i]! * key(p * 4 + o, g, i);
              assert.ok(
                logit <= score + 1e-5 * (Math.abs(score) + 1),
                `page ${p} token ${o} q head ${h}: ${logit} > bound ${score}`,
              );
            }
        }
      }
    });

    it("a head whose sum is NaN counts as -Infinity (the kernel's rule)", () => {
      const dg = new Float32Array(2 * 1 * 2).fill(1); // one page, Hkv 1, D 2: min = max = 1
      const q = Float64Array.from([Number.NaN, 1, 2, 3]); // head 0 has a NaN, head 1 sums to 5
      assert.equal(questScore(q, 2, dg, 0, 0, 1, 2), 5);
      assert.equal(
        questScore(Float64Array.from([Number.NaN, 0]), 1, dg, 0, 0, 1, 2),
        Number.NEGATIVE_INFINITY,
      );
      // An infinite max (an overflowed key) makes qPos * max = 0 * inf = NaN for every head whose
      // query is <= 0 in that dim: the page then ranks lowest, as on the GPU.
      const inf = Float32Array.from([1, 1, Number.POSITIVE_INFINITY, 1]);
      assert.equal(
        questScore(Float64Array.from([0, 1, -1, 1]), 2, inf, 0, 0, 1, 2),
        Number.NEGATIVE_INFINITY,
      );
      assert.equal(questScore(Float64Array.from([2, 1]), 1, inf, 0, 0, 1, 2), Number.POSITIVE_INFINITY);
    });
  });

describe("Quest selection", () => {
  // Head dim 1: a page's score for a positive query q is q * max; for a negative one q * min.
  const layout: QkvLayout = { numHeads: 4, numKvHeads: 2, headDim: 1 };
  const cfg = {
    layout,
    blockSize: 2,
    numSparseLayers: 1,
    numHostBlocks: 16,
    topk: 8,
    sinkTokens: 2,
    windowTokens: 2,
  };
  const qkvRow = (q: number[]) => backend.stage(Float32Array.from([...q, 0, 0, 0, 0]), [1, 8], "f32");

  it("per GQA group: sinks, window, pinned pages, then the best scores; ascending", () => {
    const sel = new QuestSelector(cfg, view);
    // 20 tokens = 10 pages in host blocks 10 - p. Budget 4 pages: sink page 0, window page 9,
    // pinned page 3, and the best-scoring other page of each group.
    const dg = sel.digests[0]!;
    const setDigest = (hb: number, g: number, mn: number, mx: number) => {
      dg[(hb * 2 + 0) * 2 + g] = mn;
      dg[(hb * 2 + 1) * 2 + g] = mx;
    };
    for (let p = 0; p < 10; p++) for (let g = 0; g < 2; g++) setDigest(10 - p, g, -1, 1);
    setDigest(10 - 6, 0, -1, 5); // group 0 (positive query): page 6 has the largest max
    setDigest(10 - 3, 0, -1, 9); // page 3 scores even higher but is pinned anyway
    setDigest(10 - 2, 1, -7, 1); // group 1 (negative query): page 2 has the smallest min
    setDigest(10 - 5, 1, -7, 1); // ... tied with page 5: the lower page wins
    backend.resetWorkspace();
    const batch = sparseBatch([
      {
        id: "A",
        batchIdx: 0,
        tokenIdx: 0,
        numTokens: 20,
        hostBlockIds: Array.from({ length: 10 }, (_, p) => 10 - p),
        blockIds: new Array(10).fill(-1),
        pinnedPages: [3],
        hotBlockIds: [0],
      },
    ]);
    // q heads 0, 1 (group 0) positive; heads 2, 3 (group 1) negative.
    const s = sel.select(0, qkvRow([1, 2, -1, -3]), batch);
    assert.deepEqual(selected(s), [
      [0, 3, 6, 9],
      [0, 2, 3, 9],
    ]);
  });

  it("a context within the budget selects every page; forced pages beyond the budget are all kept", () => {
    const sel = new QuestSelector(cfg, view);
    backend.resetWorkspace();
    const short = sparseBatch([
      {
        id: "A",
        batchIdx: 0,
        tokenIdx: 0,
        numTokens: 7,
        hostBlockIds: [1, 2, 3, 4],
        blockIds: [],
        hotBlockIds: [],
      },
    ]);
    assert.deepEqual(selected(sel.select(0, qkvRow([1, 1, 1, 1]), short)), [
      [0, 1, 2, 3],
      [0, 1, 2, 3],
    ]);
    const pinnedMany = sparseBatch([
      {
        id: "B",
        batchIdx: 0,
        tokenIdx: 0,
        numTokens: 20,
        hostBlockIds: Array.from({ length: 10 }, (_, p) => p),
        blockIds: [],
        pinnedPages: [2, 4, 6, 8],
        hotBlockIds: [],
      },
    ]);
    assert.deepEqual(selected(sel.select(0, qkvRow([1, 1, 1, 1]), pinnedMany))[0], [0, 2, 4, 6, 8, 9]);
  });
});

describe("Quest sub-page digests (digestTokens < blockSize)", () => {
  // Head dim 1, one GQA group of 1 head, pages of 4 tokens, digests of 2 tokens (S = 2 per page).
  const layout: QkvLayout = { numHeads: 1, numKvHeads: 1, headDim: 1 };
  const cfg = {
    layout,
    blockSize: 4,
    numSparseLayers: 1,
    numHostBlocks: 8,
    topk: 8,
    sinkTokens: 0,
    windowTokens: 4,
    digestTokens: 2,
  };
  const W = 3; // q, k, v
  const qkvRows = (ks: number[]) =>
    backend.stage(Float32Array.from(ks.flatMap((k) => [0, k, 0])), [ks.length, W], "f32");

  it("each sub-page keeps the min and max of its own tokens; its first token resets it", () => {
    const sel = new QuestSelector(cfg, view);
    backend.resetWorkspace();
    // Host block 3 (slots 12-15): keys 5, -1 | 2, 7, written in two steps (12-14, then 15).
    sel.updateDigests(0, qkvRows([5, -1, 2]), Int32Array.from([12, 13, 14]));
    sel.updateDigests(0, qkvRows([7]), Int32Array.from([15]));
    // [numHostBlocks, S, 2, Hkv, D]: sub-page j of block 3 at (3 * 2 + j) * 2.
    const dg = sel.digests[0]!;
    assert.equal(dg.length, 8 * 2 * 2);
    assert.deepEqual([dg[12], dg[13], dg[14], dg[15]], [-1, 5, 2, 7]);
    sel.updateDigests(0, qkvRows([9]), Int32Array.from([14])); // offset 0 of sub-page 1: reset
    assert.deepEqual([dg[12], dg[13], dg[14], dg[15]], [-1, 5, 9, 9]);
  });

  it("a page scores as its best sub-page: a tighter bound than the page's box, which can change the ranking", () => {
    // Head dim 2 here. 3 pages (12 tokens), budget 2 pages: window page 2 plus the better of
    // pages 0 and 1, for the query (1, 1). Page 0: keys (1, 0), (1, 0) | (0, 1), (0, 1): its box
    // [0, 1] x [0, 1] bounds at 2, but no key's logit exceeds 1 (each sub-page bounds at 1).
    // Page 1: four keys (0.8, 0.8): logit and every bound 1.6. The page box picks page 0, the
    // sub-page digests pick page 1, the page with the larger logit.
    const lay2: QkvLayout = { numHeads: 1, numKvHeads: 1, headDim: 2 };
    const keys = [
      [1, 0],
      [1, 0],
      [0, 1],
      [0, 1],
      ...Array.from({ length: 4 }, () => [0.8, 0.8]),
      ...Array.from({ length: 4 }, () => [0, 0]),
    ];
    const hostBlocks = [5, 1, 0];
    const run = (digestTokens: number) => {
      const sel = new QuestSelector({ ...cfg, layout: lay2, topk: 8, digestTokens }, view);
      backend.resetWorkspace();
      const slots = Int32Array.from({ length: 12 }, (_, t) => hostBlocks[Math.floor(t / 4)]! * 4 + (t % 4));
      const rows = Float32Array.from(keys.flatMap((k) => [0, 0, ...k, 0, 0]));
      sel.updateDigests(0, backend.stage(rows, [12, 6], "f32"), slots);
      const batch = sparseBatch([
        {
          id: "A",
          batchIdx: 0,
          tokenIdx: 0,
          numTokens: 12,
          hostBlockIds: hostBlocks,
          blockIds: [],
          hotBlockIds: [],
        },
      ]);
      const q = backend.stage(Float32Array.from([1, 1, 0, 0, 0, 0]), [1, 6], "f32");
      return selected(sel.select(0, q, batch))[0];
    };
    assert.deepEqual(run(4), [0, 2]); // one digest per page (the page's box)
    assert.deepEqual(run(2), [1, 2]); // two sub-page digests per page
    assert.deepEqual(run(1), [1, 2]); // one per token: the exact largest logit
  });

  it("digestTokens must divide the block size", () => {
    assert.throws(
      () => new QuestSelector({ ...cfg, digestTokens: 3 }, view),
      /digest tokens \(3\) must divide/,
    );
  });
});

describe("Quest fp8 digests (digest_dtype fp8: e4m3 rounded outward)", () => {
  // Head dim 1, one GQA group of 1 head, pages of 2 tokens in host blocks 0-4 (page p in host
  // block p), budget 2 pages: the window page 4 plus the best of pages 0-3. Keys per page:
  // 0.1 0.1 | 0.30 0.30 | 0.31 0.31 | -2 0.2 | 0 0. Near 0.3 the e4m3 grid steps by 1/32
  // (0.28125, 0.3125): both 0.30 and 0.31 round down to 0.28125 and up to 0.3125; near 0.1 by
  // 1/128 (0.09375, 0.1015625), near 0.2 by 1/64 (0.203125 above it).
  const layout: QkvLayout = { numHeads: 1, numKvHeads: 1, headDim: 1 };
  const keys = [0.1, 0.1, 0.3, 0.3, 0.31, 0.31, -2, 0.2, 0, 0];
  const run = (digestDtype: DigestDtype, q: number) => {
    const sel = new QuestSelector(
      {
        layout,
        blockSize: 2,
        numSparseLayers: 1,
        numHostBlocks: 5,
        topk: 4,
        sinkTokens: 0,
        windowTokens: 2,
        digestDtype,
      },
      view,
    );
    backend.resetWorkspace();
    const rows = Float32Array.from(keys.flatMap((k) => [0, k, 0]));
    sel.updateDigests(
      0,
      backend.stage(rows, [10, 3], "f32"),
      Int32Array.from(keys, (_, t) => t),
    );
    const batch = sparseBatch([
      {
        id: "A",
        batchIdx: 0,
        tokenIdx: 0,
        numTokens: 10,
        hostBlockIds: [0, 1, 2, 3, 4],
        blockIds: [],
        hotBlockIds: [],
      },
    ]);
    const picked = selected(
      sel.select(0, backend.stage(Float32Array.from([q, 0, 0]), [1, 3], "f32"), batch),
    )[0];
    return { digests: Array.from(sel.digests[0]!), picked };
  };

  it("stores min rounded down and max rounded up onto the e4m3 grid", () => {
    // [numHostBlocks, S = 1, 2 (min, max), Hkv, D]: host block b at 2b (min), 2b + 1 (max).
    const { digests } = run("fp8", 1);
    assert.deepEqual(digests, [0.09375, 0.1015625, 0.28125, 0.3125, 0.28125, 0.3125, -2, 0.203125, 0, 0]);
    assert.deepEqual(
      run("bf16", 1).digests,
      Array.from(Float32Array.from([0.1, 0.1, 0.3, 0.3, 0.31, 0.31, -2, 0.2, 0, 0])),
    );
  });

  it("the score stays an upper bound, at a coarser resolution: equal rounded maxima tie, the lower page wins", () => {
    // q = 1 scores a page by its max: exact digests pick page 2 (0.31 > 0.30); fp8 ones score
    // pages 1 and 2 both 0.3125, and the tie goes to the lower page, 1.
    assert.deepEqual(run("bf16", 1).picked, [2, 4]);
    assert.deepEqual(run("fp8", 1).picked, [1, 4]);
    // q = -1 scores by -min: page 3 (min -2, exact on the grid) for both.
    assert.deepEqual(run("bf16", -1).picked, [3, 4]);
    assert.deepEqual(run("fp8", -1).picked, [3, 4]);
  });
});
