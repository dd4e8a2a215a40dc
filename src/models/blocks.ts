/**
 * The parts a decoder layer is made of (DESIGN.md §7: attention kind x MLP kind), as the decoder
 * skeleton (decoder.ts) sees them. GQA attention (attention_gqa.ts) and the dense and MoE MLPs
 * (mlp.ts, moe_mlp.ts) implement them; an MLA attention kind implements AttentionKind too.
 */
import type { AttentionBackend } from "../attention/backend.js";
import type { MlaAttentionBackend } from "../attention/mla.js";
import type { AttentionMetadata, QkvLayout, Tensor } from "../backends/backend.js";
import type { DeviceCommunicator } from "../backends/collectives.js";
import type { ModelConfig } from "../config/model_config.js";
import type { TensorParallelRank } from "../core/tensor_parallel.js";
import type { WeightLoader } from "./weight_loader.js";

/** Everything a forward pass needs besides token ids and positions. */
export interface ForwardContext {
  meta: AttentionMetadata;
  attention: AttentionBackend;
  /**
   * One tensor per layer, [numBlocks, 2, blockSize, numKvHeads, headDim]; for MLA models the
   * latent caches [numBlocks, blockSize, kvLoraRank + qkRopeHeadDim].
   */
  kvCaches: readonly Tensor[];
  /** MLA models: how the MLA layers use their caches (attention/mla.ts). */
  mlaAttention?: MlaAttentionBackend;
  /** DSA models: per layer, the indexer key cache [numBlocks, blockSize, indexHeadDim] of a full layer, else null. */
  indexerKeyCaches?: readonly (Tensor | null)[];
  /**
   * DSA models, set by the decoder for one forward: the top-k (i32 [T, index_topk]) each full
   * layer computed, read by the "shared" layers after it. A caller that passes its own map gets
   * the selections back after the forward (valid until the next workspace reset: the forward
   * then runs without per-layer workspace scopes).
   */
  dsaTopk?: Map<number, Tensor>;
  /**
   * DSA models, verification only (teacher-forced selection, test/native/mla_parity.ts): per
   * full layer, the top-k (i32 [T, index_topk], on this backend) to attend to instead of the
   * indexer's own, so two backends can be compared on the same selection.
   */
  dsaForcedTopk?: ReadonlyMap<number, Tensor>;
}

/**
 * The rank a model is loaded for (tensor parallelism, vLLM's Megatron layout): its slice of
 * every split weight, and the communicator of its group for the all-reduce after each
 * row-parallel linear and the gather of vocab-parallel logits. Size 1: the whole model, no
 * collective.
 */
export interface ModelParallel extends TensorParallelRank {
  /** null on the single-worker path (size 1, no collective). */
  comm: DeviceCommunicator | null;
}

/** The single-rank case. */
export const NO_PARALLEL: ModelParallel = { rank: 0, size: 1, comm: null };

/**
 * x summed over the ranks (in place) after a row-parallel linear; nothing without a
 * communicator (one rank on the single-worker path; one rank through the collectives path still
 * calls it, which is how the NCCL path is checked against the single-GPU one).
 */
export function reduceRowParallel(x: Tensor, tp: ModelParallel): Tensor {
  tp.comm?.allReduce(x);
  return x;
}

/** One decoder layer's attention block: normed hidden states in, the o_proj output out. */
export interface AttentionLayer {
  /**
   * @param l the layer index (selects its KV cache and the attention backend's layer state)
   * @param x [T, H] input_layernorm output
   * @param positions i32 [T]
   * @returns [T, H]
   */
  forward(l: number, x: Tensor, positions: Tensor, ctx: ForwardContext): Tensor;
  /** The layer's own weights (for dispose). */
  readonly weights: readonly Tensor[];
}

/**
 * An attention kind (DESIGN.md §7: GQA now, MLA next): its KV layout, what its layers share
 * (the RoPE table) and how one layer loads. The decoder skeleton (decoder.ts) calls it.
 */
export interface AttentionKind {
  /** The heads one rank computes (`tp` default: one rank, every head). */
  layout(config: ModelConfig, tp?: ModelParallel): QkvLayout;
  /** Uploads the tensors every layer shares; `maxPositions` rows of RoPE. */
  loadShared(config: ModelConfig, loader: WeightLoader, maxPositions: number): readonly Tensor[];
  /** Loads layer l's weights, the rank's shards of them when `tp.size` > 1. */
  loadLayer(
    config: ModelConfig,
    loader: WeightLoader,
    l: number,
    shared: readonly Tensor[],
    tp?: ModelParallel,
  ): AttentionLayer;
}

/** One decoder layer's MLP block: post_attention_layernorm output [T, H] in, [T, H] out. */
export interface MlpLayer {
  forward(x: Tensor): Tensor;
  /** The block's own weights (for dispose). */
  readonly weights: readonly Tensor[];
}
