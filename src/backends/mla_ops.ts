/**
 * The multi-head latent attention ops of the Backend contract (Backend.mla, backend.ts): MLA
 * attention, paged row caches, strided RoPE, LayerNorm, the DSA indexer's logits and its causal
 * top-k. Implemented by cpu/mla_ops.ts and cuda/mla_ops.ts.
 */

import type { AttentionMetadata } from "./attention_types.js";
import type { DType, Tensor } from "./tensor.js";

/** Dimensions of one MLA attention layer (HF DeepseekV3Config names; config/mla_config.ts). */
export interface MlaDims {
  /** Query heads Hq (`num_attention_heads`). */
  numHeads: number;
  /** N: per-head q/k dims without RoPE (`qk_nope_head_dim`). */
  qkNopeHeadDim: number;
  /** R: per-head q dims with RoPE, and the shared rotary key dims (`qk_rope_head_dim`). */
  qkRopeHeadDim: number;
  /** Vd: per-head value dims (`v_head_dim`). */
  vHeadDim: number;
  /** C: rank of the compressed KV (`kv_lora_rank`); a latent row is C + R elements. */
  kvLoraRank: number;
  /** Softmax scale (MlaConfig.softmaxScale: (N + R)^-0.5, YaRN mscale^2 for DeepSeek). */
  softmaxScale: number;
}

/**
 * The heads a strided rotary call rotates: for head h in [0, count), the R = cosSin-width columns
 * starting at offset + h * stride of every row (e.g. the rope part of each query head of
 * q_b_proj's output: offset N, stride N + R, count Hq; a latent row's k_pe: offset 0, count 1).
 */
export interface RotarySpan {
  offset: number;
  stride: number;
  count: number;
}

/** Scales of the DSA indexer's logits (HF DeepseekV32Indexer). */
export interface IndexerScales {
  /** On each q.k dot product before the ReLU: index_head_dim^-0.5 (`softmax_scale`). */
  softmaxScale: number;
  /** On each head weight (weights_proj output): index_n_heads^-0.5. */
  headWeightScale: number;
}

/**
 * Latent rows of pages that are not on the device, for {@link BackendMlaOps.attention}: Hybrid
 * HiSparse for DSA models lets a request's mirrored pages leave the device while it still
 * prefills (core/hisparse/hybrid_policy.ts, `spillsPrefill`), and its later chunks read them from
 * the host tier. For a flagged request r, position i whose block blockTables[r, i / bs] is -1
 * reads row i % bs of host block hostBlockTables[r, i / bs] of hostRows instead of the latent
 * cache; other requests must name no -1 block. The CUDA backend runs flagged requests in the
 * expanded form, whose gather reads the host rows over the bus (eager steps only: a captured
 * graph never carries one).
 */
export interface SpilledRows {
  /**
   * The layer's host tier [numHostBlocks, blockSize, C + R] in the latent cache's dtype: the CPU
   * backend's f32 rows; on CUDA, bf16 pinned host memory mapped into the device's address space.
   */
  hostRows: Tensor;
  /** i32 [numReqs, maxPages]: the host block of every page of each request (the dense-layer tables). */
  hostBlockTables: Tensor;
  /** [numReqs] 1 for the requests whose pages may be on the host only (host flags). */
  requests: Uint8Array;
}

