/**
 * Multi-head latent attention on the CPU (Backend.mla contract, ../../backend.ts): the paged
 * latent rows, strided RoPE, LayerNorm, and MLA attention in its two equal forms, expanded (the
 * backend's op, as HF computes it) and absorbed (the decode form a GPU kernel uses; kept here as
 * that kernel's reference and checked against the expanded one in the tests).
 *
 * Row cache layout: f32 [numBlocks, blockSize, rowWidth]; the row of slot s starts at
 * s * rowWidth (slot = block * blockSize + offset). A latent row is [c (C) | kpe (R)].
 */

/** Where a request's queries and rows are: host copies of the step's metadata. */
export interface MlaStepRows {
  /** i32 [numReqs + 1] query start of each request. */
  queryStartLoc: Int32Array;
  /** i32 [numReqs] context length of each request, this step's tokens included. */
  seqLens: Int32Array;
  /** i32 [numReqs, maxBlocksPerReq] block ids. */
  blockTables: Int32Array;
  maxBlocksPerReq: number;
  numReqs: number;
  blockSize: number;
  /**
   * Rows of pages off the device (BackendMlaOps SpilledRows): a block id -1 reads row i % bs of
   * host block hostBlockTables[r, i / bs] of hostRows ([numHostBlocks, bs, C + R]).
   */
  spilled?: { hostRows: Float32Array; hostBlockTables: Int32Array; maxHostBlocksPerReq: number };
}

/** MLA dims (MlaDims of the contract). */
export interface MlaKernelDims {
  Hq: number;
  N: number;
  R: number;
  Vd: number;
  C: number;
  scale: number;
}

/**
 * Writes src rows into the row cache at their slots: cache[slot, col : col + W] = src[t];
 * PAD_SLOT_ID (`pad`) skipped. @throws Error for a slot outside [0, numSlots).
 */
export function writeRowsKernel(
  src: Float32Array,
  T: number,
  W: number,
  cache: Float32Array,
  rowWidth: number,
  col: number,
  slots: Int32Array,
  numSlots: number,
  pad: number,
): void {
  for (let t = 0; t < T; t++) {
    const s = slots[t]!;
    if (s === pad) continue; // padding token: nothing to cache
    if (s < 0 || s >= numSlots)
      throw new Error(`mla.writeRows: slot ${s} of token ${t} is outside the cache's ${numSlots} slots`);
    cache.set(src.subarray(t * W, (t + 1) * W), s * rowWidth + col);
  }
}

/**
 * In place RoPE of `count` heads of every row (offset + h * stride, R columns each), pairs
 * (2i, 2i+1) when interleaved, else (i, i + R/2); each product rounded to f32 as HF's fp32 ops.
 * x: [T, W]; cosSin: [maxPositions, R] (cos first). @throws Error for a position outside the table.
 */
export function rotaryStridedKernel(
  x: Float32Array,
  T: number,
  W: number,
  offset: number,
  stride: number,
  count: number,
  R: number,
  positions: Int32Array,
  cosSin: Float32Array,
  maxPositions: number,
  interleaved: boolean,
): void {
  const half = R >> 1;
  for (let t = 0; t < T; t++) {
    const pos = positions[t]!;
    if (pos < 0 || pos >= maxPositions)
      throw new Error(
        `mla.rotaryStrided: position ${pos} of token ${t} is outside the table's ${maxPositions} positions`,
      );
    const cs = pos * R;
    for (let h = 0; h < count; h++) {
      const o = t * W + offset + h * stride;
      for (let i = 0; i < half; i++) {
        const c = cosSin[cs + i]!;
        const s = cosSin[cs + half + i]!;
        const ia = interleaved ? o + 2 * i : o + i;
        const ib = interleaved ? ia + 1 : ia + half;
        const a = x[ia]!;
        const b = x[ib]!;
        x[ia] = Math.fround(a * c) - Math.fround(b * s);
        x[ib] = Math.fround(b * c) + Math.fround(a * s);
      }
    }
  }
}

/** torch.nn.LayerNorm per row (float64 mean and biased variance). x, out: [T, n]. */
export function layerNormKernel(
  x: Float32Array,
  w: Float32Array,
  b: Float32Array,
  out: Float32Array,
  T: number,
  n: number,
  eps: number,
): void {
  for (let t = 0; t < T; t++) {
    const o = t * n;
    let mean = 0;
    for (let i = 0; i < n; i++) mean += x[o + i]!;
    mean /= n;
    let v = 0;
    for (let i = 0; i < n; i++) v += (x[o + i]! - mean) ** 2;
    const inv = 1 / Math.sqrt(v / n + eps);
    for (let i = 0; i < n; i++)
      out[o + i] = Math.fround(Math.fround((x[o + i]! - mean) * inv) * w[i]! + b[i]!);
  }
}

