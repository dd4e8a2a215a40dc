/**
 * The HiSparse ops of the CUDA backend (DESIGN.md §4), over the launchers of
 * native/kernels/hisparse.h: shape and dtype checks in TS, then one launcher call each (the
 * widest take their C struct's fields as one named object, addon_params.ts). Every op is
 * asynchronous on the backend's stream and graph-capturable (grids from static sizes; counts read
 * from device memory). The decode attention over the resolver's per-head tables is
 * sparse_attention_ops.ts (it imports this file's ResolvedTensors; nothing here imports it). The
 * CPU oracles of the kernels are src/attention/sparse/quest.ts and hot_buffer.ts, their CUDA
 * callers src/attention/sparse/cuda/.
 *
 * Per-request tables live in persistent i32 tensors with one row per request slot (`reqSlot[r]`
 * names the row of batch row r); see worker/hisparse/cuda/slot_tables.ts.
 */

import { DIGEST_DTYPES } from "../../core/kv/kv_cache_interface.js";
import type { QkvLayout, Tensor } from "../backend.js";
import { DTYPE_CODE } from "./addon.js";
import type { CudaAttentionContext } from "./attention_ops.js";
import { type DevicePtr, NULL_PTR, offsetPtr } from "./device_ptr.js";
import { dim, i32, ptrOf } from "./hisparse_args.js";
import { expectDtype, expectShape } from "./tensor.js";

/**
 * reshape_and_cache fused with the Quest digest update (hsReshapeAndCacheDigest): writes K/V of
 * each token at slotMapping[t] and folds its key into sub-page digest
 * hostSlotMapping[t] / digestTokens (offset 0 of the sub-page starts the digest over).
 * qkv: bf16 [T, (Hq+2Hkv)*D]; kvCache: bf16 [numBlocks, 2, bs, Hkv, D]; digests: bf16, or fp8
 * (e4m3 codes, min rounded down and max up), [numHostBlocks, S, 2, Hkv, D] with S = bs /
 * digestTokens; slotMapping, hostSlotMapping: i32 [T].
 * @param digestTokens tokens per digest, a divisor of blockSize (default blockSize)
 */
export function reshapeAndCacheDigest(
  ctx: CudaAttentionContext,
  qkv: Tensor,
  layout: QkvLayout,
  kvCache: Tensor,
  slotMapping: Tensor,
  digests: Tensor,
  hostSlotMapping: Tensor,
  blockSize: number,
  digestTokens: number = blockSize,
): void {
  const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
  const W = (Hq + 2 * Hkv) * D;
  const q = ctx.dev(qkv, "reshapeAndCacheDigest qkv");
  expectShape(qkv, "reshapeAndCacheDigest qkv", [null, W]);
  const T = dim(qkv, 0);
  for (const [t, what] of [
    [qkv, "qkv"],
    [kvCache, "kvCache"],
  ] as const)
    expectDtype(t, `reshapeAndCacheDigest ${what}`, ["bf16"]);
  expectDtype(digests, "reshapeAndCacheDigest digests", DIGEST_DTYPES);
  const cache = ctx.dev(kvCache, "reshapeAndCacheDigest kvCache");
  expectShape(kvCache, "reshapeAndCacheDigest kvCache", [null, 2, blockSize, Hkv, D]);
  const dg = ctx.dev(digests, "reshapeAndCacheDigest digests");
  expectShape(digests, "reshapeAndCacheDigest digests", [null, blockSize / digestTokens, 2, Hkv, D]);
  const slots = i32(ctx, slotMapping, "reshapeAndCacheDigest slotMapping", [T]);
  const hostSlots = i32(ctx, hostSlotMapping, "reshapeAndCacheDigest hostSlotMapping", [T]);
  ctx.addon.reshapeAndCacheDigest(
    ctx.stream,
    q.ptr,
    cache.ptr,
    slots.ptr,
    dg.ptr,
    hostSlots.ptr,
    T,
    W,
    Hq,
    Hkv,
    D,
    blockSize,
    digestTokens,
    dim(kvCache, 0),
    dim(digests, 0),
    DTYPE_CODE[digests.dtype],
  );
}

