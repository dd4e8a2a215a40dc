/**
 * The exact two-level Quest top-k (bench/quest_two_level_lib.ts): page bounds from the sub-page box are >=
 * the exact scores; whenever the check passes, the pages equal the full exact top-k (ties: lower
 * page first); a page whose box is far above its sub-pages makes the check fail (the fallback).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { questPageBound, questSubPageScore, twoLevelTopK } from "../../../bench/quest_two_level_lib.js";
import { E4M3_VALUES, floatToE4m3Down, floatToE4m3Up } from "../../../src/backends/fp8.js";
import { makeRand } from "../backends/cpu/helpers.js";

const G = 4;
const Hkv = 2;
const D = 32;
const S = 4;
const kvDim = Hkv * D;

/** The full exact top-k: sort by (score descending, page ascending), first k. */
function fullTopK(pages: number[], exact: (p: number) => number, k: number): number[] {
  return pages
    .map((p) => [exact(p), p] as const)
    .sort((a, b) => b[0] - a[0] || a[1] - b[1])
    .slice(0, k)
    .map(([, p]) => p);
}

/**
 * Random sub-page digests [numBlocks, S, 2, Hkv, D] (min <= max), optionally on the e4m3 grid
 * rounded outward: per page and dim a center over +-2, each sub-page +-0.3 around it (a page's
 * sub-pages alike, as neighbouring keys are; independent sub-pages make every box loose).
 */
function randomDigests(rand: () => number, numBlocks: number, fp8: boolean): Float32Array {
  const dg = new Float32Array(numBlocks * S * 2 * kvDim);
  const center = Float64Array.from({ length: numBlocks * kvDim }, () => (rand() - 0.5) * 4);
  for (let u = 0; u < numBlocks * S; u++)
    for (let i = 0; i < kvDim; i++) {
      const c = center[Math.floor(u / S) * kvDim + i]!;
      const a = c - rand() * 0.3;
      const b = c + rand() * 0.3;
      dg[u * 2 * kvDim + i] = fp8 ? E4M3_VALUES[floatToE4m3Down(a)]! : Math.fround(a);
      dg[u * 2 * kvDim + kvDim + i] = fp8 ? E4M3_VALUES[floatToE4m3Up(b)]! : Math.fround(b);
    }
  return dg;
}

function randomQuery(rand: () => number): Float32Array {
  // Magnitudes over 2^-6 .. 2^6: float32 sums round often.
  return Float32Array.from({ length: G * D }, () => (rand() - 0.5) * 2 ** Math.floor(rand() * 13 - 6));
}

for (const fp8 of [false, true])
  describe(`two-level Quest top-k (${fp8 ? "fp8" : "bf16"}-grid digests)`, () => {
    it("bounds hold and every passing check gives the full top-k; ties across the threshold included", () => {
      const rand = makeRand(fp8 ? 11 : 12);
      const box = new Float32Array(2 * kvDim);
      let passed = 0;
      let failed = 0;
      for (let trial = 0; trial < 40; trial++) {
        const numBlocks = 48;
        const dg = randomDigests(rand, numBlocks, fp8);
        const q = randomQuery(rand);
        const g = trial % Hkv;
        // 60 pages over 48 host blocks: 12 pairs of pages with equal scores (ties).
        const hostOf = Array.from({ length: 60 }, (_, p) => (p < 48 ? p : (p * 7) % 48));
        const pages = Array.from({ length: 60 }, (_, p) => p);
        const exact = (p: number) => questSubPageScore(q, G, dg, hostOf[p]!, S, g, Hkv, D);
        const bound = (p: number) => questPageBound(q, G, dg, hostOf[p]!, S, g, Hkv, D, box);
        for (const p of pages) assert.ok(bound(p) >= exact(p), `page ${p}: U ${bound(p)} < s ${exact(p)}`);
        const k = 4 + (trial % 9);
        const r = twoLevelTopK(pages, bound, exact, k, 2 * k);
        if (r.top === null) {
          failed++;
          assert.ok(r.maxOutsideBound >= r.threshold);
          continue;
        }
        passed++;
        assert.deepEqual(r.top, fullTopK(pages, exact, k));
      }
      assert.ok(passed >= 20, `checks passed: ${passed} of 40`);
      assert.equal(passed + failed, 40);
    });

    it("M >= the page count scores every page exactly: always the full top-k", () => {
      const rand = makeRand(5);
      const dg = randomDigests(rand, 10, fp8);
      const q = randomQuery(rand);
      const box = new Float32Array(2 * kvDim);
      const pages = [9, 3, 0, 7, 1, 8, 2];
      const exact = (p: number) => questSubPageScore(q, G, dg, p, S, 1, Hkv, D);
      const r = twoLevelTopK(pages, (p) => questPageBound(q, G, dg, p, S, 1, Hkv, D, box), exact, 3, 7);
      assert.deepEqual(r.top, fullTopK(pages, exact, 3));
      assert.equal(r.maxOutsideBound, Number.NEGATIVE_INFINITY);
    });
  });