/** Slot of position i of request r. */
function slotOf(rows: MlaStepRows, r: number, i: number): number {
  const bs = rows.blockSize;
  return rows.blockTables[r * rows.maxBlocksPerReq + Math.floor(i / bs)]! * bs + (i % bs);
}

/**
 * Where position i of request r's latent row starts: [array, element offset] in the cache, or
 * in the host rows when its page's block is -1 (MlaStepRows.spilled). w = C + R.
 */
function latentRow(
  rows: MlaStepRows,
  cache: Float32Array,
  r: number,
  i: number,
  w: number,
): [Float32Array, number] {
  const bs = rows.blockSize;
  const page = Math.floor(i / bs);
  const b = rows.blockTables[r * rows.maxBlocksPerReq + page]!;
  const sp = rows.spilled;
  if (b >= 0 || sp === undefined) return [cache, (b * bs + (i % bs)) * w];
  return [sp.hostRows, (sp.hostBlockTables[r * sp.maxHostBlocksPerReq + page]! * bs + (i % bs)) * w];
}

/**
 * Positions query token t (at position p) of a request attends to: [0, p] without a selection,
 * else the non-negative entries of its topk row. @throws Error for an entry outside [0, p] or
 * a repeated one.
 */
export function attendedPositions(topk: Int32Array | null, K: number, t: number, p: number): number[] {
  if (topk === null) return Array.from({ length: p + 1 }, (_, i) => i);
  const out: number[] = [];
  for (let j = 0; j < K; j++) {
    const i = topk[t * K + j]!;
    if (i < 0) continue; // no entry
    if (i > p) throw new Error(`mla.attention: token ${t} at position ${p} selects position ${i}`);
    out.push(i);
  }
  if (new Set(out).size !== out.length) throw new Error(`mla.attention: token ${t} selects a position twice`);
  return out;
}

/**
 * Expanded MLA attention (the contract's reference form, as HF computes it): per request, the
 * k_nope and v rows of every attended position, W_UK[h] c_i and W_UV[h] c_i rounded to f32 (HF's
 * fp32 kv_b_proj), then per query and head a float64 two-pass softmax over
 * scale * (q_nope . k_nope_i + q_pe . kpe_i) and the weighted sum of v, rounded to f32.
 * q: [T, Hq * (N + R)]; cache: [numSlots, C + R]; kvB: [Hq * (N + Vd), C]; topk: [T, K] or null;
 * out: [T, Hq * Vd].
 */
export function mlaAttentionKernel(
  q: Float32Array,
  cache: Float32Array,
  kvB: Float32Array,
  out: Float32Array,
  rows: MlaStepRows,
  d: MlaKernelDims,
  topk: Int32Array | null,
  K: number,
): void {
  const { Hq, N, R, Vd, C, scale } = d;
  const qRow = Hq * (N + R);
  const kvRow = Hq * (N + Vd);
  for (let r = 0; r < rows.numReqs; r++) {
    const q0 = rows.queryStartLoc[r]!;
    const q1 = rows.queryStartLoc[r + 1]!;
    if (q1 === q0) continue;
    const L = rows.seqLens[r]!;
    const attended = Array.from({ length: q1 - q0 }, (_, j) =>
      attendedPositions(topk, K, q0 + j, L - (q1 - q0) + j),
    );
    // Expand only the rows some query reads: kv[i] = kv_b_proj(c_i), [Hq, N + Vd] per position.
    const kv = new Map<number, Float32Array>();
    for (const list of attended) {
      for (const i of list) {
        if (kv.has(i)) continue;
        const row = new Float32Array(kvRow);
        const [src, c] = latentRow(rows, cache, r, i, C + R);
        for (let n = 0; n < kvRow; n++) {
          let acc = 0;
          for (let k = 0; k < C; k++) acc += kvB[n * C + k]! * src[c + k]!;
          row[n] = acc;
        }
        kv.set(i, row);
      }
    }
    for (let j = 0; j < q1 - q0; j++) {
      const t = q0 + j;
      const list = attended[j]!;
      const s = new Float64Array(list.length);
      for (let h = 0; h < Hq; h++) {
        const qo = t * qRow + h * (N + R);
        let mx = Number.NEGATIVE_INFINITY;
        for (let a = 0; a < list.length; a++) {
          const i = list[a]!;
          const kvr = kv.get(i)!;
          const [src, c] = latentRow(rows, cache, r, i, C + R);
          let dot = 0;
          for (let n = 0; n < N; n++) dot += q[qo + n]! * kvr[h * (N + Vd) + n]!;
          for (let n = 0; n < R; n++) dot += q[qo + N + n]! * src[c + C + n]!;
          s[a] = dot * scale;
          if (s[a]! > mx) mx = s[a]!;
        }
        softmaxWeightedSum(
          s,
          mx,
          list.length,
          (a, v) => kv.get(list[a]!)![h * (N + Vd) + N + v]!,
          Vd,
          out,
          t * Hq * Vd + h * Vd,
        );
      }
    }
  }
}

