/**
 * Addon typings, HiSparse area: the launchers of native/kernels/hisparse.h and
 * hsSparseDecodeAttention (attention.h). Part of the addon's typed surface: import these through
 * addon.ts, the only loader (DESIGN.md §1).
 */
import type {
  QuestSelectParams,
  ResolveParams,
  RowResolveParams,
  RowSelectionOverlapParams,
  RowViewMergeParams,
  SparseDecodeParams,
} from "./addon_params.js";
import type { DevicePtr } from "./device_ptr.js";

/** The HiSparse part of the module object (HisparseNative in addon.ts). */
export interface NativeHiSparseApi {
  // ---- HiSparse (native/kernels/hisparse.h; attention.h hsSparseDecodeAttention) ---------------
  // Stream first; the three widest launchers take their C struct's fields as one named object
  // (addon_params.ts), the others the C launcher's arguments in order.
  /** Gather of bytesPerCopy-byte pages from mapped pinned memory (hsSwapInPages); count: i32* or NULL_PTR. */
  swapInPages(
    stream: number,
    dst: DevicePtr,
    src: DevicePtr,
    srcOffsets: DevicePtr,
    dstOffsets: DevicePtr,
    count: DevicePtr,
    maxCopies: number,
    bytesPerCopy: number,
  ): void;
  /**
   * reshape_and_cache fused with the Quest digest update (hsReshapeAndCacheDigest): bf16 keys;
   * digests of `digestDtype` (a DTYPE_CODE: bf16, or fp8 = e4m3 rounded outward).
   */
  reshapeAndCacheDigest(
    stream: number,
    qkv: DevicePtr,
    kvCache: DevicePtr,
    slotMapping: DevicePtr,
    digests: DevicePtr,
    hostSlotMapping: DevicePtr,
    numTokens: number,
    rowStride: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    blockSize: number,
    digestTokens: number,
    numBlocks: number,
    numHostBlocks: number,
    digestDtype: number,
  ): void;
  questSelectScratchBytes(numReqs: number, numKvHeads: number, tableStride: number): number;
  /** Quest selection per (request, kv head) (hsQuestSelect; NULL_PTR where the struct allows NULL). */
  questSelect(stream: number, params: QuestSelectParams): void;
  /** The hot-buffer resolver with UVA swap-in of misses (hsResolve: split plan + copy pass, or fused). */
  resolve(stream: number, params: ResolveParams): void;
  /** Eager mirror of filled pages, every layer, to the head-major host tier (hsMirrorPages). */
  mirrorPages(
    stream: number,
    kvCaches: DevicePtr,
    hostTiers: DevicePtr,
    blockIds: DevicePtr,
    hostBlockIds: DevicePtr,
    count: number,
    numLayers: number,
    numKvHeads: number,
    headDim: number,
    blockSize: number,
    numBlocks: number,
    numHostBlocks: number,
    /** HOST_KV_DTYPE_CODES (HS_HOST_KV_*): the host tier's element type. */
    hostKvDtype: number,
    /** Per-tensor K / V scales of an fp8 host tier (1.0 by default; ignored for bf16). */
    kScale: number,
    vScale: number,
  ): void;
  /** DSA hot rows: one indexer's resolution plan, the attention view and the miss list (hsRowResolve). */
  rowResolve(stream: number, params: RowResolveParams): void;
  /** The MLA attention metadata of a step partly resolved by rowResolve (hsRowViewMerge). */
  rowViewMerge(stream: number, params: RowViewMergeParams): void;
  /** Benchmarks only: the DSA selection-overlap rewrite of a top-k (hsRowSelectionOverlap). */
  rowSelectionOverlap(stream: number, params: RowSelectionOverlapParams): void;
  /** One layer's copy pass of a row plan from mapped pinned host rows (hsRowCopy); rowFlags: i32* or NULL_PTR. */
  rowCopy(
    stream: number,
    cache: DevicePtr,
    hostRows: DevicePtr,
    missSrc: DevicePtr,
    missDst: DevicePtr,
    missCount: DevicePtr,
    rowFlags: DevicePtr,
    numReqs: number,
    K: number,
    rowBytes: number,
    numDeviceSlots: number,
    numHostSlots: number,
  ): void;
  /** The reverse of mirrorPages: host blocks back into device blocks, every layer (hsLoadPages). */
  loadPages(
    stream: number,
    kvCaches: DevicePtr,
    hostTiers: DevicePtr,
    blockIds: DevicePtr,
    hostBlockIds: DevicePtr,
    count: number,
    numLayers: number,
    numKvHeads: number,
    headDim: number,
    blockSize: number,
    numBlocks: number,
    numHostBlocks: number,
    /** HOST_KV_DTYPE_CODES (HS_HOST_KV_*): the host tier's element type. */
    hostKvDtype: number,
    /** Per-tensor K / V scales of an fp8 host tier (1.0 by default; ignored for bf16). */
    kScale: number,
    vScale: number,
  ): void;
  /** Decode attention with per-(request, kv head) tables (hsSparseDecodeAttention). */
  sparseDecodeAttention(stream: number, params: SparseDecodeParams): void;
}
