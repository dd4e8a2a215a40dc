import type { RopeConfig } from "../config/model_config.js";

/**
 * Inverse frequencies of rotary embedding, [headDim / 2], computed in fp32 like HF
 * (transformers/modeling_rope_utils.py: _compute_default_rope_parameters,
 * _compute_linear_scaling_rope_parameters, _compute_llama3_parameters).
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
  }
  return inv;
}

/**
 * cos/sin table for positions [0, maxPositions): f32 [maxPositions, headDim], cos in the first
 * half of each row and sin in the second. Angle = fp32(pos * invFreq_i), as HF's fp32 matmul.
 */
export function buildCosSinCache(invFreq: Float32Array, maxPositions: number): Float32Array {
  const half = invFreq.length;
  const out = new Float32Array(maxPositions * half * 2);
  for (let p = 0; p < maxPositions; p++) {
    const row = p * half * 2;
    for (let i = 0; i < half; i++) {
      const angle = Math.fround(p * invFreq[i]!);
      out[row + i] = Math.cos(angle);
      out[row + half + i] = Math.sin(angle);
    }
  }
  return out;
}