/** Inputs of {@link questSelect}; R = rows of the step, S = request slots, W = table width (pages). */
export interface QuestSelectInputs {
  /** bf16 [T, (Hq+2Hkv)*D] after RoPE. */
  qkv: Tensor;
  layout: QkvLayout;
  /** i32 [R] qkv row of each row's query token; null: row r. */
  tokenRow: Tensor | null;
  /** bf16 or fp8 (e4m3) [numHostBlocks, digestsPerPage, 2, Hkv, D] the layer's digests. */
  digests: Tensor;
  /** i32 [R] context length after the step. */
  seqLens: Tensor;
  /** i32 [R] nonzero: select for the row; null: every row. */
  rowFlags: Tensor | null;
  /** i32 [R] request slot of each row (-1: skip). */
  reqSlot: Tensor;
  /** i32 [S, W] host block of each page. */
  hostBlockTable: Tensor;
  /** i32 [S, W] nonzero for pinned pages; null: none. */
  pinnedTable: Tensor | null;
  blockSize: number;
  /** topk / blockSize, sinkTokens / blockSize, windowTokens / blockSize. */
  budgetPages: number;
  sinkPages: number;
  windowPages: number;
  /** Sub-page digests per page (blockSize / digestTokens). */
  digestsPerPage: number;
  /**
   * Benchmark only (HsQuestSelectParams.prevSelected): bytes [S, Hkv, W] of the previous
   * selection (any dtype, >= S * Hkv * W bytes), and the probability of keeping each of its pages.
   */
  overlap?: { prevSelected: Tensor; p: number };
}

/** Selected pages per (row, kv head), ascending (workspace tensors). */
export interface PageSelectionTensors {
  /** i32 [R, Hkv, W]. */
  selPages: Tensor;
  /** i32 [R, Hkv]. */
  selCount: Tensor;
}

/** Quest selection per (row, kv head), exactly QuestSelector's rule (hsQuestSelect). */
export function questSelect(ctx: CudaAttentionContext, a: QuestSelectInputs): PageSelectionTensors {
  const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = a.layout;
  const qkvW = (Hq + 2 * Hkv) * D;
  const q = ctx.dev(a.qkv, "questSelect qkv");
  expectShape(a.qkv, "questSelect qkv", [null, qkvW]);
  expectDtype(a.qkv, "questSelect qkv", ["bf16"]);
  const dg = ctx.dev(a.digests, "questSelect digests");
  expectShape(a.digests, "questSelect digests", [null, a.digestsPerPage, 2, Hkv, D]);
  expectDtype(a.digests, "questSelect digests", DIGEST_DTYPES);
  const R = dim(a.reqSlot, 0);
  const slot = i32(ctx, a.reqSlot, "questSelect reqSlot", [R]);
  const seq = i32(ctx, a.seqLens, "questSelect seqLens", [R]);
  const host = i32(ctx, a.hostBlockTable, "questSelect hostBlockTable", [null, null]);
  const [S, W] = [dim(a.hostBlockTable, 0), dim(a.hostBlockTable, 1)];
  if (a.tokenRow !== null) i32(ctx, a.tokenRow, "questSelect tokenRow", [R]);
  if (a.rowFlags !== null) i32(ctx, a.rowFlags, "questSelect rowFlags", [R]);
  if (a.pinnedTable !== null) i32(ctx, a.pinnedTable, "questSelect pinnedTable", [S, W]);
  const selPages = ctx.out([R, Hkv, W], "i32");
  const selCount = ctx.out([R, Hkv], "i32");
  if (R === 0) return { selPages, selCount };
  const scratchBytes = ctx.addon.questSelectScratchBytes(R, Hkv, W);
  const scratch = ctx.scratch(scratchBytes);
  ctx.addon.questSelect(ctx.stream, {
    qkv: q.ptr,
    qkvRowStride: qkvW,
    tokenRow: ptrOf(ctx, a.tokenRow, "questSelect tokenRow"),
    digests: dg.ptr,
    digestDtype: DTYPE_CODE[a.digests.dtype],
    numHostBlocks: dim(a.digests, 0),
    seqLens: seq.ptr,
    rowFlags: ptrOf(ctx, a.rowFlags, "questSelect rowFlags"),
    reqSlot: slot.ptr,
    hostBlockTable: host.ptr,
    pinnedTable: ptrOf(ctx, a.pinnedTable, "questSelect pinnedTable"),
    tableStride: W,
    numSlots: S,
    selPages: ctx.dev(selPages, "selPages").ptr,
    selCount: ctx.dev(selCount, "selCount").ptr,
    scratch,
    scratchBytes,
    numReqs: R,
    numHeads: Hq,
    numKvHeads: Hkv,
    headDim: D,
    blockSize: a.blockSize,
    budgetPages: a.budgetPages,
    sinkPages: a.sinkPages,
    windowPages: a.windowPages,
    digestsPerPage: a.digestsPerPage,
    prevSelected: ptrOf(ctx, a.overlap?.prevSelected ?? null, "questSelect prevSelected"),
    overlapP: a.overlap?.p ?? 0,
  });
  return { selPages, selCount };
}

