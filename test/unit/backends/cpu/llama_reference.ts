/**
 * A naive reference forward of the decoder for the end-to-end test: plain float64 arrays,
 * full causal attention over the whole sequence, no paging, formulas written out from HF
 * transformers' modeling_llama.py / modeling_qwen3.py (partial rotary of modeling_glm4_moe.py;
 * the MoE MLP in moe_reference.ts). Also a small in-memory WeightSource.
 */
import type { HostTensorData } from "../../../../src/backends/backend.js";
import { bf16ToF32, f32ToBf16 } from "../../../../src/backends/cpu/index.js";
import { type ModelConfig, mlpKindOf } from "../../../../src/config/model_config.js";
import type { WeightSource } from "../../../../src/models/weights.js";
import { naiveAttention, randF32 } from "./helpers.js";
import { putMoeWeights, referenceMoe } from "./moe_reference.js";

/** Weights by HF name, held as host tensors (f32 or bf16 bits). */
export class MemoryWeightSource implements WeightSource {
  constructor(private readonly tensors: Map<string, HostTensorData>) {}
  get names(): readonly string[] {
    return [...this.tensors.keys()];
  }
  has(name: string): boolean {
    return this.tensors.has(name);
  }
  get(name: string): HostTensorData {
    const t = this.tensors.get(name);
    if (t === undefined) throw new Error(`no tensor ${name}`);
    return t;
  }
  close(): void {}
  /** The f32 value of a weight (bf16 widened). */
  f32(name: string): Float32Array {
    const t = this.get(name);
    return t.dtype === "bf16" ? bf16ToF32(t.data as Uint16Array) : (t.data as Float32Array);
  }
}

/** Stores a random tensor: uniform in [-scale, scale) + center. */
export type PutTensor = (name: string, shape: number[], scale: number, center?: number) => void;

/**
 * Random weights of every tensor the config needs (HF names). Projections are uniform with
 * scale ~ 1.7 / sqrt(fan_in), norms around 1. With `bf16`, every tensor is stored as bf16 bits.
 * MoE layers store their experts packed (`experts.gate_up_proj`) when `packedExperts`, else
 * per expert.
 */
export function randomWeights(
  cfg: ModelConfig,
  rand: () => number,
  bf16: boolean,
  packedExperts = false,
): MemoryWeightSource {
  const {
    hiddenSize: H,
    intermediateSize: I,
    headDim: D,
    numAttentionHeads: Hq,
    numKeyValueHeads: Hkv,
  } = cfg;
  const m = new Map<string, HostTensorData>();
  const put: PutTensor = (name, shape, scale, center = 0) => {
    const n = shape.reduce((a, b) => a * b, 1);
    const v = randF32(rand, n, scale).map((x) => x + center);
    m.set(name, bf16 ? { data: f32ToBf16(v), dtype: "bf16", shape } : { data: v, dtype: "f32", shape });
  };
  const lin = (name: string, out: number, inp: number, bias: boolean) => {
    put(`${name}.weight`, [out, inp], 1.7 / Math.sqrt(inp));
    if (bias) put(`${name}.bias`, [out], 0.1);
  };
  put("model.embed_tokens.weight", [cfg.vocabSize, H], 1);
  for (let l = 0; l < cfg.numHiddenLayers; l++) {
    const p = `model.layers.${l}`;
    put(`${p}.input_layernorm.weight`, [H], 0.2, 1);
    put(`${p}.post_attention_layernorm.weight`, [H], 0.2, 1);
    lin(`${p}.self_attn.q_proj`, Hq * D, H, cfg.attentionBias);
    lin(`${p}.self_attn.k_proj`, Hkv * D, H, cfg.attentionBias);
    lin(`${p}.self_attn.v_proj`, Hkv * D, H, cfg.attentionBias);
    lin(`${p}.self_attn.o_proj`, H, Hq * D, cfg.oProjBias);
    if (cfg.qkNorm) {
      put(`${p}.self_attn.q_norm.weight`, [D], 0.2, 1);
      put(`${p}.self_attn.k_norm.weight`, [D], 0.2, 1);
    }
    if (cfg.moe != null && mlpKindOf(cfg.moe, l) === "moe") {
      putMoeWeights(cfg, cfg.moe, l, put, packedExperts);
      continue;
    }
    lin(`${p}.mlp.gate_proj`, I, H, cfg.mlpBias);
    lin(`${p}.mlp.up_proj`, I, H, cfg.mlpBias);
    lin(`${p}.mlp.down_proj`, H, I, cfg.mlpBias);
  }
  put("model.norm.weight", [H], 0.2, 1);
  if (!cfg.tieWordEmbeddings) put("lm_head.weight", [cfg.vocabSize, H], 1.7 / Math.sqrt(H));
  return new MemoryWeightSource(m);
}

/** y[t] = x[t] @ w^T + b for rows of length K. */
export function matmul(
  x: number[][],
  w: Float32Array,
  b: Float32Array | null,
  N: number,
  K: number,
): number[][] {
  return x.map((row) => {
    const y: number[] = [];
    for (let n = 0; n < N; n++) {
      let s = b === null ? 0 : b[n]!;
      for (let k = 0; k < K; k++) s += row[k]! * w[n * K + k]!;
      y.push(s);
    }
    return y;
  });
}

