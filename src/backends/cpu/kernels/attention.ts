/**
 * Paged attention and the KV-cache write (vLLM reshape_and_cache) on the CPU.
 *
 * KV cache layout per layer: f32 [numBlocks, 2, blockSize, numKvHeads, headDim]: for block b,
 * K of (offset o, kv head g) starts at ((b * 2 + 0) * blockSize + o) * Hkv * D + g * D and V at
 * ((b * 2 + 1) * blockSize + o) * Hkv * D + g * D.
 *
 * `pagedAttentionKernel` is worker-safe (no imports, closures or module state; see linear.ts):
 * the thread pool runs it in its worker threads on shared buffers.
 */
import { roundToE4m3 } from "../../fp8.js";

/**
 * Causal attention of the step's query tokens over paged KV, for the (token, kv head) items
 * i = t * Hkv + g with itemStart <= i < itemEnd. One body serves dense and sparse attention:
 * every (request r, kv head g) pair reads its own block-table row and sequence length,
 *   blockTable(r, g) = bt[btOff + r * btStride + g * btHeadStride ...],
 *   seqLen(r, g)     = seqLens[slOff + r * slStride + g * slHeadStride],
 * so dense paged attention is the case btHeadStride = slHeadStride = 0 (all heads share the
 * request's row) and HiSparse's per-head tables set them to maxBlocks and 1. The arithmetic of one
 * (token, q head) depends only on its query row, its table row and seqLen, so a sparse call whose
 * tables list every page in order returns the dense call's bits.
 *
 * Query token t of request r (tokens [qsl[r], qsl[r+1])) sits at table position
 * seqLen(r, g) - queryLen_r + (t - qsl[r]) (chunked prefill: the chunk ends the context) and
 * attends to table positions [0, that position]. Scores s_j = (q . k_j) / sqrt(D); softmax in
 * float64 as a two-pass softmax (scores and their max first, then exp(s_j - max), their sum and
 * the weighted V sum), so there is no online rescaling error. GQA: q head h reads kv head
 * floor(h / (Hq / Hkv)).
 *
 * qkv: f32 [T, (Hq + 2 * Hkv) * D] at qkvOff (q heads first; the k/v parts are not read here:
 * reshapeAndCache has already written them to the cache); kv: the layer's cache at kvOff;
 * out: f32 [T, Hq * D] at outOff; qsl: i32 [numReqs + 1] at qslOff; seqLens: i32 at slOff;
 * bt: i32 at btOff (strides in elements, see above). The caller validates the metadata.
 */
