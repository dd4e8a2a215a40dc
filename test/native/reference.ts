/**
 * Straightforward float64 references of the CUDA ops, written from the Backend contracts
 * (src/backends/backend.ts) and HF transformers' formulas, for test/native. Inputs are the
 * (bf16-rounded) values uploaded; outputs are unrounded float64.
 */
import type { QkvLayout } from "../../src/backends/backend.js";

/** out[t] = table[ids[t]] ([V, H] -> [T, H]); ids out of range give a zero row (kernels.h). */
export function gatherRowsRef(
  table: Float32Array,
  H: number,
  V: number,
  ids: ArrayLike<number>,
): Float64Array {
  const out = new Float64Array(ids.length * H);
  for (let t = 0; t < ids.length; t++) {
    const id = ids[t]!;
    if (id < 0 || id >= V) continue;
    for (let h = 0; h < H; h++) out[t * H + h] = table[id * H + h]!;
  }
  return out;
}

/** x / sqrt(mean(x^2) + eps) * w per row. */
export function rmsNormRef(
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  T: number,
  H: number,
  eps: number,
): Float64Array {
  const out = new Float64Array(T * H);
  for (let t = 0; t < T; t++) {
    let ss = 0;
    for (let h = 0; h < H; h++) ss += x[t * H + h]! ** 2;
    const inv = 1 / Math.sqrt(ss / H + eps);
    for (let h = 0; h < H; h++) out[t * H + h] = x[t * H + h]! * inv * w[h]!;
  }
  return out;
}

/** silu(x[:, :I]) * x[:, I:]. */
export function siluAndMulRef(x: ArrayLike<number>, T: number, I: number): Float64Array {
  const out = new Float64Array(T * I);
  for (let t = 0; t < T; t++) {
    for (let i = 0; i < I; i++) {
      const g = x[t * 2 * I + i]!;
      out[t * I + i] = (g / (1 + Math.exp(-g))) * x[t * 2 * I + I + i]!;
    }
  }
  return out;
}

/** y = x @ w^T + b. x [T, K]; w [N, K]; b [N] | null. */
export function linearRef(
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  b: ArrayLike<number> | null,
  T: number,
  N: number,
  K: number,
): Float64Array {
  const y = new Float64Array(T * N);
  for (let t = 0; t < T; t++) {
    for (let n = 0; n < N; n++) {
      let acc = b === null ? 0 : b[n]!;
      const xo = t * K;
      const wo = n * K;
      for (let k = 0; k < K; k++) acc += x[xo + k]! * w[wo + k]!;
      y[t * N + n] = acc;
    }
  }
  return y;
}

/** NeoX RoPE on the q and k heads of each qkv row (rows with an out-of-table position unchanged). */
export function ropeRef(
  qkv: ArrayLike<number>,
  T: number,
  layout: QkvLayout,
  positions: ArrayLike<number>,
  cosSin: Float32Array,
  maxPositions: number,
  rotaryDim: number = layout.headDim,
): Float64Array {
  const { numHeads, numKvHeads, headDim: D } = layout;
  const W = (numHeads + 2 * numKvHeads) * D;
  const out = Float64Array.from(qkv as ArrayLike<number>);
  const R = rotaryDim;
  const half = R / 2;
  for (let t = 0; t < T; t++) {
    const p = positions[t]!;
    if (p < 0 || p >= maxPositions) continue;
    for (let h = 0; h < numHeads + numKvHeads; h++) {
      const o = t * W + h * D;
      for (let i = 0; i < half; i++) {
        const c = cosSin[p * R + i]!;
        const s = cosSin[p * R + half + i]!;
        const x1 = qkv[o + i]!;
        const x2 = qkv[o + half + i]!;
        out[o + i] = x1 * c - x2 * s;
        out[o + half + i] = x2 * c + x1 * s;
      }
    }
  }
  return out;
}

/** Per-head RMSNorm of the q heads (qw) and k heads (kw); v heads unchanged. */
export function qkNormRef(
  qkv: ArrayLike<number>,
  T: number,
  layout: QkvLayout,
  qw: ArrayLike<number>,
  kw: ArrayLike<number>,
  eps: number,
): Float64Array {
  const { numHeads, numKvHeads, headDim: D } = layout;
  const W = (numHeads + 2 * numKvHeads) * D;
  const out = Float64Array.from(qkv as ArrayLike<number>);
  for (let t = 0; t < T; t++) {
    for (let h = 0; h < numHeads + numKvHeads; h++) {
      const o = t * W + h * D;
      const w = h < numHeads ? qw : kw;
      let ss = 0;
      for (let i = 0; i < D; i++) ss += qkv[o + i]! ** 2;
      const inv = 1 / Math.sqrt(ss / D + eps);
      for (let i = 0; i < D; i++) out[o + i] = qkv[o + i]! * inv * w[i]!;
    }
  }
  return out;
}

/** Paged KV cache geometry of one layer. */
export interface CacheGeometry {
  numBlocks: number;
  blockSize: number;
  numKvHeads: number;
  headDim: number;
}