/** The resolver's per-request state on the device (persistent tensors; slot-major). */
export interface ResolverState {
  /** i32 [S, W] device block of each page, -1 when INACTIVE. */
  blockTable: Tensor;
  /** i32 [S, W] host block of each page. */
  hostBlockTable: Tensor;
  /** i32 [S, numHot] each request's hot blocks. */
  hotBlocks: Tensor;
  /** i32 [S, numSparseLayers, Hkv, numHot] LRU page per slot (-1 empty) and last use. */
  lruPage: Tensor;
  lruLastUse: Tensor;
  /** i32 [S, numSparseLayers, Hkv] rounds so far. */
  lruTick: Tensor;
  /** i32 [S, W] (layer, head) slots holding each page; i32 [S] pages held per request. */
  heldCount: Tensor;
  heldPages: Tensor;
  /** i32 [6]: u64 hits, misses, errors (little-endian pairs), accumulated. */
  counters: Tensor;
}

/**
 * Element types of the host tier as the kernels name them (hisparse.h HS_HOST_KV_BF16 /
 * HS_HOST_KV_FP8): the cache's bf16, or fp8 e4m3 (`host_kv_cache_dtype` fp8).
 */
export const HOST_KV_DTYPE_CODES = { bf16: 0, fp8: 1 } as const;

/** How a host tier holds its pages: the element type and, for fp8, the per-tensor K / V scales. */
export interface HostKvFormat {
  dtype: keyof typeof HOST_KV_DTYPE_CODES;
  /** vLLM k_scale / v_scale (stored = e4m3(x / scale)); 1.0 (DEFAULT_KV_CACHE_SCALE) today. */
  kScale: number;
  vScale: number;
}

/** A bf16 host tier (the cache's own bytes). */
export const BF16_HOST_KV: HostKvFormat = { dtype: "bf16", kScale: 1, vScale: 1 };

/** Inputs of {@link resolve} for one sparse layer. */
export interface ResolveInputs {
  selection: PageSelectionTensors;
  /** i32 [R] nonzero: resolve the row; null: every row. */
  rowFlags: Tensor | null;
  /** i32 [R] context length after the step. */
  seqLens: Tensor;
  /** i32 [R] request slot of each row (-1: skip). */
  reqSlot: Tensor;
  state: ResolverState;
  /** Index of the layer among the sparse layers. */
  layer: number;
  /** bf16 [numBlocks, 2, bs, Hkv, D] the layer's cache. */
  kvCache: Tensor;
  /** Device-visible address of the layer's host tier ([numHostBlocks, Hkv, 2, bs, D] of hostFormat). */
  hostTierPtr: DevicePtr;
  numHostBlocks: number;
  blockSize: number;
  /** The host tier's element type and scales; absent: {@link BF16_HOST_KV}. */
  hostFormat?: HostKvFormat;
  /**
   * `split` (default): the plan kernel writes a miss list and one SM-wide pass copies it (the
   * link's speed at every batch size); `fused`: each plan CTA copies its own misses (bf16 only;
   * kept for the benchmark's comparison).
   */
  copy?: "split" | "fused";
}

