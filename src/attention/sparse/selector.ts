/**
 * The page-selection interface of HiSparse (DESIGN.md §4 step 2) and the per-step description
 * of the requests that decode sparsely. Implementations: `QuestSelector` (quest.ts, CPU: the
 * oracle); the CUDA issue replaces it with kernels that run inside a CUDA graph, so the
 * interface passes tensors and flat typed arrays, never per-request objects.
 */
import type { AttentionMetadata, Tensor } from "../../backends/backend.js";
import type { RequestId } from "../../core/ids.js";

/**
 * The requests of a step that decode sparsely (S of them, one query token each), with their
 * page tables flattened. Page arrays of request s are `[pageStart[s], pageStart[s+1])`, page i of
 * the request at `pageStart[s] + i`.
 */
export interface SparseBatch {
  numSparse: number;
  /** [S] request ids (hot-buffer state is kept per request). */
  reqIds: RequestId[];
  /** [S] index of the request in the step's batch (row of queryStartLoc, seqLens, block tables). */
  batchIdx: Int32Array;
  /** [S] row of the request's query token in the step's qkv. */
  tokenIdx: Int32Array;
  /** [S] context length after this step (this step's token included). */
  numTokens: Int32Array;
  /** [S + 1] prefix offsets into the page arrays; request s has ceil(numTokens[s] / blockSize) pages. */
  pageStart: Int32Array;
  /** [sum pages] host block of each page (the index of its digest and host copy). */
  hostBlockIds: Int32Array;
  /** [sum pages] device block of each page, or -1 when INACTIVE (KV only in the host tier). */
  blockIds: Int32Array;
  /** [sum pages] 1 for pinned pages (whitelisted tokens). */
  pinned: Uint8Array;
  /** [S + 1] prefix offsets into hotBlockIds. */
  hotStart: Int32Array;
  /** [sum hot] each request's hot-buffer blocks. */
  hotBlockIds: Int32Array;
}

/**
 * Pages chosen for each (sparse request s, kv head g), ascending: item i = s * Hkv + g lists
 * `pages[start[i] .. start[i+1])`. The tail page (the last) is always included.
 */
export interface PageSelection {
  /** [S * Hkv + 1] prefix offsets. */
  start: Int32Array;
  /** Page indices (within each request). */
  pages: Int32Array;
}

/** Chooses the pages each sparse decode attends to, per sparse layer and GQA group. */
export interface Selector {
  /**
   * Folds this step's keys of sparse layer `sparseLayer` into the page digests. Call after the
   * keys are written (reshapeAndCache), for every token of the step (prefill included: digests
   * are kept for every page of every request).
   * @param qkv [T, (Hq + 2Hkv) * D] after RoPE (post-RoPE keys, as Quest).
   * @param hostSlotMapping [T] hostBlock * blockSize + offset of each token (-1: skip).
   */
  updateDigests(sparseLayer: number, qkv: Tensor, hostSlotMapping: Int32Array): void;
  /** Pages each request of `batch` attends to in sparse layer `sparseLayer`. */
  select(sparseLayer: number, qkv: Tensor, batch: SparseBatch): PageSelection;
}

/**
 * The prefilling requests of a step that hold host-resident pages (core/hisparse/hybrid_policy.ts
 * `spillsPrefill`, DSA models): their attention reads those pages from the host tier
 * (BackendMlaOps.attention's SpilledRows). Built by the HiSparse worker, which holds the page
 * tables; null in a step without one.
 */
export interface StreamedPrefill {
  /** [numReqs] 1 for those requests (host flags). */
  rows: Uint8Array;
  /**
   * The step's metadata with those requests' device block tables as the worker holds them (-1 for
   * a host-resident page; the step's own tables still name the blocks such a page had).
   */
  meta: AttentionMetadata;
}
