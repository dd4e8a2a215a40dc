/**
 * Addon typings, HiSparse area: the launchers of native/kernels/hisparse.h and
 * hsSparseDecodeAttention (attention.h). Part of the addon's typed surface: import these through
 * addon.ts, the only loader (DESIGN.md §1).
 */
import type { PagedAttentionArgs } from "./addon_attention.js";

/** The HiSparse part of the module object (HisparseNative in addon.ts). */
export interface NativeHiSparseApi {
  // ---- HiSparse (native/kernels/hisparse.h; attention.h hsSparseDecodeAttention) ---------------
  // Arguments follow the C launchers / the fields of their parameter structs, stream first.
  /** Gather of bytesPerCopy-byte pages from mapped pinned memory (hsSwapInPages); count: i32* or 0. */
  swapInPages(
    stream: number,
    dst: number,
    src: number,
    srcOffsets: number,
    dstOffsets: number,
    count: number,
    maxCopies: number,
    bytesPerCopy: number,
  ): void;
  /** reshape_and_cache fused with the bf16 Quest digest update (hsReshapeAndCacheDigest). */
  reshapeAndCacheDigest(
    stream: number,
    qkv: number,
    kvCache: number,
    slotMapping: number,
    digests: number,
    hostSlotMapping: number,
    numTokens: number,
    rowStride: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    blockSize: number,
    numBlocks: number,
    numHostBlocks: number,
  ): void;
  questSelectScratchBytes(numReqs: number, numKvHeads: number, tableStride: number): number;
  /** Quest selection per (request, kv head) (hsQuestSelect; pointers 0 = NULL where allowed). */
  questSelect(
    stream: number,
    qkv: number,
    qkvRowStride: number,
    tokenRow: number,
    digests: number,
    numHostBlocks: number,
    seqLens: number,
    rowFlags: number,
    reqSlot: number,
    hostBlockTable: number,
    pinnedTable: number,
    tableStride: number,
    numSlots: number,
    selPages: number,
    selCount: number,
    scratch: number,
    scratchBytes: number,
    numReqs: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    blockSize: number,
    budgetPages: number,
    sinkPages: number,
    windowPages: number,
  ): void;
  /** The fused hot-buffer resolver with UVA swap-in of misses (hsResolve). */
  resolve(
    stream: number,
    selPages: number,
    selCount: number,
    selStride: number,
    rowFlags: number,
    seqLens: number,
    reqSlot: number,
    blockTable: number,
    hostBlockTable: number,
    tableStride: number,
    numSlots: number,
    hotBlocks: number,
    numHot: number,
    lruPage: number,
    lruLastUse: number,
    lruTick: number,
    layer: number,
    numLayers: number,
    heldCount: number,
    heldPages: number,
    headBlockTables: number,
    headSeqLens: number,
    counters: number,
    kvCache: number,
    numBlocks: number,
    hostKv: number,
    numHostBlocks: number,
    numReqs: number,
    numKvHeads: number,
    headDim: number,
    blockSize: number,
  ): void;
  /** Eager mirror of filled pages, every layer, to the head-major host tier (hsMirrorPages). */
  mirrorPages(
    stream: number,
    kvCaches: number,
    hostTiers: number,
    blockIds: number,
    hostBlockIds: number,
    count: number,
    numLayers: number,
    numKvHeads: number,
    headDim: number,
    blockSize: number,
    numBlocks: number,
    numHostBlocks: number,
  ): void;
  /** Decode attention with per-(request, kv head) tables (hsSparseDecodeAttention). */
  sparseDecodeAttention(
    ...args: [
      ...PagedAttentionArgs,
      headBlockTables: number,
      headSeqLens: number,
      headTableStride: number,
      rowFlags: number,
      tokenRow: number,
      onlyFlaggedRows: number,
    ]
  ): void;
}
