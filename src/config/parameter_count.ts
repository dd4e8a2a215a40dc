/**
 * Parameter counts of a {@link ModelConfig} from its shapes alone (no weights read): every weight
 * (`countParameters`), what one token reads (`countActiveParameters`, top-k routed experts), and
 * what one tensor-parallel rank holds (`weightSplit`, for `hisparse plan`).
 */
import type { MlaConfig } from "./mla_config.js";
import type { ModelConfig } from "./model_config.js";
import { mlpKindOf } from "./moe_config.js";

/**
 * Parameter count (weights only; tied lm_head counted once). MoE layers count every routed
 * expert, the router (and its correction bias) and the shared experts, so the figure is what the
 * weights occupy; {@link countActiveParameters} counts what one token reads.
 */
export function countParameters(c: ModelConfig): number {
  return countWeights(c, c.moe?.numExperts ?? 0);
}

/**
 * Parameters one token touches: every weight except the routed experts it is not sent to
 * (`num_experts_per_tok` of them are counted per MoE layer). Equals countParameters for dense
 * models. Source of "A3B" in Qwen3-30B-A3B (3.3 B of 30.5 B).
 */
export function countActiveParameters(c: ModelConfig): number {
  return countWeights(c, c.moe?.routing.topK ?? 0);
}

/** Weights with `routedExperts` routed experts counted in each MoE layer. */
function countWeights(c: ModelConfig, routedExperts: number): number {
  const s = splitWeights(c, routedExperts);
  return s.routedExperts + s.sharded + s.replicated;
}

/**
 * Parameters by how tensor parallelism places them (vLLM's Megatron-style layers): split over
 * the ranks, or the same on every rank. `hisparse plan` divides the first two by the rank count.
 */
export interface WeightSplit {
  /** Every routed expert of every MoE layer (split by TP, or placed whole by EP: 1/tp per rank). */
  routedExperts: number;
  /**
   * Split by TP: embedding (vocab-parallel) and lm_head, GQA q/k/v/o, MLA q_b_proj (or q_proj),
   * kv_b_proj and o_proj, dense MLPs and shared experts.
   */
  sharded: number;
  /**
   * On every rank: norms, MoE routers, MLA q_a_proj and kv_a_proj_with_mqa (vLLM
   * ReplicatedLinear) with their norms and biases, and the DSA indexer.
   */
  replicated: number;
}

/** {@link WeightSplit} of every weight (every routed expert counted). */
export function weightSplit(c: ModelConfig): WeightSplit {
  return splitWeights(c, c.moe?.numExperts ?? 0);
}

function splitWeights(c: ModelConfig, routedExperts: number): WeightSplit {
  const H = c.hiddenSize;
  const D = c.headDim;
  const gqa = H * c.numAttentionHeads * D * 2 + H * c.numKeyValueHeads * D * 2;
  const attnBias = c.attentionBias ? (c.numAttentionHeads + 2 * c.numKeyValueHeads) * D : 0;
  const norms = 2 * H + (c.qkNorm ? 2 * D : 0);
  const embed = c.vocabSize * H;
  const s: WeightSplit = {
    routedExperts: 0,
    sharded: embed + (c.tieWordEmbeddings ? 0 : embed),
    replicated: H,
  };
  for (let l = 0; l < c.numHiddenLayers; l++) {
    if (c.mla != null) {
      const a = mlaAttentionWeights(c, c.mla, l);
      s.sharded += a.sharded;
      s.replicated += a.replicated;
    } else s.sharded += gqa + attnBias;
    s.replicated += norms;
    const moe = c.moe;
    if (moe === null || moe === undefined || mlpKindOf(moe, l) === "dense") {
      s.sharded += 3 * H * c.intermediateSize;
      continue;
    }
    const E = moe.numExperts;
    s.replicated += E * H + (moe.routing.correctionBias ? E : 0);
    s.sharded += 3 * H * moe.moeIntermediateSize * moe.numSharedExperts;
    s.routedExperts += routedExperts * 3 * H * moe.moeIntermediateSize;
  }
  return s;
}

/**
 * Weights of layer `l`'s MLA attention (HF DeepseekV3Attention, + the DSA indexer of a full
 * layer): q_a_proj, q_a_layernorm, q_b_proj (or q_proj), kv_a_proj_with_mqa, kv_a_layernorm,
 * kv_b_proj, o_proj (+ biases with attention_bias); indexer wq_b, wk, k_norm (weight and bias),
 * weights_proj. Sharded by TP: q_b_proj / q_proj, kv_b_proj, o_proj; the rest replicated.
 */
function mlaAttentionWeights(
  c: ModelConfig,
  m: MlaConfig,
  l: number,
): { sharded: number; replicated: number } {
  const H = c.hiddenSize;
  const Hq = c.numAttentionHeads;
  const qk = m.qkNopeHeadDim + m.qkRopeHeadDim;
  const qA = m.qLoraRank === null ? 0 : H * m.qLoraRank + m.qLoraRank;
  const qB = m.qLoraRank === null ? H * Hq * qk : m.qLoraRank * Hq * qk;
  const kvA = H * (m.kvLoraRank + m.qkRopeHeadDim) + m.kvLoraRank;
  const kvB = m.kvLoraRank * Hq * (m.qkNopeHeadDim + m.vHeadDim);
  const o = Hq * m.vHeadDim * H;
  const bias = c.attentionBias ? (m.qLoraRank ?? 0) + m.kvLoraRank + m.qkRopeHeadDim + H : 0;
  const ix = m.indexer;
  const indexer =
    ix === null || ix.layerTypes[l] !== "full"
      ? 0
      : (m.qLoraRank ?? 0) * ix.numHeads * ix.headDim + H * ix.headDim + 2 * ix.headDim + H * ix.numHeads;
  return { sharded: qB + kvB + o, replicated: qA + kvA + bias + indexer };
}
