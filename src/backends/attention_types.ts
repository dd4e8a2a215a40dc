/**
 * The attention side of the Backend contract (backend.ts): the fused QKV layout, the per-step
 * attention metadata, HiSparse's per-(request, kv head) block tables and the paged KV cache's
 * geometry.
 */

import type { ExtensionData } from "../core/extension_data.js";
import type { DType, Tensor } from "./tensor.js";

/**
 * Layout of the fused QKV projection output `[T, (numHeads + 2*numKvHeads) * headDim]`: per
 * token, the q heads, then the k heads, then the v heads (vLLM QKVParallelLinear order).
 */
export interface QkvLayout {
  numHeads: number;
  numKvHeads: number;
  headDim: number;
}

/**
 * Where each token of the step sits and what it attends to (vLLM FlashAttentionMetadata).
 * Device tensors are i32; the same values are kept on the host for backends and selectors that
 * need them there.
 */
export interface AttentionMetadata {
  numReqs: number;
  /** Total tokens in the step (T). */
  numTokens: number;
  /** [numReqs + 1] prefix sums of per-request query lengths. */
  queryStartLoc: Tensor;
  /** [numReqs] context length of each request after this step (cached + new tokens). */
  seqLens: Tensor;
  /** [numReqs, maxBlocksPerReq] device block ids of each request's pages (row-padded with 0). */
  blockTables: Tensor;
  /** [T] flat KV slot of each new token: blockId * blockSize + offset (PAD_SLOT_ID = skip). */
  slotMapping: Tensor;
  maxQueryLen: number;
  maxSeqLen: number;
  /** Host copies of the four tensors above. */
  host: {
    queryStartLoc: Int32Array;
    seqLens: Int32Array;
    blockTables: Int32Array;
    maxBlocksPerReq: number;
    slotMapping: Int32Array;
    /** [T] absolute position of each token. */
    positions: Int32Array;
  };
  /**
   * Per-step metadata of optional attention features, one typed entry per feature (HiSparse:
   * host slot mapping, dense-layer tables, the sparse rows); set by the worker's extensions,
   * read by their AttentionBackend through the feature's ExtensionKey.
   */
  extensions?: ExtensionData;
}

/**
 * Block tables given per (request, kv head) instead of per request, for
 * {@link Backend.sparsePagedAttention}: each GQA group of a request reads its own list of blocks
 * (HiSparse: the pages its selector chose, resolved to device blocks, in position order, the
 * partial tail page last). Row (r, g) holds `ceil(seqLens[r, g] / blockSize)` valid entries.
 */
export interface PerHeadBlockTables {
  /** i32 [numReqs, numKvHeads, maxBlocks] device block ids (row-padded with 0). */
  blockTables: Tensor;
  /** i32 [numReqs, numKvHeads] tokens each (request, kv head) attends over, this step's included. */
  seqLens: Tensor;
  maxBlocks: number;
  /** Host copies of the two tensors above. */
  host: { blockTables: Int32Array; seqLens: Int32Array };
}

/** Geometry of the paged KV cache: one tensor per layer, [numBlocks, 2, blockSize, numKvHeads, headDim]. */
export interface KvCacheSpec {
  numLayers: number;
  numBlocks: number;
  blockSize: number;
  numKvHeads: number;
  headDim: number;
  dtype: DType;
  /**
   * fp8 only: `--calculate-kv-scales`, each layer's k/v scales come from the first batch its
   * reshapeAndCache writes (core/kv/kv_cache_scales.ts); absent or false: 1.0.
   */
  calculateScales?: boolean;
}
