/**
 * The naive reference of the MoE MLP block for the end-to-end test (llama_reference.ts), in
 * float64 from the formulas of HF transformers 5.17 (modeling_qwen3_moe.py
 * Qwen3MoeSparseMoeBlock, modeling_glm4_moe.py / modeling_deepseek_v3.py with noaux_tc routing),
 * independent of the engine's kernels: per token, route, run the k experts one by one, weight,
 * sum, add the shared experts.
 */
import type { ModelConfig, MoeConfig } from "../../../../src/config/model_config.js";
import { type MemoryWeightSource, matmul, type PutTensor, referenceMlp } from "./llama_reference.js";

/**
 * Random MoE tensors of layer `l`: router (scale 1.7/sqrt(H), so the routing is decisive),
 * correction bias (noaux_tc; uniform ±0.2 so it changes some selections), experts (packed
 * `experts.gate_up_proj` [E, 2I, H] + `experts.down_proj` [E, H, I], or per expert) and shared
 * experts.
 */
export function putMoeWeights(
  cfg: ModelConfig,
  moe: MoeConfig,
  l: number,
  put: PutTensor,
  packed: boolean,
): void {
  const H = cfg.hiddenSize;
  const { numExperts: E, moeIntermediateSize: I } = moe;
  const p = `model.layers.${l}.mlp`;
  put(`${p}.gate.weight`, [E, H], 1.7 / Math.sqrt(H));
  if (moe.routing.correctionBias) put(`${p}.gate.e_score_correction_bias`, [E], 0.2);
  if (packed) {
    put(`${p}.experts.gate_up_proj`, [E, 2 * I, H], 1.7 / Math.sqrt(H));
    put(`${p}.experts.down_proj`, [E, H, I], 1.7 / Math.sqrt(I));
  } else {
    for (let e = 0; e < E; e++) {
      put(`${p}.experts.${e}.gate_proj.weight`, [I, H], 1.7 / Math.sqrt(H));
      put(`${p}.experts.${e}.up_proj.weight`, [I, H], 1.7 / Math.sqrt(H));
      put(`${p}.experts.${e}.down_proj.weight`, [H, I], 1.7 / Math.sqrt(I));
    }
  }
  const S = I * moe.numSharedExperts;
  if (S > 0) {
    put(`${p}.shared_experts.gate_proj.weight`, [S, H], 1.7 / Math.sqrt(H));
    put(`${p}.shared_experts.up_proj.weight`, [S, H], 1.7 / Math.sqrt(H));
    put(`${p}.shared_experts.down_proj.weight`, [H, S], 1.7 / Math.sqrt(S));
  }
}

/** Indices of the n largest values (ties: lower index first). */
function topIndices(v: number[], n: number): number[] {
  return [...v.keys()].sort((a, b) => v[b]! - v[a]! || a - b).slice(0, n);
}

/**
 * Expert ids and weights of one token from its router logits (the routing rule of
 * config/moe_config.ts, written out): softmax or sigmoid scores; selection on score + bias;
 * group limit by the sum of each group's two best; weights = unbiased scores, renormalised,
 * scaled.
 */
export function referenceRoute(
  logits: number[],
  moe: MoeConfig,
  bias: Float32Array | null,
): { ids: number[]; weights: number[] } {
  const r = moe.routing;
  const E = logits.length;
  let s: number[];
  if (r.scoring === "softmax") {
    const m = Math.max(...logits);
    const ex = logits.map((x) => Math.exp(x - m));
    const sum = ex.reduce((a, b) => a + b, 0);
    s = ex.map((x) => x / sum);
  } else s = logits.map((x) => 1 / (1 + Math.exp(-x)));
  const choice = s.map((x, e) => x + (bias === null ? 0 : bias[e]!));
  const per = E / r.numGroups;
  const groupScore = Array.from({ length: r.numGroups }, (_, g) => {
    const [a, b] = choice.slice(g * per, (g + 1) * per).sort((x, y) => y - x);
    return a! + b!;
  });
  const groups = new Set(r.numGroups > 1 ? topIndices(groupScore, r.topkGroup) : [0]);
  const masked = choice.map((c, e) => (r.numGroups === 1 || groups.has(Math.floor(e / per)) ? c : -Infinity));
  const ids = topIndices(masked, r.topK);
  const raw = ids.map((e) => s[e]!);
  const sum = raw.reduce((a, b) => a + b, 0);
  const weights = raw.map((x) => (r.renormalize ? x / (sum + 1e-20) : x) * r.routedScalingFactor);
  return { ids, weights };
}

/** One expert's SiLU MLP on a row, from the packed or the per-expert tensors. */
function expertRow(w: MemoryWeightSource, p: string, e: number, x: number[], H: number, I: number): number[] {
  let gate: Float32Array;
  let up: Float32Array;
  let down: Float32Array;
  if (w.has(`${p}.experts.gate_up_proj`)) {
    const gu = w.f32(`${p}.experts.gate_up_proj`).subarray(e * 2 * I * H, (e + 1) * 2 * I * H);
    gate = gu.subarray(0, I * H);
    up = gu.subarray(I * H);
    down = w.f32(`${p}.experts.down_proj`).subarray(e * H * I, (e + 1) * H * I);
  } else {
    gate = w.f32(`${p}.experts.${e}.gate_proj.weight`);
    up = w.f32(`${p}.experts.${e}.up_proj.weight`);
    down = w.f32(`${p}.experts.${e}.down_proj.weight`);
  }
  const g = matmul([x], gate, null, I, H)[0]!;
  const u = matmul([x], up, null, I, H)[0]!;
  const act = g.map((gv, i) => (gv / (1 + Math.exp(-gv))) * u[i]!);
  return matmul([act], down, null, H, I)[0]!;
}

/** The MoE block of layer `l` on rows x2 [L][H] -> [L][H]. */
export function referenceMoe(
  cfg: ModelConfig,
  moe: MoeConfig,
  w: MemoryWeightSource,
  l: number,
  x2: number[][],
): number[][] {
  const H = cfg.hiddenSize;
  const I = moe.moeIntermediateSize;
  const p = `model.layers.${l}.mlp`;
  const logits = matmul(x2, w.f32(`${p}.gate.weight`), null, moe.numExperts, H);
  const bias = moe.routing.correctionBias ? w.f32(`${p}.gate.e_score_correction_bias`) : null;
  const shared =
    moe.numSharedExperts > 0 ? referenceMlp(w, `${p}.shared_experts`, x2, H, I * moe.numSharedExperts) : null;
  return x2.map((x, t) => {
    const { ids, weights } = referenceRoute(logits[t]!, moe, bias);
    const out = new Array<number>(H).fill(0);
    ids.forEach((e, j) => {
      const y = expertRow(w, p, e, x, H, I);
      for (let i = 0; i < H; i++) out[i]! += weights[j]! * y[i]!;
    });
    if (shared !== null) for (let i = 0; i < H; i++) out[i]! += shared[t]![i]!;
    return out;
  });
}
