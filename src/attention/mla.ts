import type {
  AttentionMetadata,
  Backend,
  BackendMlaOps,
  IndexerScales,
  MlaDims,
  Tensor,
} from "../backends/backend.js";

/** What one MLA layer hands its attention backend in a step (models/attention_mla.ts). */
export interface MlaLayerInputs {
  /** [T, Hq * (N + R)] queries, RoPE applied to the rope part of each head. */
  q: Tensor;
  /** [T, C] this step's compressed KV after kv_a_layernorm (the first C columns of a latent row). */
  kvc: Tensor;
  /** [T, R] this step's k_pe after RoPE (the last R columns of a latent row). */
  kpe: Tensor;
  /** [Hq * (N + Vd), C] kv_b_proj: per head W_UK (N rows) then W_UV (Vd rows). */
  kvBProj: Tensor;
  dims: MlaDims;
  /** DSA: i32 [T, K] the positions each query attends to (-1 = none); null: every causal position. */
  topkIndices: Tensor | null;
}

/** What a full DSA layer's indexer hands the attention backend in a step (models/dsa_indexer.ts). */
export interface IndexerInputs {
  /** [T, Hi * Di] indexer queries after RoPE. */
  q: Tensor;
  /** [T, Di] this step's indexer keys after k_norm and RoPE. */
  k: Tensor;
  /** [T, Hi] weights_proj output (unscaled). */
  headWeights: Tensor;
  scales: IndexerScales;
  /** Tokens each query selects (`index_topk`). */
  topk: number;
  /** i32 [T] absolute position of each token. */
  positions: Tensor;
}

/**
 * How MLA layers use their KV groups in a step: the latent rows (every layer) and the DSA
 * indexer keys (full DSA layers). The dense-resident implementation keeps every row in the
 * device pool ({@link DenseMlaAttention}); Hybrid HiSparse for DSA models (issue 15) replaces it
 * with one that resolves the selected latent rows through a hot buffer, while the indexer keys
 * stay resident. Metadata travels as an argument.
 */
export interface MlaAttentionBackend {
  /**
   * Writes this step's latent rows of layer `layerIdx` into `latentCache`
   * ([numBlocks, blockSize, C + R]) and returns the attention output [T, Hq * Vd].
   */
  forward(layerIdx: number, inputs: MlaLayerInputs, latentCache: Tensor, meta: AttentionMetadata): Tensor;
  /**
   * Writes this step's indexer keys of full DSA layer `layerIdx` into `indexKeyCache`
   * ([numBlocks, blockSize, Di]) and returns each token's top-k positions, i32 [T, topk]
   * (Backend.mla.topkIndices: ascending, -1 after the last).
   */
  indexerTopk(
    layerIdx: number,
    inputs: IndexerInputs,
    indexKeyCache: Tensor,
    meta: AttentionMetadata,
  ): Tensor;
  /**
   * Benchmarks only (ModelRunner fastPrefill): writes given latent rows [T, C + R] of layer
   * `layerIdx` and, for a full DSA layer, index keys [T, Di] where the step's forward would
   * write them, running no attention.
   */
  fillRows?(
    layerIdx: number,
    latentRows: Tensor,
    indexKeys: Tensor | null,
    latentCache: Tensor,
    indexKeyCache: Tensor | null,
    meta: AttentionMetadata,
  ): void;
}

/**
 * Dense-resident MLA / DSA (vLLM's behaviour without HiSparse, the baseline of issue 15): every
 * latent and indexer row of every request in the device pool, addressed by the step's block
 * tables and slot mapping (one block id names a page of both groups); DSA layers attend over
 * the indexer's top-k rows, plain MLA over every causal row.
 */
export class DenseMlaAttention implements MlaAttentionBackend {
  private readonly ops: BackendMlaOps;

  /** @throws Error when the backend has no MLA ops. */
  constructor(
    backend: Backend,
    private readonly blockSize: number,
  ) {
    if (backend.mla === undefined) throw new Error(`the ${backend.name} backend has no MLA ops`);
    this.ops = backend.mla;
  }

  forward(_layerIdx: number, x: MlaLayerInputs, latentCache: Tensor, meta: AttentionMetadata): Tensor {
    this.ops.writeRows(x.kvc, latentCache, 0, meta.slotMapping);
    this.ops.writeRows(x.kpe, latentCache, x.dims.kvLoraRank, meta.slotMapping);
    return this.ops.attention(x.q, latentCache, x.kvBProj, meta, x.dims, this.blockSize, x.topkIndices);
  }

  fillRows(
    _layerIdx: number,
    latentRows: Tensor,
    indexKeys: Tensor | null,
    latentCache: Tensor,
    indexKeyCache: Tensor | null,
    meta: AttentionMetadata,
  ): void {
    this.ops.writeRows(latentRows, latentCache, 0, meta.slotMapping);
    if (indexKeys !== null && indexKeyCache !== null)
      this.ops.writeRows(indexKeys, indexKeyCache, 0, meta.slotMapping);
  }

  indexerTopk(_layerIdx: number, x: IndexerInputs, indexKeyCache: Tensor, meta: AttentionMetadata): Tensor {
    this.ops.writeRows(x.k, indexKeyCache, 0, meta.slotMapping);
    // The block table's width in tokens: >= every length of the step, and static in a captured
    // graph (whose tables have max_model_len / blockSize columns), so replays score every row.
    const width = Math.max(meta.maxSeqLen, (meta.blockTables.shape[1] ?? 0) * this.blockSize, 1);
    const logits = this.ops.indexerLogits(
      x.q,
      x.headWeights,
      indexKeyCache,
      meta,
      this.blockSize,
      x.scales,
      width,
    );
    return this.ops.topkIndices(logits, x.positions, x.topk);
  }
}