/** Flat index of element (slot's block, kv = 0 for K / 1 for V, offset, head, d) of the cache. */
export function cacheIndex(g: CacheGeometry, slot: number, kv: 0 | 1, head: number, d: number): number {
  const block = Math.floor(slot / g.blockSize);
  const off = slot % g.blockSize;
  return (((block * 2 + kv) * g.blockSize + off) * g.numKvHeads + head) * g.headDim + d;
}

/**
 * Causal paged attention in float64 (Backend.pagedAttention): token j of request r sits at
 * seqLen_r - queryLen_r + j and attends to positions [0, that]; K/V read through the block table.
 * Requests with seqLen 0 produce zero rows.
 */
export function pagedAttentionRef(
  qkv: Float32Array,
  cache: Float32Array,
  layout: QkvLayout,
  g: CacheGeometry,
  queryStartLoc: ArrayLike<number>,
  seqLens: ArrayLike<number>,
  blockTables: ArrayLike<number>,
  maxBlocksPerReq: number,
): Float64Array {
  const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
  const W = (Hq + 2 * Hkv) * D;
  const T = queryStartLoc[seqLens.length]!;
  const out = new Float64Array(T * Hq * D);
  const scale = 1 / Math.sqrt(D);
  for (let r = 0; r < seqLens.length; r++) {
    const q0 = queryStartLoc[r]!;
    const qLen = queryStartLoc[r + 1]! - q0;
    const seqLen = seqLens[r]!;
    if (seqLen === 0) continue;
    for (let j = 0; j < qLen; j++) {
      const pos = seqLen - qLen + j;
      const t = q0 + j;
      for (let h = 0; h < Hq; h++) {
        const kvh = Math.floor(h / (Hq / Hkv));
        const scores = new Float64Array(pos + 1);
        let max = Number.NEGATIVE_INFINITY;
        for (let p = 0; p <= pos; p++) {
          const slot =
            blockTables[r * maxBlocksPerReq + Math.floor(p / g.blockSize)]! * g.blockSize + (p % g.blockSize);
          let s = 0;
          for (let d = 0; d < D; d++) s += qkv[t * W + h * D + d]! * cache[cacheIndex(g, slot, 0, kvh, d)]!;
          scores[p] = s * scale;
          max = Math.max(max, scores[p]!);
        }
        let sum = 0;
        for (let p = 0; p <= pos; p++) {
          scores[p] = Math.exp(scores[p]! - max);
          sum += scores[p]!;
        }
        for (let p = 0; p <= pos; p++) {
          const slot =
            blockTables[r * maxBlocksPerReq + Math.floor(p / g.blockSize)]! * g.blockSize + (p % g.blockSize);
          const wgt = scores[p]! / sum;
          const o = t * Hq * D + h * D;
          for (let d = 0; d < D; d++) out[o + d] = out[o + d]! + wgt * cache[cacheIndex(g, slot, 1, kvh, d)]!;
        }
      }
    }
  }
  return out;
}

/**
 * The sampling rule of DeviceSamplingRows (backend.ts) for one row, with the fp32 steps of the
 * device sampler (native/kernels/sampling.h): greedy argmax (lowest id on ties) at temperature
 * <= 0; else p_i = fp32(exp(fp32(x_i - max) * fp32(1/T))) / Z, threshold filters (top-k, min-p,
 * top-p, ties kept), inverse CDF over the kept tokens in ascending id. Masses are summed in
 * float64 here (the device sums exactly in fixed point): both are exact to far below the fp32
 * spacing of p, so they agree except on measure-zero ties of u with a cumulative boundary.
 */
export function sampleRowRef(
  logits: Float32Array,
  temperature: number,
  topK: number,
  topP: number,
  minP: number,
  uniform: number,
): number {
  const V = logits.length;
  let best = 0;
  for (let i = 1; i < V; i++) if (logits[i]! > logits[best]!) best = i;
  if (!(temperature > 0)) return best;
  const max = logits[best]!;
  const invT = Math.fround(1 / temperature);
  const e = new Float64Array(V);
  let z = 0;
  for (let i = 0; i < V; i++) {
    e[i] = Math.fround(Math.exp(Math.fround(Math.fround(logits[i]! - max) * invT)));
    z += e[i]!;
  }
  const invZ = Math.fround(1 / Math.fround(z));
  const p = Float32Array.from(e, (v) => v * invZ);
  const sorted = Float32Array.from(p).sort().reverse();
  let threshold = 0;
  if (topK > 0 && topK < V) threshold = Math.max(threshold, sorted[topK - 1]!);
  if (minP > 0) threshold = Math.max(threshold, Math.fround(minP * sorted[0]!));
  if (topP < 1) {
    let total = 0;
    for (const v of sorted) total += v;
    let cum = 0;
    for (const v of sorted) {
      cum += v;
      if (cum >= topP * total) {
        threshold = Math.max(threshold, v);
        break;
      }
    }
  }
  let kept = 0;
  let last = -1;
  for (let i = 0; i < V; i++) {
    if (p[i]! >= threshold) {
      kept += p[i]!;
      last = i;
    }
  }
  const target = uniform * kept;
  let cum = 0;
  for (let i = 0; i < V; i++) {
    if (p[i]! < threshold) continue;
    cum += p[i]!;
    if (cum > target) return i;
  }
  return last;
}