/** Device blocks and lengths per (row, kv head) for sparse attention (workspace tensors). */
export interface ResolvedTensors {
  /** i32 [R, Hkv, W]. */
  headBlockTables: Tensor;
  /** i32 [R, Hkv]. */
  headSeqLens: Tensor;
}

/**
 * The resolver of one sparse layer (hsResolve): hits, LRU victims, UVA swap-in, tables. The split
 * copy's miss list lives in the step's shared scratch: i32 [R, Hkv, min(numHot, W)] host blocks,
 * the same for hot blocks, then i32 [R, Hkv] counts (read by the copy pass right after the plan).
 */
export function resolve(ctx: CudaAttentionContext, a: ResolveInputs): ResolvedTensors {
  const st = a.state;
  const [S, W] = [dim(st.blockTable, 0), dim(st.blockTable, 1)];
  const numHot = dim(st.hotBlocks, 1);
  const [numLayers, Hkv] = [dim(st.lruPage, 1), dim(st.lruPage, 2)];
  const R = dim(a.reqSlot, 0);
  const sel = i32(ctx, a.selection.selPages, "resolve selPages", [R, Hkv, W]);
  const cnt = i32(ctx, a.selection.selCount, "resolve selCount", [R, Hkv]);
  const slot = i32(ctx, a.reqSlot, "resolve reqSlot", [R]);
  const seq = i32(ctx, a.seqLens, "resolve seqLens", [R]);
  if (a.rowFlags !== null) i32(ctx, a.rowFlags, "resolve rowFlags", [R]);
  const tables = {
    block: i32(ctx, st.blockTable, "resolve blockTable", [S, W]),
    host: i32(ctx, st.hostBlockTable, "resolve hostBlockTable", [S, W]),
    hot: i32(ctx, st.hotBlocks, "resolve hotBlocks", [S, numHot]),
    page: i32(ctx, st.lruPage, "resolve lruPage", [S, numLayers, Hkv, numHot]),
    last: i32(ctx, st.lruLastUse, "resolve lruLastUse", [S, numLayers, Hkv, numHot]),
    tick: i32(ctx, st.lruTick, "resolve lruTick", [S, numLayers, Hkv]),
    held: i32(ctx, st.heldCount, "resolve heldCount", [S, W]),
    heldPages: i32(ctx, st.heldPages, "resolve heldPages", [S]),
    counters: i32(ctx, st.counters, "resolve counters", [6]),
  };
  const cache = ctx.dev(a.kvCache, "resolve kvCache");
  expectDtype(a.kvCache, "resolve kvCache", ["bf16"]);
  expectShape(a.kvCache, "resolve kvCache", [null, 2, a.blockSize, Hkv, null]);
  const D = dim(a.kvCache, 4);
  const headBlockTables = ctx.out([R, Hkv, W], "i32");
  const headSeqLens = ctx.out([R, Hkv], "i32");
  if (R === 0) return { headBlockTables, headSeqLens };
  const format = a.hostFormat ?? BF16_HOST_KV;
  const split = (a.copy ?? "split") === "split";
  if (!split && format.dtype !== "bf16")
    throw new Error("resolve: the fused copy reads a bf16 host tier only");
  const listBytes = R * Hkv * Math.min(numHot, W) * 4;
  const list = split ? ctx.sharedScratch(2 * listBytes + R * Hkv * 4) : null;
  ctx.addon.resolve(ctx.stream, {
    selPages: sel.ptr,
    selCount: cnt.ptr,
    selStride: W,
    rowFlags: ptrOf(ctx, a.rowFlags, "resolve rowFlags"),
    seqLens: seq.ptr,
    reqSlot: slot.ptr,
    blockTable: tables.block.ptr,
    hostBlockTable: tables.host.ptr,
    tableStride: W,
    numSlots: S,
    hotBlocks: tables.hot.ptr,
    numHot,
    lruPage: tables.page.ptr,
    lruLastUse: tables.last.ptr,
    lruTick: tables.tick.ptr,
    layer: a.layer,
    numLayers,
    heldCount: tables.held.ptr,
    heldPages: tables.heldPages.ptr,
    headBlockTables: ctx.dev(headBlockTables, "headBlockTables").ptr,
    headSeqLens: ctx.dev(headSeqLens, "headSeqLens").ptr,
    counters: tables.counters.ptr,
    kvCache: cache.ptr,
    numBlocks: dim(a.kvCache, 0),
    hostKv: a.hostTierPtr,
    numHostBlocks: a.numHostBlocks,
    numReqs: R,
    numKvHeads: Hkv,
    headDim: D,
    blockSize: a.blockSize,
    missSrc: list ?? NULL_PTR,
    missDst: list === null ? NULL_PTR : offsetPtr(list, listBytes),
    missCount: list === null ? NULL_PTR : offsetPtr(list, 2 * listBytes),
    hostKvDtype: HOST_KV_DTYPE_CODES[format.dtype],
    kScale: format.kScale,
    vScale: format.vScale,
  });
  return { headBlockTables, headSeqLens };
}

