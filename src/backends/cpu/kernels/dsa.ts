/**
 * The DeepSeek sparse attention (DSA) lightning indexer on the CPU (Backend.mla.indexerLogits
 * and topkIndices, ../../backend.ts): logits of every past token from the paged index keys, and
 * the causal top-k with the engine's tie rule.
 */
import type { MlaStepRows } from "./mla.js";

/** Indexer dims: Hi heads of Di, the two scales of IndexerScales. */
export interface IndexerKernelDims {
  Hi: number;
  Di: number;
  softmaxScale: number;
  headWeightScale: number;
}

/**
 * logits[t, i] = sum_h (w[t, h] * headWeightScale) * relu(softmaxScale * (q[t, h] . k_i)) for
 * the positions i <= p of query token t (p = seqLen - queryLen + j), -inf elsewhere, in HF's
 * order of fp32 operations: the dot product (float64 here), times softmaxScale, ReLU, times the
 * scaled head weight, summed over heads in float64, rounded to f32 once.
 * q: [T, Hi * Di]; w: [T, Hi]; keys: [numSlots, Di]; out: [T, width].
 */
export function indexerLogitsKernel(
  q: Float32Array,
  w: Float32Array,
  keys: Float32Array,
  out: Float32Array,
  width: number,
  rows: MlaStepRows,
  d: IndexerKernelDims,
): void {
  const { Hi, Di } = d;
  const bs = rows.blockSize;
  out.fill(Number.NEGATIVE_INFINITY);
  const hw = new Float32Array(Hi);
  for (let r = 0; r < rows.numReqs; r++) {
    const q0 = rows.queryStartLoc[r]!;
    const q1 = rows.queryStartLoc[r + 1]!;
    const first = rows.seqLens[r]! - (q1 - q0);
    for (let t = q0; t < q1; t++) {
      const p = first + (t - q0);
      for (let h = 0; h < Hi; h++) hw[h] = Math.fround(w[t * Hi + h]! * d.headWeightScale);
      for (let i = 0; i <= p; i++) {
        const k = (rows.blockTables[r * rows.maxBlocksPerReq + Math.floor(i / bs)]! * bs + (i % bs)) * Di;
        let acc = 0;
        for (let h = 0; h < Hi; h++) {
          const qo = (t * Hi + h) * Di;
          let dot = 0;
          for (let e = 0; e < Di; e++) dot += q[qo + e]! * keys[k + e]!;
          const s = Math.fround(Math.fround(dot) * d.softmaxScale);
          if (s > 0) acc += s * hw[h]!;
        }
        out[t * width + i] = acc;
      }
    }
  }
}

/** Sort key of a logit: NaN as -inf, -0 as +0 (the contract's order). */
function orderValue(v: number): number {
  return Number.isNaN(v) ? Number.NEGATIVE_INFINITY : v === 0 ? 0 : v;
}

/**
 * Causal top-k of each row: among positions [0, positions[t]], the min(k, positions[t] + 1)
 * largest logits (ties: lower position first), written ascending, -1 after them.
 * logits: [T, width]; out: [T, k]. @throws Error when a position is outside [0, width).
 */
export function topkIndicesKernel(
  logits: Float32Array,
  width: number,
  positions: Int32Array,
  T: number,
  k: number,
  out: Int32Array,
): void {
  out.fill(-1);
  for (let t = 0; t < T; t++) {
    const p = positions[t]!;
    if (p < 0 || p >= width)
      throw new Error(`mla.topkIndices: position ${p} of row ${t} is outside the logits' ${width} columns`);
    const n = p + 1;
    const o = t * width;
    let chosen: number[];
    if (n <= k) chosen = Array.from({ length: n }, (_, i) => i);
    else {
      const idx = Array.from({ length: n }, (_, i) => i);
      // Larger value first; equal values: lower position first (a stable, total order).
      idx.sort((a, b) => orderValue(logits[o + b]!) - orderValue(logits[o + a]!) || a - b);
      chosen = idx.slice(0, k).sort((a, b) => a - b);
    }
    for (let j = 0; j < chosen.length; j++) out[t * k + j] = chosen[j]!;
  }
}
