/**
 * Evaluation only (bench/hisparse_quality.ts `--oracle`): replaces Quest's page scores with the
 * exact attention mass each page would receive, sum over the group's q heads and the page's
 * tokens of exp(q . k / sqrt(D)), read from the host tier's copy of the keys. Sinks, window,
 * pinned pages and the budget are unchanged, so the result separates what the budget costs from
 * what Quest's upper bound (arXiv 2406.10774) costs. Not a selector for serving: it reads every
 * page's keys each step, as dense attention does. Works with `inprocWorker: true` (it patches the
 * classes of this thread); a full page's keys are in the host tier once mirrored, which precedes
 * any sparse step.
 */
import { type QuestPageBudget, QuestSelector } from "../src/attention/sparse/quest.js";
import type { SparseBatch } from "../src/attention/sparse/selector.js";
import { CpuHostKvCache } from "../src/worker/hisparse/host_kv_cache.js";

/** The private members of QuestSelector that the oracle (and bench/hisparse_scorers.ts) replace or read. */
export interface QuestInternals {
  config: QuestSelector["config"];
  budget: QuestPageBudget;
  selectOne(
    li: number,
    x: Float32Array,
    batch: SparseBatch,
    s: number,
    g: number,
    Hq: number,
    Hkv: number,
  ): number[];
}

let tier: CpuHostKvCache | null = null;
let tracking = false;
let installed = false;

/**
 * Patches CpuHostKvCache.mirror (this thread) to remember the host tier it mirrors into, so that
 * a patched selector can read the keys. Idempotent.
 * @returns the host tier of the latest mirror (null before the first)
 */
export function trackHostTier(): () => CpuHostKvCache | null {
  if (!tracking) {
    tracking = true;
    const mirror = CpuHostKvCache.prototype.mirror;
    CpuHostKvCache.prototype.mirror = function (this: CpuHostKvCache, ...args: Parameters<typeof mirror>) {
      tier = this;
      return mirror.apply(this, args);
    };
  }
  return () => tier;
}

/** Patches QuestSelector (this thread) to rank pages by exact attention mass. Idempotent. */
export function installExactMassSelection(): void {
  if (installed) return;
  installed = true;
  trackHostTier();
  const proto = QuestSelector.prototype as unknown as QuestInternals;
  proto.selectOne = function (this: QuestInternals, li, x, batch, s, g, Hq, Hkv) {
    const { blockSize: bs, layout } = this.config;
    const D = layout.headDim;
    const G = Hq / Hkv;
    const numPages = Math.ceil(batch.numTokens[s]! / bs);
    const all = Array.from({ length: numPages }, (_, p) => p);
    if (numPages <= this.budget.budgetPages) return all;
    const p0 = batch.pageStart[s]!;
    const keep = new Uint8Array(numPages);
    for (const p of all)
      if (p < this.budget.sinkPages || p >= numPages - this.budget.windowPages || batch.pinned[p0 + p] === 1)
        keep[p] = 1;
    const k = this.budget.budgetPages - keep.reduce((a, b) => a + b, 0);
    if (k <= 0) return all.filter((p) => keep[p] === 1);
    const keys = tier!.layers[li]!;
    const row = (Hq + 2 * Hkv) * D;
    const q0 = batch.tokenIdx[s]! * row;
    const scored: Array<[number, number]> = [];
    for (let p = 0; p < numPages; p++) {
      if (keep[p] === 1) continue;
      const hb = batch.hostBlockIds[p0 + p]!;
      let mass = 0;
      for (let o = 0; o < bs; o++) {
        const ko = (hb * 2 * bs + o) * Hkv * D + g * D;
        for (let h = g * G; h < (g + 1) * G; h++) {
          let dot = 0;
          for (let i = 0; i < D; i++) dot += x[q0 + h * D + i]! * keys[ko + i]!;
          mass += Math.exp(dot / Math.sqrt(D));
        }
      }
      scored.push([mass, p]);
    }
    scored.sort((a, b) => b[0] - a[0] || a[1] - b[1]);
    for (let i = 0; i < k; i++) keep[scored[i]![1]] = 1;
    return all.filter((p) => keep[p] === 1);
  };
}