/** HF LlamaRMSNorm: x / sqrt(mean(x^2) + eps) * w. */
export function rms(x: number[], w: Float32Array, eps: number): number[] {
  const ms = x.reduce((a, v) => a + v * v, 0) / x.length;
  return x.map((v, i) => (v / Math.sqrt(ms + eps)) * w[i]!);
}

/**
 * Logits [L, vocab] at every position of `ids`, computed from scratch in float64.
 * RoPE uses the direct angle pos / theta^(2i/R) on the first R = rotaryDim dims of each head
 * (default rope type only).
 */
export function referenceForward(
  cfg: ModelConfig,
  w: MemoryWeightSource,
  ids: readonly number[],
): number[][] {
  const {
    hiddenSize: H,
    intermediateSize: I,
    headDim: D,
    numAttentionHeads: Hq,
    numKeyValueHeads: Hkv,
  } = cfg;
  const eps = cfg.rmsNormEps;
  const L = ids.length;
  const opt = (name: string) => (w.has(name) ? w.f32(name) : null);
  const emb = w.f32("model.embed_tokens.weight");
  let h = ids.map((id) => Array.from(emb.subarray(id * H, (id + 1) * H)));
  const R = cfg.rotaryDim ?? D;
  const rope = (x: number[], pos: number) => {
    const half = R / 2;
    const out = [...x];
    for (let i = 0; i < half; i++) {
      const a = pos / cfg.rope.theta ** ((2 * i) / R);
      out[i] = x[i]! * Math.cos(a) - x[i + half]! * Math.sin(a);
      out[i + half] = x[i + half]! * Math.cos(a) + x[i]! * Math.sin(a);
    }
    return out;
  };
  for (let l = 0; l < cfg.numHiddenLayers; l++) {
    const p = `model.layers.${l}`;
    const a = `${p}.self_attn`;
    const x = h.map((row) => rms(row, w.f32(`${p}.input_layernorm.weight`), eps));
    const q = matmul(x, w.f32(`${a}.q_proj.weight`), opt(`${a}.q_proj.bias`), Hq * D, H);
    const k = matmul(x, w.f32(`${a}.k_proj.weight`), opt(`${a}.k_proj.bias`), Hkv * D, H);
    const v = matmul(x, w.f32(`${a}.v_proj.weight`), opt(`${a}.v_proj.bias`), Hkv * D, H);
    const heads = (rows: number[][], n: number, normName: string) =>
      rows.map((row, pos) => {
        const out: number[] = [];
        for (let hh = 0; hh < n; hh++) {
          let seg = row.slice(hh * D, (hh + 1) * D);
          if (cfg.qkNorm) seg = rms(seg, w.f32(`${a}.${normName}.weight`), eps);
          out.push(...rope(seg, pos));
        }
        return out;
      });
    const qr = heads(q, Hq, "q_norm");
    const kr = heads(k, Hkv, "k_norm");
    const attn = naiveAttention(qr.flat(), kr.flat(), v.flat(), L, L, Hq, Hkv, D);
    const attnRows = Array.from({ length: L }, (_, t) =>
      Array.from(attn.subarray(t * Hq * D, (t + 1) * Hq * D)),
    );
    const o = matmul(attnRows, w.f32(`${a}.o_proj.weight`), opt(`${a}.o_proj.bias`), H, Hq * D);
    h = h.map((row, t) => row.map((val, i) => val + o[t]![i]!));
    const x2 = h.map((row) => rms(row, w.f32(`${p}.post_attention_layernorm.weight`), eps));
    const down =
      cfg.moe != null && mlpKindOf(cfg.moe, l) === "moe"
        ? referenceMoe(cfg, cfg.moe, w, l, x2)
        : referenceMlp(w, `${p}.mlp`, x2, H, I);
    h = h.map((row, t) => row.map((val, i) => val + down[t]![i]!));
  }
  const final = h.map((row) => rms(row, w.f32("model.norm.weight"), eps));
  const head = cfg.tieWordEmbeddings ? emb : w.f32("lm_head.weight");
  return matmul(final, head, null, cfg.vocabSize, H);
}

/** The SiLU-gated MLP under `prefix` (gate/up/down, biases when stored): rows of H -> rows of H. */
export function referenceMlp(
  w: MemoryWeightSource,
  prefix: string,
  x: number[][],
  H: number,
  I: number,
): number[][] {
  const opt = (name: string) => (w.has(name) ? w.f32(name) : null);
  const g = matmul(x, w.f32(`${prefix}.gate_proj.weight`), opt(`${prefix}.gate_proj.bias`), I, H);
  const u = matmul(x, w.f32(`${prefix}.up_proj.weight`), opt(`${prefix}.up_proj.bias`), I, H);
  const act = g.map((row, t) => row.map((gv, i) => (gv / (1 + Math.exp(-gv))) * u[t]![i]!));
  return matmul(act, w.f32(`${prefix}.down_proj.weight`), opt(`${prefix}.down_proj.bias`), H, I);
}
