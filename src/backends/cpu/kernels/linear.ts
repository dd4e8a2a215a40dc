/**
 * The matmul kernel of `linear`: y[t, n] = sum_k x[t, k] * w[n, k] (+ bias[n]).
 *
 * Worker-safe: these functions use no imports, closures or module state, because the thread pool
 * ships their source text to its worker threads (thread_pool.ts). Arguments are whole-buffer
 * views plus element offsets, so every thread addresses the same SharedArrayBuffer.
 *
 * Canonical accumulation order. Every output element is computed the same way in every code
 * path (decode row, 2x2 prefill tile, remainders, any thread split): two float64 chains, one
 * over even k and one over odd k, each in ascending k, then `even + odd (+ bias)`, rounded once
 * to f32 on store. So results do not depend on the batch size, the token's row in the batch, or
 * the number of threads (batch invariance), and the threaded matmul equals the single-threaded
 * one bit for bit. Two chains per output hide the latency of dependent float adds.
 */

/**
 * Rows [n0, n1) of the output for every token.
 * x: f32 [T, K] at xOff; w: f32 [N, K] at wOff; bias: f32 [N] at bOff or null;
 * out: f32 [T, N] at oOff. Weight rows are processed in blocks of ~64 KiB so that a block stays
 * in cache while every pair of tokens passes over it.
 */
export function linearKernel(
  x: Float32Array,
  xOff: number,
  w: Float32Array,
  wOff: number,
  bias: Float32Array | null,
  bOff: number,
  out: Float32Array,
  oOff: number,
  T: number,
  N: number,
  K: number,
  n0: number,
  n1: number,
): void {
  const blockRows = Math.max(2, ((16384 / K) | 0) & ~1);
  for (let b0 = n0; b0 < n1; b0 += blockRows) {
    const b1 = Math.min(n1, b0 + blockRows);
    let t = 0;
    for (; t + 1 < T; t += 2) {
      linearTile2(x, xOff + t * K, w, wOff, bias, bOff, out, oOff + t * N, N, K, b0, b1);
    }
    if (t < T) linearRow1(x, xOff + t * K, w, wOff, bias, bOff, out, oOff + t * N, K, b0, b1);
  }
}

/**
 * Two consecutive tokens (x rows at xo and xo + K; out rows at oo and oo + N) against weight rows
 * [n0, n1), two rows at a time: a 2x2 tile with 8 independent accumulators.
 */
export function linearTile2(
  x: Float32Array,
  xo: number,
  w: Float32Array,
  wOff: number,
  bias: Float32Array | null,
  bOff: number,
  out: Float32Array,
  oo: number,
  N: number,
  K: number,
  n0: number,
  n1: number,
): void {
  const xp = xo + K;
  const op = oo + N;
  let n = n0;
  for (; n + 1 < n1; n += 2) {
    const w0 = wOff + n * K;
    const w1 = w0 + K;
    let e00 = 0;
    let o00 = 0;
    let e01 = 0;
    let o01 = 0;
    let e10 = 0;
    let o10 = 0;
    let e11 = 0;
    let o11 = 0;
    let k = 0;
    for (; k + 1 < K; k += 2) {
      const a0 = x[xo + k]!;
      const a1 = x[xo + k + 1]!;
      const c0 = x[xp + k]!;
      const c1 = x[xp + k + 1]!;
      const u0 = w[w0 + k]!;
      const u1 = w[w0 + k + 1]!;
      const v0 = w[w1 + k]!;
      const v1 = w[w1 + k + 1]!;
      e00 += a0 * u0;
      o00 += a1 * u1;
      e01 += a0 * v0;
      o01 += a1 * v1;
      e10 += c0 * u0;
      o10 += c1 * u1;
      e11 += c0 * v0;
      o11 += c1 * v1;
    }
    if (k < K) {
      const a0 = x[xo + k]!;
      const c0 = x[xp + k]!;
      const u0 = w[w0 + k]!;
      const v0 = w[w1 + k]!;
      e00 += a0 * u0;
      e01 += a0 * v0;
      e10 += c0 * u0;
      e11 += c0 * v0;
    }
    if (bias === null) {
      out[oo + n] = e00 + o00;
      out[oo + n + 1] = e01 + o01;
      out[op + n] = e10 + o10;
      out[op + n + 1] = e11 + o11;
    } else {
      const b0 = bias[bOff + n]!;
      const b1 = bias[bOff + n + 1]!;
      out[oo + n] = e00 + o00 + b0;
      out[oo + n + 1] = e01 + o01 + b1;
      out[op + n] = e10 + o10 + b0;
      out[op + n + 1] = e11 + o11 + b1;
    }
  }
  if (n < n1) {
    linearRow1(x, xo, w, wOff, bias, bOff, out, oo, K, n, n1);
    linearRow1(x, xp, w, wOff, bias, bOff, out, op, K, n, n1);
  }
}

