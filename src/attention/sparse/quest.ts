import type { QkvLayout, Tensor } from "../../backends/backend.js";
import { E4M3_VALUES, floatToE4m3Down, floatToE4m3Up } from "../../backends/fp8.js";
import { DEFAULT_DIGEST_DTYPE, type DigestDtype } from "../../config/hisparse_config.js";
import { PAD_SLOT_ID } from "../../core/ids.js";
import type { PageSelection, Selector, SparseBatch } from "./selector.js";

/**
 * Quest's upper bound of one GQA group's attention logits over one page (Tang et al., "Quest:
 * Query-Aware Sparsity for Efficient Long-Context LLM Inference", arXiv 2406.10774, eq. 2), one
 * selection per group: the largest of the group's per-head bounds,
 *   score = max over q heads h of the group of sum over dims i of max(q[h,i] * min[i], q[h,i] * max[i]).
 * A page ranks high when any head of the group may attend to it strongly. (Summing the heads'
 * bounds instead lets a head with a large query outvote the others: on ref-small at 1/8 of the
 * context with 4-token pages, perplexity +14.0% summed vs +2.4% with the max,
 * bench/results/hisparse_scorers_cpu.md.) Each term is q*max when q > 0, else q*min; it is
 * computed as qPos*max + qNeg*min with qPos = max(q, 0), qNeg = min(q, 0).
 *
 * Arithmetic: float32, in the order of the CUDA scoring kernel (hisparse_select.cu), so both rank
 * pages identically: the head dim is cut into {@link questScoreLanes} lanes of 8 dims (lane l:
 * dims 8l..8l+7; lanes past D hold 0); each lane sums its dims in order, s = s + qPos*max, then
 * s = s + qNeg*min (every product and sum rounded to f32, no fused multiply-add); then the lanes
 * are combined by a butterfly, for o = L/2, L/4, .., 1: s[l] = s[l] + s[l xor o]; the bound is s[0].
 * A head whose sum is NaN (a NaN query, or 0 * an infinite digest) counts as -Infinity.
 * @param q [G, D] the group's queries (f32 values)
 * @param digest per page [2, Hkv, D]: element-wise min then max of the page's keys
 * @param base offset of the page's digest; G q heads per kv head; D head dim; g kv head; Hkv kv heads
 */
export function questScore(
  q: Float32Array | Float64Array,
  G: number,
  digest: Float32Array,
  base: number,
  g: number,
  Hkv: number,
  D: number,
): number {
  const mn = base + g * D;
  const mx = base + (Hkv + g) * D;
  const L = questScoreLanes(D);
  const lane = new Float64Array(L);
  const f = Math.fround;
  let best = -Infinity;
  for (let h = 0; h < G; h++) {
    for (let l = 0; l < L; l++) {
      let s = 0;
      for (let i = 8 * l; i < Math.min(8 * l + 8, D); i++) {
        const v = f(q[h * D + i]!);
        // biome-ignore lint/complexity/useMathMinMax: the kernel's select (NaN -> 0), not Math.max
        const qPos = v > 0 ? v : 0;
        // biome-ignore lint/complexity/useMathMinMax: the kernel's select, not Math.min
        const qNeg = v > 0 ? 0 : v;
        s = f(s + f(qPos * digest[mx + i]!));
        s = f(s + f(qNeg * digest[mn + i]!));
      }
      lane[l] = s;
    }
    for (let o = L >> 1; o >= 1; o >>= 1) {
      for (let l = 0; l < L; l++) if ((l & o) === 0) lane[l] = f(lane[l]! + lane[l | o]!);
    }
    // Lane 0 holds the sum (the kernel's lanes all hold it: + is commutative).
    const s = lane[0]!;
    const bound = Number.isNaN(s) ? Number.NEGATIVE_INFINITY : s;
    if (bound > best) best = bound;
  }
  return best;
}

/** Lanes of 8 dims in the Quest score's summation tree: ceil(D / 8) rounded up to a power of two. */
export function questScoreLanes(D: number): number {
  let L = 1;
  while (L * 8 < D) L *= 2;
  return L;
}

/** Settings of a {@link QuestSelector} and of its CUDA twin; token counts are multiples of blockSize. */
export interface QuestSelectorConfig {
  layout: QkvLayout;
  blockSize: number;
  numSparseLayers: number;
  numHostBlocks: number;
  topk: number;
  sinkTokens: number;
  windowTokens: number;
  /**
   * Tokens per min/max digest, a divisor of blockSize (default blockSize: one digest per page);
   * smaller values keep blockSize / digestTokens sub-page digests per page (HiSparseConfig).
   */
  digestTokens?: number;
  /**
   * Element type of the digests (HiSparseConfig.digestDtype; absent: DEFAULT_DIGEST_DTYPE, bf16):
   * `fp8` keeps them on the e4m3 grid rounded outward, `bf16` keeps the keys' exact min / max.
   */
  digestDtype?: DigestDtype;
}