export function pagedAttentionKernel(
  qkv: Float32Array,
  qkvOff: number,
  kv: Float32Array,
  kvOff: number,
  out: Float32Array,
  outOff: number,
  qsl: Int32Array,
  qslOff: number,
  seqLens: Int32Array,
  slOff: number,
  bt: Int32Array,
  btOff: number,
  slStride: number,
  slHeadStride: number,
  btStride: number,
  btHeadStride: number,
  numReqs: number,
  Hq: number,
  Hkv: number,
  D: number,
  blockSize: number,
  itemStart: number,
  itemEnd: number,
): void {
  const G = Hq / Hkv;
  const rowStride = (Hq + 2 * Hkv) * D;
  const kvTok = Hkv * D;
  const half = blockSize * kvTok;
  const blockStride = 2 * half;
  const scale = 1 / Math.sqrt(D);
  let maxLen = 0;
  for (let r = 0; r < numReqs; r++)
    for (let g = 0; g < Hkv; g++)
      maxLen = Math.max(maxLen, seqLens[slOff + r * slStride + g * slHeadStride]!);
  const scores = new Float64Array(maxLen);
  for (let r = 0; r < numReqs; r++) {
    const q0 = qsl[qslOff + r]!;
    const q1 = qsl[qslOff + r + 1]!;
    for (let t = Math.max(q0, Math.floor(itemStart / Hkv)); t < q1 && t * Hkv < itemEnd; t++) {
      for (let g = 0; g < Hkv; g++) {
        const item = t * Hkv + g;
        if (item < itemStart || item >= itemEnd) continue; // another chunk's item
        const first = seqLens[slOff + r * slStride + g * slHeadStride]! - (q1 - q0);
        const ctx = first + (t - q0) + 1;
        const btRow = btOff + r * btStride + g * btHeadStride;
        for (let h = g * G; h < (g + 1) * G; h++) {
          const qo = qkvOff + t * rowStride + h * D;
          // Pass 1: scores and their max; the dot product runs as four chains over d mod 4.
          let mx = Number.NEGATIVE_INFINITY;
          for (let j0 = 0, bi = 0; j0 < ctx; j0 += blockSize, bi++) {
            const base = kvOff + bt[btRow + bi]! * blockStride + g * D;
            const jn = Math.min(blockSize, ctx - j0);
            for (let o = 0; o < jn; o++) {
              const ko = base + o * kvTok;
              let c0 = 0;
              let c1 = 0;
              let c2 = 0;
              let c3 = 0;
              let d = 0;
              for (; d + 3 < D; d += 4) {
                c0 += qkv[qo + d]! * kv[ko + d]!;
                c1 += qkv[qo + d + 1]! * kv[ko + d + 1]!;
                c2 += qkv[qo + d + 2]! * kv[ko + d + 2]!;
                c3 += qkv[qo + d + 3]! * kv[ko + d + 3]!;
              }
              for (; d < D; d++) c0 += qkv[qo + d]! * kv[ko + d]!;
              const s = (c0 + c1 + (c2 + c3)) * scale;
              scores[j0 + o] = s;
              if (s > mx) mx = s;
            }
          }
          // Pass 2: unnormalised probabilities exp(s_j - max) in place, and their sum.
          let sum = 0;
          for (let j = 0; j < ctx; j++) {
            const p = Math.exp(scores[j]! - mx);
            scores[j] = p;
            sum += p;
          }
          // Pass 3: out[d] = sum_j p_j * v_j[d] / sum, eight d at a time in registers, one chain
          // per d in ascending j.
          const oo = outOff + t * Hq * D + h * D;
          const inv = 1 / sum;
          let d = 0;
          for (; d + 7 < D; d += 8) {
            let a0 = 0;
            let a1 = 0;
            let a2 = 0;
            let a3 = 0;
            let a4 = 0;
            let a5 = 0;
            let a6 = 0;
            let a7 = 0;
            for (let j0 = 0, bi = 0; j0 < ctx; j0 += blockSize, bi++) {
              const base = kvOff + bt[btRow + bi]! * blockStride + half + g * D + d;
              const jn = Math.min(blockSize, ctx - j0);
              for (let o = 0, vo = base; o < jn; o++, vo += kvTok) {
                const p = scores[j0 + o]!;
                a0 += p * kv[vo]!;
                a1 += p * kv[vo + 1]!;
                a2 += p * kv[vo + 2]!;
                a3 += p * kv[vo + 3]!;
                a4 += p * kv[vo + 4]!;
                a5 += p * kv[vo + 5]!;
                a6 += p * kv[vo + 6]!;
                a7 += p * kv[vo + 7]!;
              }
            }
            out[oo + d] = a0 * inv;
            out[oo + d + 1] = a1 * inv;
            out[oo + d + 2] = a2 * inv;
            out[oo + d + 3] = a3 * inv;
            out[oo + d + 4] = a4 * inv;
            out[oo + d + 5] = a5 * inv;
            out[oo + d + 6] = a6 * inv;
            out[oo + d + 7] = a7 * inv;
          }
          for (; d < D; d++) {
            let a0 = 0;
            for (let j0 = 0, bi = 0; j0 < ctx; j0 += blockSize, bi++) {
              const base = kvOff + bt[btRow + bi]! * blockStride + half + g * D + d;
              const jn = Math.min(blockSize, ctx - j0);
              for (let o = 0, vo = base; o < jn; o++, vo += kvTok) a0 += scores[j0 + o]! * kv[vo]!;
            }
            out[oo + d] = a0 * inv;
          }
        }
      }
    }
  }
}

