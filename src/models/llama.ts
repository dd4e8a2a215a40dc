import type { AttentionBackend } from "../attention/backend.js";
import type { AttentionMetadata, Backend, QkvLayout, Tensor } from "../backends/backend.js";
import type { ModelConfig } from "../config/model_config.js";
import { buildCosSinCache, computeInvFreq } from "./rope.js";
import { type LoadProgress, WeightLoader } from "./weight_loader.js";
import { WeightLoadError, type WeightSource } from "./weights.js";

export type { LoadProgress } from "./weight_loader.js";

/** Weights of one decoder layer, with q/k/v and gate/up fused as vLLM does. */
export interface LlamaLayerWeights {
  inputLayernorm: Tensor; // [H]
  qkvProj: Tensor; // [(Hq + 2*Hkv) * D, H]
  qkvBias: Tensor | null; // [(Hq + 2*Hkv) * D]
  qNorm: Tensor | null; // [D] (Qwen3)
  kNorm: Tensor | null; // [D] (Qwen3)
  oProj: Tensor; // [H, Hq * D]
  oBias: Tensor | null; // [H]
  postAttentionLayernorm: Tensor; // [H]
  gateUpProj: Tensor; // [2 * I, H]
  gateUpBias: Tensor | null; // [2 * I]
  downProj: Tensor; // [H, I]
  downBias: Tensor | null; // [H]
}

/** Everything a forward pass needs besides token ids and positions. */
export interface ForwardContext {
  meta: AttentionMetadata;
  attention: AttentionBackend;
  /** One tensor per layer, [numBlocks, 2, blockSize, numKvHeads, headDim]. */
  kvCaches: readonly Tensor[];
}

/**
 * The Llama decoder (Llama 2/3, Mistral, Qwen2 with q/k/v bias, Qwen3 with q/k norm), written
 * once against the Backend interface. Mirrors HF transformers' LlamaForCausalLM numerics:
 * pre-norm RMSNorm, NeoX-style RoPE, GQA, SiLU-gated MLP, optional tied embeddings.
 */
export class LlamaForCausalLM {
  readonly layout: QkvLayout;

  private constructor(
    readonly config: ModelConfig,
    private readonly backend: Backend,
    private readonly embedTokens: Tensor,
    private readonly layers: LlamaLayerWeights[],
    private readonly norm: Tensor,
    private readonly lmHead: Tensor,
    private readonly cosSinCache: Tensor,
    /** Number of positions the RoPE table covers. */
    readonly maxPositions: number,
  ) {
    this.layout = {
      numHeads: config.numAttentionHeads,
      numKvHeads: config.numKeyValueHeads,
      headDim: config.headDim,
    };
  }

