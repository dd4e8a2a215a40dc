import type { RopeConfig } from "../config/model_config.js";

/**
 * Inverse frequencies of rotary embedding, [headDim / 2], computed in fp32 like HF
 * (transformers/modeling_rope_utils.py: _compute_default_rope_parameters,
 * _compute_linear_scaling_rope_parameters, _compute_llama3_parameters,
 * _compute_yarn_parameters).
 */
export function computeInvFreq(rope: RopeConfig, headDim: number): Float32Array {
  const half = headDim / 2;
  const inv = new Float32Array(half);
  for (let i = 0; i < half; i++) {
    // HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), each step rounded to fp32.
    const exponent = Math.fround((2 * i) / headDim);
    inv[i] = Math.fround(1 / Math.fround(rope.theta ** exponent));
  }
  if (rope.type === "linear") {
    for (let i = 0; i < half; i++) inv[i] = Math.fround(inv[i]! / rope.factor);
  } else if (rope.type === "llama3") {
    const { factor, lowFreqFactor, highFreqFactor, originalMaxPositionEmbeddings: oldLen } = rope;
    const lowFreqWavelen = oldLen / lowFreqFactor;
    const highFreqWavelen = oldLen / highFreqFactor;
    for (let i = 0; i < half; i++) {
      const f = inv[i]!;
      const wavelen = (2 * Math.PI) / f;
      let v = wavelen > lowFreqWavelen ? f / factor : f;
      const isMedium = !(wavelen < highFreqWavelen) && !(wavelen > lowFreqWavelen);
      if (isMedium) {
        const smooth = (oldLen / wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
        v = (1 - smooth) * (v / factor) + smooth * v;
      }
      inv[i] = Math.fround(v);
    }
  } else if (rope.type === "yarn") {
    yarnInvFreq(rope, headDim, inv);
  }
  return inv;
}

/**
 * YaRN (arXiv 2309.00071) in place over the default frequencies `inv` (= 1 / pos_freqs): the
 * dims below the correction range keep their frequency (extrapolation), those above it are
 * divided by `factor` (interpolation), a linear ramp in between (HF _compute_yarn_parameters).
 */
function yarnInvFreq(rope: RopeConfig, dim: number, inv: Float32Array): void {
  const y = rope.yarn;
  if (y === undefined) throw new Error("yarn RoPE without its parameters");
  const base = rope.theta;
  const correctionDim = (rot: number) =>
    (dim * Math.log(rope.originalMaxPositionEmbeddings / (rot * 2 * Math.PI))) / (2 * Math.log(base));
  let low = correctionDim(y.betaFast);
  let high = correctionDim(y.betaSlow);
  if (y.truncate) {
    low = Math.floor(low);
    high = Math.ceil(high);
  }
  low = Math.max(low, 0);
  high = Math.min(high, dim - 1);
  if (low === high) high += 0.001; // HF linear_ramp_factor: no singularity
  for (let i = 0; i < inv.length; i++) {
    // HF: pos_freqs = base ** (arange(0, dim, 2) / dim); 1 / pos_freqs; 1 / (factor * pos_freqs).
    const posFreq = Math.fround(base ** Math.fround((2 * i) / dim));
    const extrapolation = Math.fround(1 / posFreq);
    const interpolation = Math.fround(1 / Math.fround(rope.factor * posFreq));
    const ramp = Math.fround(Math.min(1, Math.max(0, Math.fround((i - low) / (high - low)))));
    const extraFactor = Math.fround(1 - ramp);
    inv[i] = Math.fround(
      Math.fround(interpolation * Math.fround(1 - extraFactor)) + Math.fround(extrapolation * extraFactor),
    );
  }
}

/**
 * The factor HF multiplies cos and sin by (`attention_scaling` of the rotary embedding): 1 except
 * for YaRN, where it is `attention_factor` when given, else mscale(factor, mscale) /
 * mscale(factor, mscale_all_dim) when both are set (DeepSeek), else mscale(factor)
 * (mscale(s, m) = 0.1 m ln s + 1 for s > 1, else 1).
 */
export function ropeAttentionFactor(rope: RopeConfig): number {
  const y = rope.yarn;
  if (rope.type !== "yarn" || y === undefined) return 1;
  if (y.attentionFactor !== null) return y.attentionFactor;
  const m = (s: number, k: number) => (s <= 1 ? 1 : 0.1 * k * Math.log(s) + 1);
  if (y.mscale && y.mscaleAllDim) return m(rope.factor, y.mscale) / m(rope.factor, y.mscaleAllDim);
  return m(rope.factor, 1);
}

/**
 * cos/sin table for positions [0, maxPositions): f32 [maxPositions, headDim], cos in the first
 * half of each row and sin in the second. Angle = fp32(pos * invFreq_i), as HF's fp32 matmul;
 * both multiplied by `scale` (ropeAttentionFactor; 1 leaves them as they are).
 */
export function buildCosSinCache(invFreq: Float32Array, maxPositions: number, scale = 1): Float32Array {
  const half = invFreq.length;
  const out = new Float32Array(maxPositions * half * 2);
  for (let p = 0; p < maxPositions; p++) {
    const row = p * half * 2;
    for (let i = 0; i < half; i++) {
      const angle = Math.fround(p * invFreq[i]!);
      out[row + i] = scale === 1 ? Math.cos(angle) : Math.fround(Math.cos(angle)) * scale;
      out[row + half + i] = scale === 1 ? Math.sin(angle) : Math.fround(Math.sin(angle)) * scale;
    }
  }
  return out;
}