/** A Quest selection's token counts in pages (see {@link questPageBudget}). */
export interface QuestPageBudget {
  /** topk / blockSize: pages selected per (request, kv head) in all. */
  budgetPages: number;
  /** sinkTokens / blockSize. */
  sinkPages: number;
  /** windowTokens / blockSize (>= 1: the tail page is always in the window). */
  windowPages: number;
  /** blockSize / digestTokens: sub-page digests per page (1: the page's own min/max). */
  digestsPerPage: number;
}

/**
 * The page counts of a selector's settings (QuestSelector and its CUDA twin CudaQuestSelector).
 * @throws Error when topk, sinkTokens or windowTokens is not a multiple of the block size, the
 *   window is shorter than one block, or digestTokens does not divide the block size.
 */
export function questPageBudget(config: QuestSelectorConfig): QuestPageBudget {
  const { blockSize: bs, topk, sinkTokens, windowTokens } = config;
  const dt = config.digestTokens ?? bs;
  if (topk % bs !== 0 || sinkTokens % bs !== 0 || windowTokens % bs !== 0 || windowTokens < bs)
    throw new Error("topk, sink and window tokens must be multiples of the block size (window >= 1 block)");
  if (!Number.isInteger(dt) || dt < 1 || bs % dt !== 0)
    throw new Error(`digest tokens (${dt}) must divide the block size (${bs})`);
  return {
    budgetPages: topk / bs,
    sinkPages: sinkTokens / bs,
    windowPages: windowTokens / bs,
    digestsPerPage: bs / dt,
  };
}

/**
 * Quest page selection on the CPU (the oracle of the CUDA kernels). Digests: per sparse layer
 * f32 [numHostBlocks, S, 2, Hkv, D] with S = blockSize / digestTokens sub-pages: min then max of
 * the post-RoPE keys of the sub-page's digestTokens tokens, indexed by host block (a page's
 * identity) then sub-page, i.e. by hostSlot / digestTokens; updated as tokens are written: the
 * tail sub-page's digest covers its tokens so far; a sub-page's first token resets it, so host
 * blocks can be reused. With `digestDtype` fp8 the values stay on the e4m3 grid,
 * rounded outward (min down, max up: backends/fp8.ts floatToE4m3Down / Up, scale 1), what the
 * CUDA selector stores as e4m3 bytes; a key is folded in as min = rd(min(stored, key)), which
 * equals rd of the exact min since rd is monotone (min(rd(a), rd(b)) = rd(min(a, b))); likewise
 * max with ru. With bf16 they are the exact min / max.
 *
 * Selection per sparse request and kv head (one per GQA group), `topk / blockSize` pages in all:
 * the sink pages (first sinkTokens), the window pages (last windowTokens, ending with the tail
 * page), the pinned pages, then the highest page scores of the rest (ties: lower page first),
 * a page's score being the largest {@link questScore} of its S sub-pages (an upper bound of the
 * largest logit of its tokens, tighter than the whole page's box: at 16-token pages, S = 4 ranks
 * pages nearly as 4-token pages would, bench/results/hisparse_quest_quality_cpu.md); when the
 * whole context fits the budget, every page. Output ascending.
 */
export class QuestSelector implements Selector {
  /** Per sparse layer: [numHostBlocks, S, 2, Hkv, D] (S = budget.digestsPerPage). */
  readonly digests: Float32Array[];
  private readonly budget: QuestPageBudget;
  /** Rounds a min (down) / a max (up) onto the digest grid: the identity for exact digests. */
  private readonly roundMin: (v: number) => number;
  private readonly roundMax: (v: number) => number;

  /**
   * @param view host view of a tensor's f32 elements (Backend.hostView).
   * @throws Error when a token count is not a multiple of the block size.
   */
  constructor(
    readonly config: QuestSelectorConfig,
    private readonly view: (t: Tensor) => Float32Array,
  ) {
    this.budget = questPageBudget(config);
    const fp8 = (config.digestDtype ?? DEFAULT_DIGEST_DTYPE) === "fp8";
    this.roundMin = fp8 ? (v) => E4M3_VALUES[floatToE4m3Down(v)]! : (v) => v;
    this.roundMax = fp8 ? (v) => E4M3_VALUES[floatToE4m3Up(v)]! : (v) => v;
    const { numKvHeads: Hkv, headDim: D } = config.layout;
    this.digests = Array.from(
      { length: config.numSparseLayers },
      () => new Float32Array(config.numHostBlocks * this.budget.digestsPerPage * 2 * Hkv * D),
    );
  }