/**
 * Multi-head latent attention (DeepSeek-V3, arXiv 2412.19437 §2.1) and the DeepSeek sparse
 * attention lightning indexer (DeepSeek-V3.2, GLM-5) as backend ops. One MLA layer runs, with x
 * its normed input [T, H] and A the fused down projection [q_a | kv_a | wk | weights_proj]
 * (models/attention_mla.ts; q_proj instead of q_a when there is no q-LoRA):
 *   a     = linear(x, A)                                   // [T, qL + C + R (+ Di + Hi)]
 *   qr    = rmsNorm(mla.sliceColumns(a, 0, qL), q_a_layernorm)          // [T, qL]
 *   q     = linear(qr, q_b_proj)                          // [T, Hq * (N + R)]
 *   mla.rotaryStrided(q, {offset N, stride N + R, count Hq}, ...)
 *   kvc   = rmsNorm(mla.sliceColumns(a, qL, C), kv_a_layernorm)           // [T, C]
 *   kpe   = mla.sliceColumns(a, qL + C, R); mla.rotaryStrided(kpe, {0, R, 1}, ...)
 *   mla.writeRows(kvc, latentCache, 0, slotMapping); mla.writeRows(kpe, latentCache, C, ...)
 *   DSA: iq = linear(qr, wq_b); mla.rotaryStrided(iq, {0, Di, Hi}, ...) (first R dims of each
 *        head); ik = mla.layerNorm(mla.sliceColumns(a, qL + C + R, Di), k_norm); rotary on
 *        ik's first R; mla.writeRows(ik, indexKeyCache, 0, ...);
 *        logits = mla.indexerLogits(iq, mla.sliceColumns(a, ..., Hi), indexKeyCache, ...);
 *        sel = mla.topkIndices(logits, positions, index_topk)            // [T, K]
 *   o     = mla.attention(q, latentCache, kv_b_proj, meta, dims, sel or null)  // [T, Hq * Vd]
 *   out   = linear(o, o_proj)
 * Every shape depends on T, the model and fixed arguments (`width`, `k`) only, and every count
 * lives in device tensors (positions, metadata), so a step needs no host round trip and the
 * sequence can be captured in a CUDA graph. Each token's result depends only on its own row
 * and its request's cache rows (batch invariance).
 *
 * Caches: the latent cache of a layer is [numBlocks, blockSize, C + R] (one row per token: the
 * normed compressed KV, then the rotated k_pe), the indexer key cache of a full DSA layer
 * [numBlocks, blockSize, Di]; both are indexed by the step's block tables and slot mapping, the
 * same block ids for both (config/mla_config.ts mlaKvCacheGeometry).
 */