/**
 * One token (x row at xo, out row at oo) against weight rows [n0, n1): four rows at a time with
 * two chains each (decode), then single rows.
 */
export function linearRow1(
  x: Float32Array,
  xo: number,
  w: Float32Array,
  wOff: number,
  bias: Float32Array | null,
  bOff: number,
  out: Float32Array,
  oo: number,
  K: number,
  n0: number,
  n1: number,
): void {
  let n = n0;
  for (; n + 3 < n1; n += 4) {
    const w0 = wOff + n * K;
    const w1 = w0 + K;
    const w2 = w1 + K;
    const w3 = w2 + K;
    let e0 = 0;
    let o0 = 0;
    let e1 = 0;
    let o1 = 0;
    let e2 = 0;
    let o2 = 0;
    let e3 = 0;
    let o3 = 0;
    let k = 0;
    for (; k + 1 < K; k += 2) {
      const a0 = x[xo + k]!;
      const a1 = x[xo + k + 1]!;
      e0 += a0 * w[w0 + k]!;
      o0 += a1 * w[w0 + k + 1]!;
      e1 += a0 * w[w1 + k]!;
      o1 += a1 * w[w1 + k + 1]!;
      e2 += a0 * w[w2 + k]!;
      o2 += a1 * w[w2 + k + 1]!;
      e3 += a0 * w[w3 + k]!;
      o3 += a1 * w[w3 + k + 1]!;
    }
    if (k < K) {
      const a0 = x[xo + k]!;
      e0 += a0 * w[w0 + k]!;
      e1 += a0 * w[w1 + k]!;
      e2 += a0 * w[w2 + k]!;
      e3 += a0 * w[w3 + k]!;
    }
    if (bias === null) {
      out[oo + n] = e0 + o0;
      out[oo + n + 1] = e1 + o1;
      out[oo + n + 2] = e2 + o2;
      out[oo + n + 3] = e3 + o3;
    } else {
      out[oo + n] = e0 + o0 + bias[bOff + n]!;
      out[oo + n + 1] = e1 + o1 + bias[bOff + n + 1]!;
      out[oo + n + 2] = e2 + o2 + bias[bOff + n + 2]!;
      out[oo + n + 3] = e3 + o3 + bias[bOff + n + 3]!;
    }
  }
  for (; n < n1; n++) {
    const w0 = wOff + n * K;
    let e0 = 0;
    let o0 = 0;
    let k = 0;
    for (; k + 1 < K; k += 2) {
      e0 += x[xo + k]! * w[w0 + k]!;
      o0 += x[xo + k + 1]! * w[w0 + k + 1]!;
    }
    if (k < K) e0 += x[xo + k]! * w[w0 + k]!;
    out[oo + n] = bias === null ? e0 + o0 : e0 + o0 + bias[bOff + n]!;
  }
}

/**
 * The range [start, end) of chunk `chunk` of `numChunks` when `total` items are split into
 * near-equal chunks whose boundaries are multiples of `align` (the last chunk ends at total).
 * Weight rows of a matmul use align 2 so that 2-row tiles stay whole.
 */
export function chunkRange(total: number, chunk: number, numChunks: number, align: number): [number, number] {
  const start = Math.floor((total * chunk) / numChunks / align) * align;
  const end = chunk + 1 >= numChunks ? total : Math.floor((total * (chunk + 1)) / numChunks / align) * align;
  return [start, end];
}
