import type { Backend, QkvLayout, Tensor } from "../backends/backend.js";
import type { ModelConfig } from "../config/model_config.js";
import { kvHeadShard, shardOf } from "../core/tensor_parallel.js";
import {
  type AttentionKind,
  type AttentionLayer,
  type ForwardContext,
  type ModelParallel,
  NO_PARALLEL,
  reduceRowParallel,
} from "./blocks.js";
import { buildCosSinCache, computeInvFreq, ropeAttentionFactor } from "./rope.js";
import type { WeightShard } from "./weight_loader.js";

/**
 * GQA attention with the HF Llama family's variants: fused q/k/v (+ biases), Qwen3 / GLM q/k
 * RMSNorm per head before RoPE, NeoX RoPE over the first `rotaryDim` dims of each head (GLM-4.5
 * partial rotary), paged attention through the AttentionBackend, o_proj (+ bias).
 */
class GqaAttentionLayer implements AttentionLayer {
  constructor(
    private readonly backend: Backend,
    private readonly config: ModelConfig,
    private readonly layout: QkvLayout,
    private readonly cosSinCache: Tensor,
    private readonly qkvProj: Tensor, // [(Hq + 2*Hkv) * D, H]
    private readonly qkvBias: Tensor | null, // [(Hq + 2*Hkv) * D]
    private readonly qNorm: Tensor | null, // [D]
    private readonly kNorm: Tensor | null, // [D]
    private readonly oProj: Tensor, // [H, Hq * D]
    private readonly oBias: Tensor | null, // [H]
    private readonly tp: ModelParallel,
  ) {}

  get weights(): readonly Tensor[] {
    return [this.qkvProj, this.qkvBias, this.qNorm, this.kNorm, this.oProj, this.oBias].filter(
      (t): t is Tensor => t !== null,
    );
  }

  forward(l: number, x: Tensor, positions: Tensor, ctx: ForwardContext): Tensor {
    const b = this.backend;
    const qkv = this.projectQkv(x, positions);
    const attnOut = ctx.attention.forward(l, qkv, ctx.kvCaches[l]!, ctx.meta);
    return reduceRowParallel(b.linear(attnOut, this.oProj, this.oBias), this.tp);
  }

  /**
   * qkv = RoPE(qkNorm?(x @ qkvProj^T + bias)): projection + RoPE in one op where the backend has it
   * and no q/k norm sits between; else qkNorm + RoPE in one op where the backend has that.
   */
  private projectQkv(x: Tensor, positions: Tensor): Tensor {
    const b = this.backend;
    if (this.qNorm === null && b.linearRotaryEmbedding !== undefined)
      return b.linearRotaryEmbedding(x, this.qkvProj, this.qkvBias, this.layout, positions, this.cosSinCache);
    const qkv = b.linear(x, this.qkvProj, this.qkvBias);
    const eps = this.config.rmsNormEps;
    if (this.qNorm !== null && this.kNorm !== null && b.qkNormRotaryEmbedding !== undefined) {
      b.qkNormRotaryEmbedding(qkv, this.layout, this.qNorm, this.kNorm, eps, positions, this.cosSinCache);
      return qkv;
    }
    if (this.qNorm !== null && this.kNorm !== null) b.qkNorm(qkv, this.layout, this.qNorm, this.kNorm, eps);
    b.rotaryEmbedding(qkv, this.layout, positions, this.cosSinCache);
    return qkv;
  }
}

/**
 * The GQA attention kind (HF modeling_llama / _qwen3 / _qwen3_moe / _glm4_moe attention). Under
 * tensor parallelism (vLLM QKVParallelLinear + RowParallelLinear) a rank holds its query heads'
 * rows of q_proj, its KV heads' rows of k_proj / v_proj (core/tensor_parallel.ts kvHeadShard:
 * split, or one replicated head), the matching columns of o_proj, and o_proj's bias on rank 0
 * only (it is added once before the all-reduce).
 */
export const GQA_ATTENTION: AttentionKind = {
  layout: (c, tp = NO_PARALLEL) => ({
    numHeads: c.numAttentionHeads / tp.size,
    numKvHeads: kvHeadShard(c.numKeyValueHeads, tp).count,
    headDim: c.headDim,
  }),

  loadShared(config, loader, maxPositions) {
    const R = config.rotaryDim ?? config.headDim;
    const cos = buildCosSinCache(
      computeInvFreq(config.rope, R),
      maxPositions,
      ropeAttentionFactor(config.rope),
    );
    return [loader.backend.upload(cos, [maxPositions, R], "f32")];
  },

  loadLayer(config, loader, l, shared, tp = NO_PARALLEL) {
    const { hiddenSize: H, headDim: D, numAttentionHeads: Hq, numKeyValueHeads: Hkv } = config;
    const a = `model.layers.${l}.self_attn`;
    const names = ["q", "k", "v"].map((x) => `${a}.${x}_proj`);
    const rows = [Hq * D, Hkv * D, Hkv * D];
    const q = shardOf(Hq, tp);
    const kv = kvHeadShard(Hkv, tp);
    const heads = (s: { start: number; count: number }): WeightShard | null =>
      tp.size === 1 ? null : { dim: 0, start: s.start * D, count: s.count * D };
    const shards = [heads(q), heads(kv), heads(kv)];
    const qkvProj = loader.uploadCat(
      names.map((n) => `${n}.weight`),
      rows.map((r) => [r, H]),
      undefined,
      shards,
    );
    const qkvBias = config.attentionBias
      ? loader.uploadCat(
          names.map((n) => `${n}.bias`),
          rows.map((r) => [r]),
          undefined,
          shards,
        )
      : null;
    const oShard: WeightShard | null =
      tp.size === 1 ? null : { dim: 1, start: q.start * D, count: q.count * D };
    return new GqaAttentionLayer(
      loader.backend,
      config,
      GQA_ATTENTION.layout(config, tp),
      shared[0]!,
      qkvProj,
      qkvBias,
      loader.uploadOpt(`${a}.q_norm.weight`, [D], config.qkNorm),
      loader.uploadOpt(`${a}.k_norm.weight`, [D], config.qkNorm),
      loader.upload(`${a}.o_proj.weight`, [H, Hq * D], oShard),
      loader.uploadOpt(`${a}.o_proj.bias`, [H], config.oProjBias && tp.rank === 0),
      tp,
    );
  },
};