export interface BackendMlaOps {
  /**
   * A zeroed paged row cache [numBlocks, blockSize, rowWidth] (a latent or indexer key group of
   * one layer) that lives until free()/dispose().
   * @throws Error when dtype is not one the backend stores caches in.
   */
  allocatePagedRows(numBlocks: number, blockSize: number, rowWidth: number, dtype: DType): Tensor;
  /** out = x[:, start : start + width]. x: [T, W] -> [T, width]. */
  sliceColumns(x: Tensor, start: number, width: number): Tensor;
  /**
   * LayerNorm per row (torch.nn.LayerNorm, biased variance):
   *   (x - mean) / sqrt(var + eps) * weight + bias. x: [T, n]; weight, bias: [n] -> [T, n].
   */
  layerNorm(x: Tensor, weight: Tensor, bias: Tensor, eps: number): Tensor;
  /**
   * In place RoPE of the heads `span` names (R = cosSinCache's width, even): per row t, angle_i =
   * positions[t] * invFreq_i (cos/sin from the table, [maxPositions, R], cos in [:, :R/2]):
   * - interleaved (DeepSeek's layout, `rope_interleave`): pairs (x[2i], x[2i+1]) rotated in
   *   place; HF's apply_rotary_pos_emb_interleave computes the same rotation but stores the
   *   rotated evens first and the odds after them, a permutation applied to q and k alike that
   *   leaves every q.k product unchanged;
   * - half (NeoX, rotate_half): pairs (x[i], x[i + R/2]).
   * Rotation: (a, b) -> (a cos - b sin, b cos + a sin).
   * x: [T, W]; positions: i32 [T]. @throws Error for a position outside the table or a span
   * outside the row.
   */
  rotaryStrided(
    x: Tensor,
    span: RotarySpan,
    positions: Tensor,
    cosSinCache: Tensor,
    interleaved: boolean,
  ): void;
  /**
   * cache[slot, dstColumn : dstColumn + W] = src[t] for each token t with slot = slotMapping[t]
   * (block slot / blockSize, offset slot % blockSize; PAD_SLOT_ID skipped): vLLM's
   * concat_and_cache_mla as two calls (the normed compressed KV at column 0, k_pe at C), and the
   * indexer key write. src: [T, W]; cache: [numBlocks, blockSize, rowWidth] with
   * dstColumn + W <= rowWidth; slotMapping: i32 [T]. @throws Error for a slot outside the cache.
   */
  writeRows(src: Tensor, cache: Tensor, dstColumn: number, slotMapping: Tensor): void;
  /**
   * Causal MLA attention over each request's cached latent rows (this step's rows written first).
   * Query token t of request r sits at position p = seqLen_r - queryLen_r + j and attends to the
   * positions P_t: [0, p] (topkIndices null: dense), or the non-negative entries of
   * topkIndices[t] (DSA; each <= p, no repeats, e.g. mla.topkIndices' output; -1 = no entry).
   * Position i reads latent row l_i = [c_i (C) | kpe_i (R)] at block blockTables[r, i / bs],
   * offset i % bs. With W_UK[h] = kv_b_proj rows [h(N+Vd), h(N+Vd) + N) and W_UV[h] the next Vd
   * rows, per q head h:
   *   s_i = softmaxScale * (q_nope[t,h] . (W_UK[h] c_i) + q_pe[t,h] . kpe_i),  i in P_t
   *   out[t, h] = sum_i softmax(s)_i * (W_UV[h] c_i)
   * The two forms of it compute the same values: expanded (k_nope and v per row, as HF; the CPU
   * backend, and what a prefill kernel does) and absorbed (q_lat[h] = W_UK[h]^T q_nope[t,h],
   * s_i = scale * (q_lat . c_i + q_pe . kpe_i), o_lat = sum_i p_i c_i, out = W_UV[h] o_lat:
   * attention as MQA over C + R wide rows, what a decode kernel does; kernels/mla.ts has both).
   * q: [T, Hq * (N + R)] after RoPE; latentCache: [numBlocks, blockSize, C + R];
   * kvBProj: [Hq * (N + Vd), C]; topkIndices: i32 [T, K] or null -> [T, Hq * Vd].
   * With `spilled` (Hybrid HiSparse for DSA models, a prefill beside its own host-resident
   * pages): see {@link SpilledRows}; the values are the same as with every row on the device.
   * @throws Error on inconsistent metadata or a selected position outside [0, p].
   */
  attention(
    q: Tensor,
    latentCache: Tensor,
    kvBProj: Tensor,
    meta: AttentionMetadata,
    dims: MlaDims,
    blockSize: number,
    topkIndices: Tensor | null,
    spilled?: SpilledRows | null,
  ): Tensor;
  /**
   * DSA indexer logits over the paged index keys (HF DeepseekV32Indexer, without its fp8 and
   * Hadamard steps, which HF also skips: the Hadamard transform preserves dot products). Query
   * token t of request r at position p, for each position i <= p with key k_i (indexKeyCache at
   * blockTables[r, i / bs], offset i % bs):
   *   logits[t, i] = sum_h (headWeights[t, h] * headWeightScale) * relu(softmaxScale * (q[t, h] . k_i))
   * and -inf for i > p (and every i >= width). q: [T, Hi * Di] after RoPE; headWeights: [T, Hi]
   * (weights_proj output); indexKeyCache: [numBlocks, blockSize, Di]; width: columns of the
   * result, >= the step's longest seqLen (a graph passes a fixed width, e.g. max_model_len)
   * -> f32 [T, width]. A backend may fuse this op with topkIndices (and never materialise the
   * logits) as long as the selection is the same. @throws Error when width < meta.maxSeqLen.
   */
  indexerLogits(
    q: Tensor,
    headWeights: Tensor,
    indexKeyCache: Tensor,
    meta: AttentionMetadata,
    blockSize: number,
    scales: IndexerScales,
    width: number,
  ): Tensor;
  /**
   * Causal top-k per row: among the candidates i in [0, positions[t]] of row t, the
   * min(k, positions[t] + 1) largest logits[t, i], written in ascending i, the rest of the row
   * -1. Order: larger value first; NaN counts as -inf and -0 as +0; ties: the lower position
   * first (the rule of the Quest selector and its CUDA radix select, hisparse_select.cu).
   * logits: f32 [T, width] with width > max positions; positions: i32 [T] -> i32 [T, k].
   */
  topkIndices(logits: Tensor, positions: Tensor, k: number): Tensor;
}
