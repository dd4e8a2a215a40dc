/**
 * Row-wise ops of the Llama forward on f32 arrays: RMSNorm (plain, fused with the residual add,
 * per head), rotary embedding, SiLU-and-mul, embedding lookup and row gather. They run on the
 * calling thread (they are O(T * H), small next to the matmuls).
 *
 * Rounding follows HF transformers' fp32 modules step by step (each PyTorch op rounds its result
 * to f32; here `Math.fround` marks the same points), while sums run in float64.
 */

/**
 * RMSNorm of one row (HF LlamaRMSNorm): variance = mean(x^2); y = x * rsqrt(variance + eps),
 * rounded to f32; out = weight * y. The variance is summed in float64; the rsqrt factor is
 * rounded to f32 as PyTorch's fp32 rsqrt result is. `out` may alias `x`.
 * x: f32 [H] at xo; weight: f32 [H] at wo; out: f32 [H] at oo.
 */
export function rmsNormRow(
  x: Float32Array,
  xo: number,
  weight: Float32Array,
  wo: number,
  out: Float32Array,
  oo: number,
  H: number,
  eps: number,
): void {
  let ss = 0;
  for (let i = 0; i < H; i++) {
    const v = x[xo + i]!;
    ss += v * v;
  }
  const inv = Math.fround(1 / Math.sqrt(ss / H + eps));
  for (let i = 0; i < H; i++) out[oo + i] = Math.fround(x[xo + i]! * inv) * weight[wo + i]!;
}

/**
 * out[t] = rmsNorm(x[t]) * weight for every row. x, out: f32 [T, H]; weight: f32 [H].
 */
export function rmsNormKernel(
  x: Float32Array,
  weight: Float32Array,
  out: Float32Array,
  T: number,
  H: number,
  eps: number,
): void {
  for (let t = 0; t < T; t++) rmsNormRow(x, t * H, weight, 0, out, t * H, H, eps);
}

/**
 * vLLM fused_add_rms_norm, in place: residual += x (rounded to f32, as HF's
 * `hidden_states = residual + hidden_states`); x = rmsNorm(residual) * weight.
 * x, residual: f32 [T, H]; weight: f32 [H].
 */
export function fusedAddRmsNormKernel(
  x: Float32Array,
  residual: Float32Array,
  weight: Float32Array,
  T: number,
  H: number,
  eps: number,
): void {
  const n = T * H;
  for (let i = 0; i < n; i++) residual[i] = residual[i]! + x[i]!;
  for (let t = 0; t < T; t++) rmsNormRow(residual, t * H, weight, 0, x, t * H, H, eps);
}

/**
 * Qwen3 q_norm / k_norm, in place: every q head and every k head of each token is RMS-normalised
 * over headDim with qWeight / kWeight. qkv: f32 [T, (Hq + 2 * Hkv) * D]; weights: f32 [D].
 */
export function qkNormKernel(
  qkv: Float32Array,
  T: number,
  Hq: number,
  Hkv: number,
  D: number,
  qWeight: Float32Array,
  kWeight: Float32Array,
  eps: number,
): void {
  const rowStride = (Hq + 2 * Hkv) * D;
  for (let t = 0; t < T; t++) {
    const row = t * rowStride;
    for (let h = 0; h < Hq; h++) rmsNormRow(qkv, row + h * D, qWeight, 0, qkv, row + h * D, D, eps);
    for (let h = 0; h < Hkv; h++) {
      const o = row + (Hq + h) * D;
      rmsNormRow(qkv, o, kWeight, 0, qkv, o, D, eps);
    }
  }
}

/**
 * Rotary embedding in place on the first R dims of the q and k heads (HF apply_rotary_pos_emb
 * with rotate_half, the NeoX layout; R < D is partial rotary, HF glm4_moe's `q[..., :rotary_dim]`
 * with the rest passed through): for i < R/2, with c = cos[pos, i] and s = sin[pos, i],
 *   x_i'       = x_i * c - x_{i+R/2} * s
 *   x_{i+R/2}' = x_{i+R/2} * c + x_i * s
 * each product and sum rounded to f32 as in HF's `q * cos + rotate_half(q) * sin`.
 * qkv: f32 [T, (Hq + 2 * Hkv) * D]; positions: i32 [T];
 * cosSin: f32 [maxPositions, R] (cos in [:, :R/2], sin in [:, R/2:]).
 * @throws Error when a position is outside [0, maxPositions).
 */
export function rotaryEmbeddingKernel(
  qkv: Float32Array,
  T: number,
  Hq: number,
  Hkv: number,
  D: number,
  R: number,
  positions: Int32Array,
  cosSin: Float32Array,
  maxPositions: number,
): void {
  const rowStride = (Hq + 2 * Hkv) * D;
  const half = R >> 1;
  const numHeads = Hq + Hkv; // q heads then k heads; v is not rotated
  for (let t = 0; t < T; t++) {
    const pos = positions[t]!;
    if (pos < 0 || pos >= maxPositions) {
      throw new Error(
        `rotaryEmbedding: position ${pos} of token ${t} is outside the table's ${maxPositions} positions`,
      );
    }
    const cs = pos * R;
    for (let h = 0; h < numHeads; h++) {
      const o = t * rowStride + h * D;
      for (let i = 0; i < half; i++) {
        const c = cosSin[cs + i]!;
        const s = cosSin[cs + half + i]!;
        const a = qkv[o + i]!;
        const b = qkv[o + half + i]!;
        qkv[o + i] = Math.fround(a * c) - Math.fround(b * s);
        qkv[o + half + i] = Math.fround(b * c) + Math.fround(a * s);
      }
    }
  }
}

/**
 * out[t, i] = silu(x[t, i]) * x[t, I + i], silu(g) = g / (1 + exp(-g)) rounded to f32 (HF
 * `act_fn(gate_proj(x)) * up_proj(x)`). x: f32 [T, 2I]; out: f32 [T, I].
 */
export function siluAndMulKernel(x: Float32Array, out: Float32Array, T: number, I: number): void {
  for (let t = 0; t < T; t++) {
    const xo = t * 2 * I;
    const oo = t * I;
    for (let i = 0; i < I; i++) {
      const g = x[xo + i]!;
      out[oo + i] = Math.fround(g / (1 + Math.exp(-g))) * x[xo + I + i]!;
    }
  }
}

/**
 * out[b] = src[indices[b]]: copies rows (embedding lookup, gatherRows).
 * src: f32 [R, H]; indices: i32 [B]; out: f32 [B, H].
 * @throws Error naming `what` when an index is outside [0, R).
 */
export function gatherRowsKernel(
  src: Float32Array,
  R: number,
  H: number,
  indices: Int32Array,
  out: Float32Array,
  what: string,
): void {
  for (let b = 0; b < indices.length; b++) {
    const r = indices[b]!;
    if (r < 0 || r >= R) throw new Error(`${what}: index ${r} at row ${b} is outside [0, ${R})`);
    out.set(src.subarray(r * H, (r + 1) * H), b * H);
  }
}