/**
 * out[o + v] = sum_a exp(s_a - mx) * val(a, v) / sum_a exp(s_a - mx), for v < width (float64;
 * rounded on store when out is f32); `s` is overwritten with the unnormalised probabilities.
 */
function softmaxWeightedSum(
  s: Float64Array,
  mx: number,
  n: number,
  val: (a: number, v: number) => number,
  width: number,
  out: Float32Array | Float64Array,
  o: number,
): void {
  let sum = 0;
  for (let a = 0; a < n; a++) {
    s[a] = Math.exp(s[a]! - mx);
    sum += s[a]!;
  }
  for (let v = 0; v < width; v++) {
    let acc = 0;
    for (let a = 0; a < n; a++) acc += s[a]! * val(a, v);
    out[o + v] = acc / sum;
  }
}

/**
 * Absorbed MLA attention (the decode form): per query and head, q_lat = W_UK[h]^T q_nope
 * ([C], float64), scores scale * (q_lat . c_i + q_pe . kpe_i) over the latent rows themselves
 * (MQA over C + R wide rows), o_lat = sum_i p_i c_i, out = W_UV[h] o_lat. Equal to
 * {@link mlaAttentionKernel} up to rounding (float64 here throughout). Same arguments.
 */
export function mlaAttentionAbsorbedKernel(
  q: Float32Array,
  cache: Float32Array,
  kvB: Float32Array,
  out: Float32Array,
  rows: MlaStepRows,
  d: MlaKernelDims,
  topk: Int32Array | null,
  K: number,
): void {
  if (rows.spilled !== undefined) throw new Error("the absorbed MLA kernel reads device rows only");
  const { Hq, N, R, Vd, C, scale } = d;
  const qRow = Hq * (N + R);
  const qLat = new Float64Array(C);
  const oLat = new Float64Array(C);
  for (let r = 0; r < rows.numReqs; r++) {
    const q0 = rows.queryStartLoc[r]!;
    const q1 = rows.queryStartLoc[r + 1]!;
    const L = rows.seqLens[r]!;
    for (let t = q0; t < q1; t++) {
      const list = attendedPositions(topk, K, t, L - (q1 - q0) + (t - q0));
      const slots = list.map((i) => slotOf(rows, r, i) * (C + R));
      const s = new Float64Array(list.length);
      for (let h = 0; h < Hq; h++) {
        const qo = t * qRow + h * (N + R);
        const wk = h * (N + Vd) * C;
        qLat.fill(0);
        for (let n = 0; n < N; n++) for (let k = 0; k < C; k++) qLat[k]! += q[qo + n]! * kvB[wk + n * C + k]!;
        let mx = Number.NEGATIVE_INFINITY;
        for (let a = 0; a < list.length; a++) {
          const c = slots[a]!;
          let dot = 0;
          for (let k = 0; k < C; k++) dot += qLat[k]! * cache[c + k]!;
          for (let n = 0; n < R; n++) dot += q[qo + N + n]! * cache[c + C + n]!;
          s[a] = dot * scale;
          if (s[a]! > mx) mx = s[a]!;
        }
        softmaxWeightedSum(s, mx, list.length, (a, k) => cache[slots[a]! + k]!, C, oLat, 0);
        const wv = wk + N * C;
        for (let v = 0; v < Vd; v++) {
          let acc = 0;
          for (let k = 0; k < C; k++) acc += kvB[wv + v * C + k]! * oLat[k]!;
          out[t * Hq * Vd + h * Vd + v] = acc;
        }
      }
    }
  }
}