  updateDigests(sparseLayer: number, qkv: Tensor, hostSlotMapping: Int32Array): void {
    const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = this.config.layout;
    const dt = this.config.blockSize / this.budget.digestsPerPage;
    const x = this.view(qkv);
    const dg = this.digests[sparseLayer]!;
    const row = (Hq + 2 * Hkv) * D;
    const kvDim = Hkv * D;
    for (let t = 0; t < hostSlotMapping.length; t++) {
      const slot = hostSlotMapping[t]!;
      if (slot === PAD_SLOT_ID) continue; // padding token: no key
      const sub = Math.floor(slot / dt); // host block * S + sub-page
      const mn = sub * 2 * kvDim;
      const mx = mn + kvDim;
      const k = t * row + Hq * D;
      const { roundMin, roundMax } = this;
      if (slot % dt === 0) {
        // First token of the sub-page: the digest starts over (the host block may be reused).
        for (let i = 0; i < kvDim; i++) {
          dg[mn + i] = roundMin(x[k + i]!);
          dg[mx + i] = roundMax(x[k + i]!);
        }
        continue;
      }
      // Stored values are on the grid: a key above the min leaves rd(min) as it is.
      for (let i = 0; i < kvDim; i++) {
        const v = x[k + i]!;
        if (v < dg[mn + i]!) dg[mn + i] = roundMin(v);
        if (v > dg[mx + i]!) dg[mx + i] = roundMax(v);
      }
    }
  }

  select(sparseLayer: number, qkv: Tensor, batch: SparseBatch): PageSelection {
    const { numHeads: Hq, numKvHeads: Hkv } = this.config.layout;
    const x = this.view(qkv);
    const start = new Int32Array(batch.numSparse * Hkv + 1);
    const out: number[] = [];
    for (let s = 0; s < batch.numSparse; s++) {
      for (let g = 0; g < Hkv; g++) {
        for (const p of this.selectOne(sparseLayer, x, batch, s, g, Hq, Hkv)) out.push(p);
        start[s * Hkv + g + 1] = out.length;
      }
    }
    return { start, pages: Int32Array.from(out) };
  }

  /** The pages of request s, kv head g, ascending. */
  private selectOne(
    sparseLayer: number,
    x: Float32Array,
    batch: SparseBatch,
    s: number,
    g: number,
    Hq: number,
    Hkv: number,
  ): number[] {
    const bs = this.config.blockSize;
    const numPages = Math.ceil(batch.numTokens[s]! / bs);
    const all = Array.from({ length: numPages }, (_, p) => p);
    if (numPages <= this.budget.budgetPages) return all;
    const p0 = batch.pageStart[s]!;
    const windowStart = numPages - this.budget.windowPages;
    const forced = all.filter(
      (p) => p < this.budget.sinkPages || p >= windowStart || batch.pinned[p0 + p] === 1,
    );
    const k = this.budget.budgetPages - forced.length;
    if (k <= 0) return forced;
    const q = this.groupQuery(x, batch.tokenIdx[s]!, g, Hq, Hkv);
    const D = this.config.layout.headDim;
    const dg = this.digests[sparseLayer]!;
    const isForced = new Uint8Array(numPages);
    for (const p of forced) isForced[p] = 1;
    const S = this.budget.digestsPerPage;
    const scored: Array<[number, number]> = [];
    for (let p = 0; p < numPages; p++) {
      if (isForced[p] === 1) continue;
      let best = Number.NEGATIVE_INFINITY;
      for (let j = 0; j < S; j++) {
        const base = (batch.hostBlockIds[p0 + p]! * S + j) * 2 * Hkv * D;
        const v = questScore(q, Hq / Hkv, dg, base, g, Hkv, D);
        if (v > best) best = v;
      }
      scored.push([best, p]);
    }
    scored.sort((a, b) => b[0] - a[0] || a[1] - b[1]);
    for (let i = 0; i < k; i++) isForced[scored[i]![1]] = 1;
    return all.filter((p) => isForced[p] === 1);
  }

  /** The group's queries [G, D] (see questScore). */
  private groupQuery(x: Float32Array, t: number, g: number, Hq: number, Hkv: number): Float32Array {
    const D = this.config.layout.headDim;
    const G = Hq / Hkv;
    const row = (Hq + 2 * Hkv) * D;
    const q = new Float32Array(G * D);
    for (let h = 0; h < G; h++) {
      const o = t * row + (g * G + h) * D;
      for (let i = 0; i < D; i++) q[h * D + i] = x[o + i]!;
    }
    return q;
  }
}