/**
 * Writes the k and v heads of each token into the paged cache (vLLM reshape_and_cache): token t
 * goes to slot s = slotMapping[t] (block floor(s / blockSize), offset s % blockSize); tokens with
 * slot PAD_SLOT_ID (-1) are skipped.
 * qkv: f32 [T, (Hq + 2 * Hkv) * D]; kv: f32 [numBlocks, 2, blockSize, Hkv, D];
 * slotMapping: i32 [T]. fp8: the layer's scales when the cache emulates fp8 (the written rows are
 * rounded as an e4m3 cache reads them back, backends/fp8.ts roundToE4m3), null for f32.
 * @throws Error when a slot is outside [0, numBlocks * blockSize) and not PAD_SLOT_ID.
 */
export function reshapeAndCacheKernel(
  qkv: Float32Array,
  kv: Float32Array,
  slotMapping: Int32Array,
  T: number,
  Hq: number,
  Hkv: number,
  D: number,
  blockSize: number,
  numBlocks: number,
  padSlotId: number,
  fp8: Fp8KvScales | null = null,
): void {
  const rowStride = (Hq + 2 * Hkv) * D;
  const kvTok = Hkv * D;
  const numSlots = numBlocks * blockSize;
  for (let t = 0; t < T; t++) {
    const slot = slotMapping[t]!;
    if (slot === padSlotId) continue; // padding token: nothing to cache
    if (slot < 0 || slot >= numSlots) {
      throw new Error(`reshapeAndCache: slot ${slot} of token ${t} is outside the cache's ${numSlots} slots`);
    }
    const block = Math.floor(slot / blockSize);
    const off = slot - block * blockSize;
    const kDst = (block * 2 * blockSize + off) * kvTok;
    const vDst = kDst + blockSize * kvTok;
    const kSrc = t * rowStride + Hq * D;
    kv.set(qkv.subarray(kSrc, kSrc + kvTok), kDst);
    kv.set(qkv.subarray(kSrc + kvTok, kSrc + 2 * kvTok), vDst);
    if (fp8 !== null) {
      roundToE4m3(kv, kDst, kDst + kvTok, fp8.kScale);
      roundToE4m3(kv, vDst, vDst + kvTok, fp8.vScale);
    }
  }
}

/**
 * amax |k| and amax |v| over the tokens of a batch that reshapeAndCache writes (slot not
 * padSlotId): what `--calculate-kv-scales` measures (core/kv/kv_cache_scales.ts).
 * qkv: f32 [T, (Hq + 2 * Hkv) * D]; slotMapping: i32 [T]. NaN propagates.
 * @returns [kAmax, vAmax], 0 for a batch without tokens.
 */
export function kvAmaxKernel(
  qkv: Float32Array,
  slotMapping: Int32Array,
  T: number,
  Hq: number,
  Hkv: number,
  D: number,
  padSlotId: number,
): [number, number] {
  const rowStride = (Hq + 2 * Hkv) * D;
  const kvTok = Hkv * D;
  let k = 0;
  let v = 0;
  for (let t = 0; t < T; t++) {
    if (slotMapping[t] === padSlotId) continue; // padding token: not cached, not measured
    const kSrc = t * rowStride + Hq * D;
    for (let i = 0; i < kvTok; i++) {
      const a = Math.abs(qkv[kSrc + i]!);
      const b = Math.abs(qkv[kSrc + kvTok + i]!);
      k = a > k || Number.isNaN(a) ? a : k;
      v = b > v || Number.isNaN(b) ? b : v;
    }
  }
  return [k, v];
}

/** Per-tensor scales of an fp8 KV cache layer (vLLM k_scale / v_scale): stored = e4m3(x / scale). */
export interface Fp8KvScales {
  kScale: number;
  vScale: number;
}
