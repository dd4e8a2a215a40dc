/**
 * Addon typings, MLA area: the launchers of native/kernels/mla.h (native/addon/mla.cc): multi-head
 * latent attention in the absorbed form and the DSA lightning indexer. Part of the addon's typed
 * surface: import these through addon.ts, the only loader (DESIGN.md §1). Argument order = the C
 * launcher's, stream first; optional pointers are NULL_PTR.
 */
import type { MlaAttentionParams, MlaIndexerParams } from "./addon_params.js";
import type { DevicePtr } from "./device_ptr.js";

/** Limits of the MLA kernels (HS_MLA_MAX_ROW, HS_MLA_MAX_RANK, HS_MLA_MAX_INDEX_HEADS / _DIM). */
export const MLA_LIMITS = { maxRow: 576, maxRank: 512, maxIndexHeads: 64, maxIndexDim: 256 } as const;

/** The MLA part of the module object (HisparseNative in addon.ts). */
export interface NativeMlaApi {
  /** out [T, width] = x [T, rowWidth] columns [start, start + width) (hsMlaSliceColumns). */
  mlaSliceColumns(
    stream: number,
    x: DevicePtr,
    out: DevicePtr,
    numTokens: number,
    rowWidth: number,
    start: number,
    width: number,
    elemBytes: number,
  ): void;
  /** cache[slot, dstColumn + e] = src[t, e] (hsMlaWriteRows); dtypes are DTYPE_CODE values. */
  mlaWriteRows(
    stream: number,
    src: DevicePtr,
    srcDtype: number,
    cache: DevicePtr,
    cacheDtype: number,
    slotMapping: DevicePtr,
    numTokens: number,
    width: number,
    rowWidth: number,
    dstColumn: number,
    numSlots: number,
  ): void;
  /** In place strided RoPE (hsMlaRotaryStrided); cosSin f32 [maxPositions, rotDim]. */
  mlaRotaryStrided(
    stream: number,
    x: DevicePtr,
    dtype: number,
    positions: DevicePtr,
    cosSin: DevicePtr,
    numTokens: number,
    rowWidth: number,
    offset: number,
    stride: number,
    count: number,
    rotDim: number,
    maxPositions: number,
    interleaved: boolean,
  ): void;
  /** torch.nn.LayerNorm per row (hsMlaLayerNorm). */
  mlaLayerNorm(
    stream: number,
    x: DevicePtr,
    weight: DevicePtr,
    bias: DevicePtr,
    out: DevicePtr,
    numTokens: number,
    n: number,
    eps: number,
    xDtype: number,
    wDtype: number,
  ): void;
  /** qAbs f32 [T, Hq, C + R] from q [T, Hq (N + R)] and bf16 kv_b_proj (hsMlaAbsorbQuery). */
  mlaAbsorbQuery(
    stream: number,
    q: DevicePtr,
    qDtype: number,
    kvBProj: DevicePtr,
    qAbs: DevicePtr,
    numTokens: number,
    numHeads: number,
    nopeDim: number,
    ropeDim: number,
    vDim: number,
    rank: number,
  ): void;
  /** out [T, Hq Vd] = W_UV[h] oLat[t, h] (hsMlaOutProject). */
  mlaOutProject(
    stream: number,
    oLat: DevicePtr,
    kvBProj: DevicePtr,
    out: DevicePtr,
    outDtype: number,
    numTokens: number,
    numHeads: number,
    nopeDim: number,
    vDim: number,
    rank: number,
  ): void;
  /** Split partial bytes of mlaAttention (maxEntries: topkStride with DSA, else maxContext). */
  mlaAttentionWorkspaceBytes(numTokens: number, numHeads: number, rank: number, maxEntries: number): number;
  /**
   * Absorbed MLA attention over the latent rows (hsMlaAttention), HsMlaAttentionParams by name:
   * the tensor-core kernel for bf16 rows of 512 + 64 (DeepSeek-V3 / GLM-5), else the SIMT one
   * ($HISPARSE_MLA_ATTENTION=simt forces SIMT; native/kernels/mla.h).
   */
  mlaAttention(stream: number, params: MlaAttentionParams): void;
  /** DSA indexer logits f32 [T, width] (hsMlaIndexerLogits), HsMlaIndexerParams by name. */
  mlaIndexerLogits(stream: number, params: MlaIndexerParams): void;
  /**
   * bf16 [numRows, rowWidth] = request req's first numRows paged rows, and (kv not NULL_PTR) each
   * row's k_pe into kvCount heads' keys at kvOffset + h * kvStride of kv rows of kvLd (hsMlaGatherLatent).
   * hostCache (NULL_PTR: none; mapped pinned [numHostBlocks, blockSize, rowWidth] of cacheDtype):
   * a position whose device block is -1 reads host block hostBlockTables[req, b] (i32 [numReqs,
   * hostMaxBlocksPerReq], hostMaxBlocksPerReq > 0) instead.
   */
  mlaGatherLatent(
    stream: number,
    cache: DevicePtr,
    cacheDtype: number,
    blockTables: DevicePtr,
    maxBlocksPerReq: number,
    hostCache: DevicePtr,
    hostBlockTables: DevicePtr,
    hostMaxBlocksPerReq: number,
    req: number,
    blockSize: number,
    rowWidth: number,
    rank: number,
    numRows: number,
    out: DevicePtr,
    kv: DevicePtr,
    kvLd: number,
    kvOffset: number,
    kvStride: number,
    kvCount: number,
  ): void;
  /** bf16 probs of f32 scores [Hq, Tq, rowStride], causal / top-k mask (hsMlaPrefillSoftmax). */
  mlaPrefillSoftmax(
    stream: number,
    scores: DevicePtr,
    probs: DevicePtr,
    numHeads: number,
    numQueries: number,
    numKeys: number,
    rowStride: number,
    firstPos: number,
    keyLimit: number,
    topk: DevicePtr,
    topkStride: number,
  ): void;
  /** Causal top-k i32 [T, k] of logits f32 [T, width] (hsMlaTopk). */
  mlaTopk(
    stream: number,
    logits: DevicePtr,
    positions: DevicePtr,
    out: DevicePtr,
    numTokens: number,
    width: number,
    k: number,
  ): void;
}