/** Geometry and address tables of {@link mirrorPages}. */
export interface MirrorInputs {
  /** i32 [2 * numLayers]: the device address of each layer's cache as (low, high) 32-bit words. */
  kvCachePtrs: Tensor;
  /** i32 [2 * numLayers]: each layer's host tier (device-visible address), same encoding. */
  hostTierPtrs: Tensor;
  /** i32 [>= count] device blocks to copy, and i32 [>= count] their host blocks. */
  blockIds: Tensor;
  hostBlockIds: Tensor;
  count: number;
  numLayers: number;
  numKvHeads: number;
  headDim: number;
  blockSize: number;
  numBlocks: number;
  numHostBlocks: number;
  /** The host tier's element type and scales (the mirror quantises, the load dequantises). */
  hostFormat: HostKvFormat;
}

/** Eager mirror of `count` pages of every layer to the host tier, on `stream` (hsMirrorPages). */
export function mirrorPages(ctx: CudaAttentionContext, stream: number, a: MirrorInputs): void {
  pageCopy(ctx, stream, a, "mirrorPages");
}

/**
 * The reverse of {@link mirrorPages}: host block hostBlockIds[i] of every layer into device block
 * blockIds[i] (prefix-cache hits on host-resident pages), on `stream` (hsLoadPages).
 */
export function loadPages(ctx: CudaAttentionContext, stream: number, a: MirrorInputs): void {
  pageCopy(ctx, stream, a, "loadPages");
}

function pageCopy(
  ctx: CudaAttentionContext,
  stream: number,
  a: MirrorInputs,
  op: "mirrorPages" | "loadPages",
): void {
  const caches = i32(ctx, a.kvCachePtrs, `${op} kvCachePtrs`, [2 * a.numLayers]);
  const hosts = i32(ctx, a.hostTierPtrs, `${op} hostTierPtrs`, [2 * a.numLayers]);
  const blocks = i32(ctx, a.blockIds, `${op} blockIds`, [null]);
  const hostBlocks = i32(ctx, a.hostBlockIds, `${op} hostBlockIds`, [null]);
  if (dim(a.blockIds, 0) < a.count || dim(a.hostBlockIds, 0) < a.count)
    throw new Error(`${op}: ${a.count} copies but block id tensors of ${dim(a.blockIds, 0)} entries`);
  if (a.count === 0) return;
  ctx.addon[op](
    stream,
    caches.ptr,
    hosts.ptr,
    blocks.ptr,
    hostBlocks.ptr,
    a.count,
    a.numLayers,
    a.numKvHeads,
    a.headDim,
    a.blockSize,
    a.numBlocks,
    a.numHostBlocks,
    HOST_KV_DTYPE_CODES[a.hostFormat.dtype],
    a.hostFormat.kScale,
    a.hostFormat.vScale,
  );
}
