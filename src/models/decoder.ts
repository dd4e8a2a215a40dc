import type { Backend, QkvLayout, Tensor } from "../backends/backend.js";
import { type ModelConfig, ModelConfigError, mlpKindOf } from "../config/model_config.js";
import { shardOf, vocabIsSharded } from "../core/tensor_parallel.js";
import {
  type AttentionKind,
  type AttentionLayer,
  type ForwardContext,
  type MlpLayer,
  type ModelParallel,
  NO_PARALLEL,
  reduceRowParallel,
} from "./blocks.js";
import { DenseMlp } from "./mlp.js";
import { MoeMlp } from "./moe_mlp.js";
import { type LoadProgress, WeightLoader } from "./weight_loader.js";
import { WeightLoadError, type WeightSource } from "./weights.js";

export type { ForwardContext } from "./blocks.js";
export type { LoadProgress } from "./weight_loader.js";

/** One decoder layer: pre-norm attention and MLP blocks around the residual stream. */
interface DecoderLayer {
  inputLayernorm: Tensor; // [H]
  attention: AttentionLayer;
  postAttentionLayernorm: Tensor; // [H]
  mlp: MlpLayer;
}

/**
 * The decoder skeleton every family shares (DESIGN.md §7): embedding, layers of
 * (input RMSNorm -> attention kind -> post-attention RMSNorm -> MLP kind) around the residual
 * stream, final RMSNorm, lm_head (optionally tied). The attention kind comes from the model
 * registry (GQA for Llama, Mistral, Qwen2/3, Qwen3-MoE, GLM-4.5); each layer's MLP kind (dense
 * or MoE) from the config (`first_k_dense_replace`, `mlp_only_layers`, `decoder_sparse_step`).
 * Mirrors HF transformers' fp32 numerics of those families.
 */
export class DecoderForCausalLM {
  readonly layout: QkvLayout;

  private constructor(
    readonly config: ModelConfig,
    private readonly backend: Backend,
    private readonly embedTokens: Tensor,
    private readonly layers: DecoderLayer[],
    private readonly norm: Tensor,
    private readonly lmHead: Tensor,
    /** Tensors the attention layers share (RoPE tables). */
    private readonly shared: readonly Tensor[],
    /** Number of positions the RoPE table covers. */
    readonly maxPositions: number,
    attention: AttentionKind,
    /** The rank this model was loaded for (its shards; the communicator of its group). */
    readonly tp: ModelParallel,
    /** The LM head holds this rank's vocabulary rows only; logits are gathered (vocab-parallel). */
    private readonly vocabParallel: boolean,
  ) {
    this.layout = attention.layout(config, tp);
    this.vocabStart = vocabParallel ? shardOf(config.vocabSize, tp).start : 0;
  }

  /** First vocabulary row of this rank's embedding and LM head shards (0 when they are whole). */
  private readonly vocabStart: number;

  /**
   * Loads every weight from `source` (weight_loader.ts: declared by each block, then filled in one
   * pass: generated on the device, streamed from files, or uploaded): q/k/v and gate/up rows
   * fused, experts stacked per layer, each HF tensor into its row range.
   * @param maxPositions positions covered by the RoPE table (the engine's max model length).
   * @param onProgress bytes of weights placed so far / in all.
   * @param tp the rank to load (vLLM's Megatron layout: attention_gqa.ts and mlp.ts split their
   *   weights; the embedding and the LM head are vocab-parallel when the vocabulary divides,
   *   else replicated); default one rank. The caller has checked the shapes
   *   (core/tensor_parallel.ts tensorParallelReasons).
   * @throws ModelConfigError when the model has MoE layers and the backend no MoE ops.
   * @throws WeightLoadError when a tensor is missing or has the wrong shape, or a file cannot be
   *   read.
   */
  static load(
    config: ModelConfig,
    source: WeightSource,
    backend: Backend,
    maxPositions: number,
    attention: AttentionKind,
    onProgress?: LoadProgress,
    tp: ModelParallel = NO_PARALLEL,
  ): DecoderForCausalLM {
    const moe = config.moe ?? null;
    if (moe !== null && moe.moeLayers.length > 0 && backend.moe === undefined) {
      throw new ModelConfigError(
        `the ${backend.name} backend cannot run mixture-of-experts models (${config.architecture}) yet; use --device cpu`,
      );
    }
    const H = config.hiddenSize;
    const loader = new WeightLoader(source, backend, onProgress);
    // Vocab-parallel embedding and LM head (vLLM VocabParallelEmbedding / ParallelLMHead) when the
    // vocabulary divides: this rank's rows of each table; lookups of other ranks' tokens give
    // zero rows, summed in by an all-reduce; logits are gathered in forward().
    const vocabParallel = tp.comm !== null && vocabIsSharded(config.vocabSize, tp.size);
    const vocab = vocabParallel ? { dim: 0 as const, ...shardOf(config.vocabSize, tp) } : null;
    const embedTokens = loader.upload("model.embed_tokens.weight", [config.vocabSize, H], vocab);
    const shared = attention.loadShared(config, loader, maxPositions);
    const layers: DecoderLayer[] = [];
    for (let l = 0; l < config.numHiddenLayers; l++) {
      const p = `model.layers.${l}`;
      layers.push({
        inputLayernorm: loader.upload(`${p}.input_layernorm.weight`, [H]),
        attention: attention.loadLayer(config, loader, l, shared, tp),
        postAttentionLayernorm: loader.upload(`${p}.post_attention_layernorm.weight`, [H]),
        mlp:
          moe !== null && mlpKindOf(moe, l) === "moe"
            ? MoeMlp.load(config, moe, loader, l)
            : DenseMlp.load(loader, `${p}.mlp`, H, config.intermediateSize, config.mlpBias, tp),
      });
    }
    const norm = loader.upload("model.norm.weight", [H]);
    // Tied embeddings reuse embed_tokens as lm_head (HF tie_word_embeddings); some tied
    // checkpoints still store lm_head.weight, which is then identical.
    const tied = config.tieWordEmbeddings || !source.has("lm_head.weight");
    if (!config.tieWordEmbeddings && tied) {
      throw new WeightLoadError("checkpoint has no tensor lm_head.weight and tie_word_embeddings is false");
    }
    const lmHead = tied ? embedTokens : loader.upload("lm_head.weight", [config.vocabSize, H], vocab);
    loader.finish();
    return new DecoderForCausalLM(
      config,
      backend,
      embedTokens,
      layers,
      norm,
      lmHead,
      shared,
      maxPositions,
      attention,
      tp,
      vocabParallel,
    );
  }

