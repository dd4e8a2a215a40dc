import type { Backend, BackendMlaOps, Tensor } from "../backends/backend.js";
import type { DsaIndexerConfig, MlaConfig, ModelConfig } from "../config/model_config.js";
import type { ForwardContext } from "./blocks.js";
import type { WeightLoader } from "./weight_loader.js";
import type { WeightSpec } from "./weight_spec.js";

/** eps of the indexer's k_norm (HF: nn.LayerNorm(index_head_dim, eps=1e-6)). */
const INDEXER_K_NORM_EPS = 1e-6;

/**
 * The DSA lightning indexer of one full layer (HF DeepseekV32Indexer; GlmMoeDsaIndexer with
 * interleaved RoPE), written against Backend.mla and the MLA attention backend:
 *   q = wq_b(qr) [T, Hi, Di], RoPE on each head's first R dims (qr: the q-LoRA output);
 *   k = LayerNorm(wk(x)) [T, Di], RoPE on its first R dims;
 *   w = weights_proj(x) [T, Hi];
 *   logits[t, i] = sum_h w[t,h] Hi^-0.5 relu(Di^-0.5 q[t,h] . k_i) over positions i <= t's;
 *   the index_topk best positions (Backend.mla.topkIndices).
 * wk and weights_proj are rows of the layer's fused down projection (attention_mla.ts), so
 * `forward` receives their outputs as columns of `a`. HF's reference kernel quantises q and k to
 * fp8 and applies a Hadamard transform to both; transformers skips both (the transform keeps dot
 * products) and so does this fp32 path.
 */
export class DsaIndexer {
  private constructor(
    private readonly ops: BackendMlaOps,
    private readonly config: DsaIndexerConfig,
    private readonly ropeDim: number,
    private readonly wqB: Tensor, // [Hi * Di, qLoraRank]
    private readonly kNormWeight: Tensor, // [Di]
    private readonly kNormBias: Tensor, // [Di]
  ) {}

  /** Loads `model.layers.{l}.self_attn.indexer.{wq_b, k_norm}` (wk, weights_proj: attention_mla.ts). */
  static load(mla: MlaConfig, loader: WeightLoader, l: number): DsaIndexer {
    const ix = mla.indexer!;
    const ops = loader.backend.mla!;
    const p = `model.layers.${l}.self_attn.indexer`;
    return new DsaIndexer(
      ops,
      ix,
      mla.qkRopeHeadDim,
      loader.upload(`${p}.wq_b.weight`, [ix.numHeads * ix.headDim, mla.qLoraRank!]),
      loader.upload(`${p}.k_norm.weight`, [ix.headDim]),
      loader.upload(`${p}.k_norm.bias`, [ix.headDim]),
    );
  }

  get weights(): readonly Tensor[] {
    return [this.wqB, this.kNormWeight, this.kNormBias];
  }

  /**
   * The layer's top-k positions per token, i32 [T, index_topk] (ascending, -1 after the last).
   * @param qr [T, qLoraRank] q_a_layernorm output
   * @param a [T, *] the fused down projection; its columns [kCol, kCol + Di) are wk(x) and
   *   [kCol + Di, kCol + Di + Hi) weights_proj(x)
   */
  forward(
    backend: Backend,
    l: number,
    qr: Tensor,
    a: Tensor,
    kCol: number,
    positions: Tensor,
    cosSin: Tensor,
    ctx: ForwardContext,
  ): Tensor {
    const { ops, config: ix } = this;
    const { numHeads: Hi, headDim: Di } = ix;
    const R = this.ropeDim;
    const q = backend.linear(qr, this.wqB, null);
    ops.rotaryStrided(q, { offset: 0, stride: Di, count: Hi }, positions, cosSin, ix.ropeInterleave);
    const k = ops.layerNorm(
      ops.sliceColumns(a, kCol, Di),
      this.kNormWeight,
      this.kNormBias,
      INDEXER_K_NORM_EPS,
    );
    ops.rotaryStrided(k, { offset: 0, stride: R, count: 1 }, positions, cosSin, ix.ropeInterleave);
    const headWeights = ops.sliceColumns(a, kCol + Di, Hi);
    const cache = ctx.indexerKeyCaches?.[l];
    if (cache == null || ctx.mlaAttention === undefined)
      throw new Error(`layer ${l} runs the DSA indexer but the step has no indexer key cache for it`);
    const scales = { softmaxScale: Di ** -0.5, headWeightScale: Hi ** -0.5 };
    return ctx.mlaAttention.indexerTopk(
      l,
      { q, k, headWeights, scales, topk: ix.topk, positions },
      cache,
      ctx.meta,
    );
  }
}

/** Names and shapes of full layer `l`'s indexer tensors (checkpoint names; for dummy weights). */
export function indexerWeightSpecs(config: ModelConfig, mla: MlaConfig, l: number): WeightSpec[] {
  const ix = mla.indexer!;
  const p = `model.layers.${l}.self_attn.indexer`;
  const H = config.hiddenSize;
  return [
    { name: `${p}.wq_b.weight`, shape: [ix.numHeads * ix.headDim, mla.qLoraRank!], kind: "matrix" },
    { name: `${p}.wk.weight`, shape: [ix.headDim, H], kind: "matrix" },
    { name: `${p}.k_norm.weight`, shape: [ix.headDim], kind: "norm" },
    { name: `${p}.k_norm.bias`, shape: [ix.headDim], kind: "bias" },
    { name: `${p}.weights_proj.weight`, shape: [ix.numHeads, H], kind: "matrix" },
  ];
}
