import { questScore } from "../src/attention/sparse/quest.js";

/**
 * Exact two-level Quest top-k (issue 18; an evaluation only: bench/quest_two_level.ts counts how
 * often its check passes on real activations, and bench/results/quest_two_level_cpu.md found it
 * costs more than the full score, so no kernel implements it). With S sub-page digests per page, a page's exact score s_p is the largest questScore of its S sub-pages
 * (QuestSelector); its page bound U_p is questScore of the page's box (per dim the smallest
 * sub-page min and the largest sub-page max: compares only). U_p >= s_p exactly in float32: in
 * each term qPos * max grows with max (qPos >= 0) and qNeg * min grows as min falls (qNeg <= 0),
 * every rounding is monotone, and questScore adds the terms in one fixed order, so termwise >=
 * gives >= at every partial sum, the butterfly and the max over heads, as long as no sum is NaN
 * (inf - inf): a box with a non-finite value, or whose products could overflow float32, scores
 * +Infinity here instead.
 *
 * Selection: take the M largest U as candidates, score them exactly, T = the k-th largest exact
 * score among them (ties: lower page first, the oracle's rule). When every non-candidate has
 * U < T (strict), each non-candidate has s <= U < T, so every page with s >= T is a candidate and
 * the candidates' first k in (s descending, page ascending) order are the full order's first k:
 * the same pages, ties included. Otherwise the check fails and the caller falls back to the full
 * exact score (the result is then identical by construction).
 */

/** Half of float32's largest finite value: a bound on |sums| below which no operation overflows. */
export const OVERFLOW_GUARD = 1.7e38;

/** Outcome of {@link twoLevelTopK}. */
export interface TwoLevelTopK {
  /** The k pages, in (exact score descending, page ascending) order; null when the check failed. */
  top: number[] | null;
  /** Pages scored exactly (the candidates), <= M. */
  numCandidates: number;
  /** T, the k-th largest exact score among the candidates. */
  threshold: number;
  /** The largest page bound among the non-candidates (-Infinity when there are none). */
  maxOutsideBound: number;
}

/** (score descending, page ascending): the oracle's order (quest.ts selectOne). */
function byScoreThenPage(a: readonly [number, number], b: readonly [number, number]): number {
  return b[0] - a[0] || a[1] - b[1];
}

/**
 * The exact top-k of `pages` by `exact`, through the two-level check (see the file comment).
 * @param pages the pages to rank (the non-forced pages), any order; k >= 1 of them are taken
 * @param bound U_p, an upper bound of exact(p) (questPageBound)
 * @param exact s_p (the score the full selection ranks by)
 * @param numCandidates M >= k: pages scored exactly
 */
export function twoLevelTopK(
  pages: readonly number[],
  bound: (p: number) => number,
  exact: (p: number) => number,
  k: number,
  numCandidates: number,
): TwoLevelTopK {
  const byBound = pages.map((p) => [bound(p), p] as const).sort(byScoreThenPage);
  const M = Math.min(Math.max(numCandidates, k), byBound.length);
  const cand = byBound.slice(0, M).map(([, p]) => [exact(p), p] as const);
  cand.sort(byScoreThenPage);
  const threshold = cand[k - 1]![0];
  const maxOutsideBound = M < byBound.length ? byBound[M]![0] : Number.NEGATIVE_INFINITY;
  const ok = M === byBound.length || maxOutsideBound < threshold;
  return {
    top: ok ? cand.slice(0, k).map(([, p]) => p) : null,
    numCandidates: M,
    threshold,
    maxOutsideBound,
  };
}

/**
 * U_p: questScore of the box of one page's S sub-page digests (kv head g), >= the page's exact
 * score (file comment); +Infinity when a box value or a query is not finite, or when
 * max|q| * max|box| * 2D reaches {@link OVERFLOW_GUARD} (a product or sum might overflow to
 * infinity, and inf - inf is NaN, which questScore ranks lowest).
 * @param q [G, D] the group's queries; digests [numHostBlocks, S, 2, Hkv, D] (QuestSelector.digests)
 * @param hostBlock the page's host block; S sub-pages per page; box scratch of 2 * Hkv * D floats
 */
export function questPageBound(
  q: Float32Array,
  G: number,
  digests: Float32Array,
  hostBlock: number,
  S: number,
  g: number,
  Hkv: number,
  D: number,
  box: Float32Array,
): number {
  const kvDim = Hkv * D;
  let qMax = 0;
  for (let i = 0; i < G * D; i++) qMax = Math.max(qMax, Math.abs(q[i]!));
  let boxMax = 0;
  for (let i = g * D; i < (g + 1) * D; i++) {
    let mn = Number.POSITIVE_INFINITY;
    let mx = Number.NEGATIVE_INFINITY;
    for (let j = 0; j < S; j++) {
      const base = (hostBlock * S + j) * 2 * kvDim;
      const a = digests[base + i]!;
      const b = digests[base + kvDim + i]!;
      if (!Number.isFinite(a) || !Number.isFinite(b)) return Number.POSITIVE_INFINITY;
      if (a < mn) mn = a;
      if (b > mx) mx = b;
    }
    box[i] = mn;
    box[kvDim + i] = mx;
    boxMax = Math.max(boxMax, Math.abs(mn), Math.abs(mx));
  }
  // NaN fails the comparison too: +Infinity.
  if (!(qMax * boxMax * 2 * D < OVERFLOW_GUARD)) return Number.POSITIVE_INFINITY;
  return questScore(q, G, box, 0, g, Hkv, D);
}

/**
 * s_p: the largest questScore of one page's S sub-page digests (QuestSelector's page score).
 * @param q [G, D]; digests [numHostBlocks, S, 2, Hkv, D]
 */
export function questSubPageScore(
  q: Float32Array,
  G: number,
  digests: Float32Array,
  hostBlock: number,
  S: number,
  g: number,
  Hkv: number,
  D: number,
): number {
  let best = Number.NEGATIVE_INFINITY;
  for (let j = 0; j < S; j++) {
    const v = questScore(q, G, digests, (hostBlock * S + j) * 2 * Hkv * D, g, Hkv, D);
    if (v > best) best = v;
  }
  return best;
}