  /**
   * One forward step over the scheduled tokens of every request in the batch.
   * @param inputIds i32 [T]
   * @param positions i32 [T] absolute positions (< maxPositions)
   * @param logitsIndices i32 [B] rows of T whose next-token logits are wanted; null when no
   *   row needs logits (every request is in the middle of a chunked prefill)
   * @returns logits f32 [B, vocabSize], or null when logitsIndices is null
   */
  forward(inputIds: Tensor, positions: Tensor, ctx: ForwardContext, logitsIndices: Tensor): Tensor;
  forward(
    inputIds: Tensor,
    positions: Tensor,
    ctx: ForwardContext,
    logitsIndices: Tensor | null,
  ): Tensor | null;
  forward(
    inputIds: Tensor,
    positions: Tensor,
    ctx: ForwardContext,
    logitsIndices: Tensor | null,
  ): Tensor | null {
    const hidden = this.forwardHidden(inputIds, positions, ctx);
    if (logitsIndices === null) return null;
    const selected = this.backend.gatherRows(hidden, logitsIndices);
    const logits = this.backend.linear(selected, this.lmHead, null, "f32");
    // [B, V / size] per rank -> [B, V] on every rank (each rank samples the same tokens).
    return this.vocabParallel ? this.tp.comm!.allGatherColumns(logits) : logits;
  }

  /**
   * Runs embedding and every decoder layer; returns the final-normed hidden states [T, H].
   * vLLM's residual scheme: the embedding output is the residual stream, updated in place by
   * each fused "residual += x; x = norm(residual)". Each layer runs in a workspace scope when the
   * backend has one, so a step's workspace holds about one layer's activations.
   */
  private forwardHidden(inputIds: Tensor, positions: Tensor, stepCtx: ForwardContext): Tensor {
    const b = this.backend;
    // DSA "shared" layers read the top-k of the full layer before them, a workspace tensor that a
    // per-layer workspace scope would release: with shared layers, or when the caller takes the
    // selections back in its own dsaTopk map, the step runs unscoped.
    const indexer = this.config.mla?.indexer ?? null;
    const ctx =
      indexer !== null ? { ...stepCtx, dsaTopk: stepCtx.dsaTopk ?? new Map<number, Tensor>() } : stepCtx;
    const scoped =
      b.workspaceScope !== undefined &&
      stepCtx.dsaTopk === undefined &&
      !(indexer?.layerTypes.includes("shared") ?? false);
    const eps = this.config.rmsNormEps;
    const residual = this.vocabParallel
      ? reduceRowParallel(b.embedding(inputIds, this.embedTokens, this.vocabStart), this.tp)
      : b.embedding(inputIds, this.embedTokens);
    let h: Tensor | null = null;
    for (let l = 0; l < this.layers.length; l++) {
      const prev: Tensor | null = h;
      const run = (): Tensor => this.decoderLayer(l, prev, residual, positions, ctx);
      // The previous layer's output is consumed by this layer: reclaimed with its scope, so a
      // prefill of T tokens holds one [T, H] output, not one per layer.
      h = scoped ? b.workspaceScope!(run, prev ?? undefined) : run();
    }
    if (h === null) return b.rmsNorm(residual, this.norm, eps);
    b.fusedAddRmsNorm(h, residual, this.norm, eps);
    return h;
  }

  /**
   * One decoder layer. `h` is the previous layer's output (null for layer 0, whose input is the
   * residual itself); returns this layer's MLP output, to be added to the residual next.
   */
  private decoderLayer(
    l: number,
    h: Tensor | null,
    residual: Tensor,
    positions: Tensor,
    ctx: ForwardContext,
  ): Tensor {
    const b = this.backend;
    const eps = this.config.rmsNormEps;
    const w = this.layers[l]!;
    let x: Tensor;
    if (h === null) x = b.rmsNorm(residual, w.inputLayernorm, eps);
    else {
      b.fusedAddRmsNorm(h, residual, w.inputLayernorm, eps);
      x = h;
    }
    const o = w.attention.forward(l, x, positions, ctx);
    b.fusedAddRmsNorm(o, residual, w.postAttentionLayernorm, eps);
    return w.mlp.forward(o);
  }

  /** Frees every weight. */
  dispose(): void {
    const all = new Set<Tensor>([this.embedTokens, this.norm, this.lmHead, ...this.shared]);
    for (const w of this.layers) {
      for (const t of [w.inputLayernorm, w.postAttentionLayernorm, ...w.attention.weights, ...w.mlp.weights])
        all.add(t);
    }
    for (const t of all) this.backend.free(t);
  }
}