describe("two-level Quest top-k: the fallback", () => {
  it("a page whose sub-pages peak in different dims has a large box bound: the check fails", () => {
    // q = 1 on dims 0..3 of every head (head dim 32, kv head 0). Page 0 ("spread"): sub-page j has
    // max 1 on dim j only (each sub-page scores 1, the box 4). Pages 1..5 ("flat"): max 0.5 on
    // dims 0..3 in every sub-page (score 2). k = 2, M = 2: candidates = the two best bounds.
    const numBlocks = 6;
    const dg = new Float32Array(numBlocks * S * 2 * kvDim);
    for (let j = 0; j < S; j++) dg[j * 2 * kvDim + kvDim + j] = 1;
    for (let b = 1; b < numBlocks; b++)
      for (let j = 0; j < S; j++) for (let i = 0; i < 4; i++) dg[(b * S + j) * 2 * kvDim + kvDim + i] = 0.5;
    const q = new Float32Array(G * D);
    for (let h = 0; h < G; h++) for (let i = 0; i < 4; i++) q[h * D + i] = 1;
    const box = new Float32Array(2 * kvDim);
    const pages = [0, 1, 2, 3, 4, 5];
    const exact = (p: number) => questSubPageScore(q, G, dg, p, S, 0, Hkv, D);
    const bound = (p: number) => questPageBound(q, G, dg, p, S, 0, Hkv, D, box);
    assert.equal(exact(0), 1);
    assert.equal(bound(0), 4);
    assert.equal(exact(1), 2);
    // Candidates by bound: page 0 (4), page 1 (2; ties to the lower page); T = 1 (page 0's exact
    // score is the 2nd); the best outside, page 2, has U = 2 >= T: fall back.
    const r = twoLevelTopK(pages, bound, exact, 2, 2);
    assert.equal(r.top, null);
    assert.equal(r.threshold, 1);
    assert.equal(r.maxOutsideBound, 2);
    // With M = 3 the candidates hold pages 0..2; T = 2 (pages 1, 2), outside U = 2: not strictly
    // below T (page 3 ties page 2 and could be ranked on page order): fall back too.
    assert.equal(twoLevelTopK(pages, bound, exact, 2, 3).top, null);
    // With every page a candidate: the full top-k, pages 1 and 2.
    assert.deepEqual(twoLevelTopK(pages, bound, exact, 2, 6).top, [1, 2]);
  });

  it("a non-finite digest or an overflowing product scores the box +Infinity", () => {
    const dg = new Float32Array(S * 2 * kvDim);
    const q = new Float32Array(G * D).fill(1);
    const box = new Float32Array(2 * kvDim);
    dg[kvDim + 3] = Number.POSITIVE_INFINITY;
    assert.equal(questPageBound(q, G, dg, 0, S, 0, Hkv, D, box), Number.POSITIVE_INFINITY);
    dg[kvDim + 3] = 448;
    q[0] = 3e36;
    assert.equal(questPageBound(q, G, dg, 0, S, 0, Hkv, D, box), Number.POSITIVE_INFINITY);
  });
});