  /**
   * Loads every weight from `source` onto `backend` (models/weight_loader.ts: generated on the
   * device, streamed from files, or uploaded), fusing q/k/v and gate/up rows.
   * @param maxPositions positions covered by the RoPE table (the engine's max model length).
   * @param onProgress bytes of weights placed so far / in all.
   * @throws WeightLoadError when a tensor is missing or has the wrong shape, or a file cannot be
   *   read.
   */
  static load(
    config: ModelConfig,
    source: WeightSource,
    backend: Backend,
    maxPositions: number,
    onProgress?: LoadProgress,
  ): LlamaForCausalLM {
    const {
      hiddenSize: H,
      intermediateSize: I,
      headDim: D,
      numAttentionHeads: Hq,
      numKeyValueHeads: Hkv,
    } = config;
    const loader = new WeightLoader(source, backend);
    const up = (name: string, shape: number[]): Tensor => loader.load(name, shape);
    const upOpt = (name: string, shape: number[], present: boolean): Tensor | null =>
      present ? up(name, shape) : null;
    const upCat = (names: string[], shapes: number[][]): Tensor => loader.loadFused(names, shapes);

    const embedTokens = up("model.embed_tokens.weight", [config.vocabSize, H]);
    const layers: LlamaLayerWeights[] = [];
    for (let l = 0; l < config.numHiddenLayers; l++) {
      const p = `model.layers.${l}`;
      const a = `${p}.self_attn`;
      const qkvNames = ["q", "k", "v"].map((x) => `${a}.${x}_proj`);
      const qkvShapes = [
        [Hq * D, H],
        [Hkv * D, H],
        [Hkv * D, H],
      ];
      const w: LlamaLayerWeights = {
        inputLayernorm: up(`${p}.input_layernorm.weight`, [H]),
        qkvProj: upCat(
          qkvNames.map((n) => `${n}.weight`),
          qkvShapes,
        ),
        qkvBias: config.attentionBias
          ? upCat(
              qkvNames.map((n) => `${n}.bias`),
              qkvShapes.map((s) => [s[0]!]),
            )
          : null,
        qNorm: upOpt(`${a}.q_norm.weight`, [D], config.qkNorm),
        kNorm: upOpt(`${a}.k_norm.weight`, [D], config.qkNorm),
        oProj: up(`${a}.o_proj.weight`, [H, Hq * D]),
        oBias: upOpt(`${a}.o_proj.bias`, [H], config.oProjBias),
        postAttentionLayernorm: up(`${p}.post_attention_layernorm.weight`, [H]),
        gateUpProj: upCat(
          [`${p}.mlp.gate_proj.weight`, `${p}.mlp.up_proj.weight`],
          [
            [I, H],
            [I, H],
          ],
        ),
        gateUpBias: config.mlpBias
          ? upCat([`${p}.mlp.gate_proj.bias`, `${p}.mlp.up_proj.bias`], [[I], [I]])
          : null,
        downProj: up(`${p}.mlp.down_proj.weight`, [H, I]),
        downBias: upOpt(`${p}.mlp.down_proj.bias`, [H], config.mlpBias),
      };
      layers.push(w);
    }
    const norm = up("model.norm.weight", [H]);
    // Tied embeddings reuse embed_tokens as lm_head (HF tie_word_embeddings); some tied
    // checkpoints still store lm_head.weight, which is then identical.
    const lmHead =
      config.tieWordEmbeddings || !source.has("lm_head.weight")
        ? embedTokens
        : up("lm_head.weight", [config.vocabSize, H]);
    if (!config.tieWordEmbeddings && lmHead === embedTokens) {
      throw new WeightLoadError("checkpoint has no tensor lm_head.weight and tie_word_embeddings is false");
    }
    loader.finish(onProgress);
    const cos = buildCosSinCache(computeInvFreq(config.rope, D), maxPositions);
    const cosSinCache = backend.upload(cos, [maxPositions, D], "f32");
    return new LlamaForCausalLM(
      config,
      backend,
      embedTokens,
      layers,
      norm,
      lmHead,
      cosSinCache,
      maxPositions,
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
    return this.backend.linear(selected, this.lmHead, null, "f32");
  }

  /**
   * Runs embedding and every decoder layer; returns the final-normed hidden states [T, H].
   * vLLM's residual scheme: the embedding output is the residual stream, updated in place by
   * each fused "residual += x; x = norm(residual)". Each layer runs in a workspace scope when the
   * backend has one, so a step's workspace holds about one layer's activations.
   */
  private forwardHidden(inputIds: Tensor, positions: Tensor, ctx: ForwardContext): Tensor {
    const b = this.backend;
    const eps = this.config.rmsNormEps;
    const residual = b.embedding(inputIds, this.embedTokens);
    let h: Tensor | null = null;
    for (let l = 0; l < this.layers.length; l++) {
      const prev: Tensor | null = h;
      const run = (): Tensor => this.decoderLayer(l, prev, residual, positions, ctx);
      h = b.workspaceScope !== undefined ? b.workspaceScope(run) : run();
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
    const qkv = b.linear(x, w.qkvProj, w.qkvBias);
    if (w.qNorm !== null && w.kNorm !== null) b.qkNorm(qkv, this.layout, w.qNorm, w.kNorm, eps);
    b.rotaryEmbedding(qkv, this.layout, positions, this.cosSinCache);
    const attnOut = ctx.attention.forward(l, qkv, ctx.kvCaches[l]!, ctx.meta);
    const o = b.linear(attnOut, w.oProj, w.oBias);
    b.fusedAddRmsNorm(o, residual, w.postAttentionLayernorm, eps);
    const gateUp = b.linear(o, w.gateUpProj, w.gateUpBias);
    return b.linear(b.siluAndMul(gateUp), w.downProj, w.downBias);
  }

  /** Frees every weight. */
  dispose(): void {
    const b = this.backend;
    const all = new Set<Tensor>([this.embedTokens, this.norm, this.lmHead, this.cosSinCache]);
    for (const w of this.layers) for (const t of Object.values(w)) if (t !== null) all.add(t as Tensor);
    for (const t of all) b.free(t);
  }
}
