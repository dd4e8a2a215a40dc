/**
 * The DSA hot-row ops of the CUDA backend (issue 15), over hsRowResolve and hsRowCopy
 * (native/kernels/hisparse.h): one resolution plan per indexer and step (own slot, hot row or an
 * LRU victim row, the view Backend.mla.attention reads, the miss list), then one copy pass per
 * layer that shares the indexer, from mapped pinned host memory. Shape and dtype checks here,
 * one launcher call each; asynchronous on the backend's stream and graph-capturable. The CPU
 * oracle is src/attention/sparse/dsa.ts (LruHotRowResolver; the view: dsa_attention.ts).
 */
import type { Tensor } from "../backend.js";
import type { CudaAttentionContext } from "./attention_ops.js";
import type { DevicePtr } from "./device_ptr.js";
import { dim, i32, ptrOf } from "./hisparse_args.js";
import { expectDtype, expectShape } from "./tensor.js";

/** Per request slot (S rows): page tables, hot blocks, row LRU state, held pages, counters. */
export interface RowHotState {
  /** i32 [S, W] device block of each page (-1: INACTIVE), host block of each page. */
  blockTable: Tensor;
  hostBlockTable: Tensor;
  /** i32 [S, numHotBlocks]. */
  hotBlocks: Tensor;
  /** i32 [S, numSources, numHotBlocks * blockSize]: position of each hot row (-1 empty), last use. */
  lruPos: Tensor;
  lruLastUse: Tensor;
  /** i32 [S, numSources]. */
  lruTick: Tensor;
  /** i32 [S, W] (indexer, hot row) slots holding a row of each page; i32 [S] SPARSE pages. */
  heldCount: Tensor;
  heldPages: Tensor;
  /** i32 [6]: u64 hits, misses, errors, accumulated. */
  counters: Tensor;
}

/** The inputs of one indexer's resolution. */
export interface RowResolveInputs {
  /** i32 [T, K] the indexer's top-k. */
  topk: Tensor;
  /** i32 [R] top-k row of each row's token; null: row r is token r. */
  tokenRow: Tensor | null;
  /** i32 [R] nonzero: resolve; null: every row. */
  rowFlags: Tensor | null;
  /** i32 [R] each row's request slot; i32 [R] context length after the step. */
  reqSlot: Tensor;
  seqLens: Tensor;
  state: RowHotState;
  /** Index of the indexer among those with hot rows. */
  source: number;
  blockSize: number;
  numBlocks: number;
  numHostBlocks: number;
}

/** One indexer's plan: the attention view and the misses, i32, in the step's workspace. */
export interface RowResolutionTensors {
  /** [R, K] positions j * bs + offset (-1: none); [R, K] table columns; [R] K * bs. */
  viewTopk: Tensor;
  viewTable: Tensor;
  viewSeqLens: Tensor;
  /** [R, K] host slot and device slot of each miss; [R] their count. */
  missSrc: Tensor;
  missDst: Tensor;
  missCount: Tensor;
}

/** hsRowResolve. Rows not resolved keep whatever the outputs held (fresh workspace: unspecified). */
export function rowResolve(ctx: CudaAttentionContext, a: RowResolveInputs): RowResolutionTensors {
  const st = a.state;
  const [S, W] = [dim(st.blockTable, 0), dim(st.blockTable, 1)];
  const numHotBlocks = dim(st.hotBlocks, 1);
  const [numSources, numHot] = [dim(st.lruPos, 1), dim(st.lruPos, 2)];
  if (numHot !== numHotBlocks * a.blockSize)
    throw new Error(`rowResolve: ${numHot} LRU rows for ${numHotBlocks} hot blocks of ${a.blockSize}`);
  const [T, K] = [dim(a.topk, 0), dim(a.topk, 1)];
  const R = dim(a.reqSlot, 0);
  const topk = i32(ctx, a.topk, "rowResolve topk", [T, K]);
  const slot = i32(ctx, a.reqSlot, "rowResolve reqSlot", [R]);
  const seq = i32(ctx, a.seqLens, "rowResolve seqLens", [R]);
  if (a.rowFlags !== null) i32(ctx, a.rowFlags, "rowResolve rowFlags", [R]);
  if (a.tokenRow !== null) i32(ctx, a.tokenRow, "rowResolve tokenRow", [R]);
  const t = {
    block: i32(ctx, st.blockTable, "rowResolve blockTable", [S, W]),
    host: i32(ctx, st.hostBlockTable, "rowResolve hostBlockTable", [S, W]),
    hot: i32(ctx, st.hotBlocks, "rowResolve hotBlocks", [S, numHotBlocks]),
    pos: i32(ctx, st.lruPos, "rowResolve lruPos", [S, numSources, numHot]),
    last: i32(ctx, st.lruLastUse, "rowResolve lruLastUse", [S, numSources, numHot]),
    tick: i32(ctx, st.lruTick, "rowResolve lruTick", [S, numSources]),
    held: i32(ctx, st.heldCount, "rowResolve heldCount", [S, W]),
    heldPages: i32(ctx, st.heldPages, "rowResolve heldPages", [S]),
    counters: i32(ctx, st.counters, "rowResolve counters", [6]),
  };
  const out: RowResolutionTensors = {
    viewTopk: ctx.out([R, K], "i32"),
    viewTable: ctx.out([R, K], "i32"),
    viewSeqLens: ctx.out([R], "i32"),
    missSrc: ctx.out([R, K], "i32"),
    missDst: ctx.out([R, K], "i32"),
    missCount: ctx.out([R], "i32"),
  };
  if (R === 0) return out;
  const ptr = (x: Tensor, what: string) => ctx.dev(x, what).ptr;
  ctx.addon.rowResolve(ctx.stream, {
    topk: topk.ptr,
    K,
    tokenRow: ptrOf(ctx, a.tokenRow, "rowResolve tokenRow"),
    rowFlags: ptrOf(ctx, a.rowFlags, "rowResolve rowFlags"),
    reqSlot: slot.ptr,
    seqLens: seq.ptr,
    blockTable: t.block.ptr,
    hostBlockTable: t.host.ptr,
    tableStride: W,
    numSlots: S,
    hotBlocks: t.hot.ptr,
    numHotBlocks,
    lruPos: t.pos.ptr,
    lruLastUse: t.last.ptr,
    lruTick: t.tick.ptr,
    source: a.source,
    numSources,
    heldCount: t.held.ptr,
    heldPages: t.heldPages.ptr,
    viewTopk: ptr(out.viewTopk, "viewTopk"),
    viewTable: ptr(out.viewTable, "viewTable"),
    viewSeqLens: ptr(out.viewSeqLens, "viewSeqLens"),
    missSrc: ptr(out.missSrc, "missSrc"),
    missDst: ptr(out.missDst, "missDst"),
    missCount: ptr(out.missCount, "missCount"),
    counters: t.counters.ptr,
    numReqs: R,
    blockSize: a.blockSize,
    numBlocks: a.numBlocks,
    numHostBlocks: a.numHostBlocks,
  });
  return out;
}

/**
 * hsRowCopy: one layer's copy pass of `plan` into `latentCache` (bf16 [numBlocks, bs, C + R])
 * from `hostRows` (that layer's mapped pinned host tier, [numHostBlocks, bs, C + R]), on `stream`
 * (default: the backend's; a side stream for the prefetch of a later layer).
 */
export function rowCopy(
  ctx: CudaAttentionContext,
  plan: RowResolutionTensors,
  latentCache: Tensor,
  hostRows: DevicePtr,
  numHostBlocks: number,
  rowFlags: Tensor | null,
  stream: number = ctx.stream,
): void {
  const [R, K] = [dim(plan.missSrc, 0), dim(plan.missSrc, 1)];
  expectDtype(latentCache, "rowCopy latentCache", ["bf16"]);
  expectShape(latentCache, "rowCopy latentCache", [null, null, null]);
  const [numBlocks, bs, width] = [dim(latentCache, 0), dim(latentCache, 1), dim(latentCache, 2)];
  if (R === 0) return;
  ctx.addon.rowCopy(
    stream,
    ctx.dev(latentCache, "rowCopy latentCache").ptr,
    hostRows,
    ctx.dev(plan.missSrc, "rowCopy missSrc").ptr,
    ctx.dev(plan.missDst, "rowCopy missDst").ptr,
    ctx.dev(plan.missCount, "rowCopy missCount").ptr,
    ptrOf(ctx, rowFlags, "rowCopy rowFlags"),
    R,
    K,
    width * 2,
    numBlocks * bs,
    numHostBlocks * bs,
  );
}

/** What rowViewMerge needs of the step besides the plan. */
export interface RowViewMergeInputs {
  /** i32 [T, K] the indexer's top-k the plan resolved. */
  topk: Tensor;
  /** i32 [R, W] the step's block tables; i32 [R] its lengths (AttentionMetadata). */
  blockTables: Tensor;
  seqLens: Tensor;
  /** rowResolve's row rule: flags (null: every row), request slots, token rows (null: r). */
  rowFlags: Tensor | null;
  reqSlot: Tensor;
  tokenRow: Tensor | null;
  /** Request slots of the tables (rows with a slot outside [0, numSlots) are not resolved). */
  numSlots: number;
}

/** The attention metadata of a partly resolved step: top-k [T, K], tables [R, max(W, K)], lengths [R]. */
export interface MergedRowView {
  topk: Tensor;
  blockTables: Tensor;
  seqLens: Tensor;
}

/**
 * hsRowViewMerge: resolved rows read `plan`'s view (their token's top-k row replaced by the view
 * positions), every other row (resident decodes, prefill chunks, padding) its own table, length
 * and top-k, so one Backend.mla.attention call serves the whole step (the CPU oracle:
 * DsaHiSparseAttention.sparseView).
 */
export function rowViewMerge(
  ctx: CudaAttentionContext,
  plan: RowResolutionTensors,
  a: RowViewMergeInputs,
): MergedRowView {
  const [T, K] = [dim(a.topk, 0), dim(a.topk, 1)];
  const [R, W] = [dim(a.blockTables, 0), dim(a.blockTables, 1)];
  const topk = i32(ctx, a.topk, "rowViewMerge topk", [T, K]);
  const tables = i32(ctx, a.blockTables, "rowViewMerge blockTables", [R, W]);
  const seq = i32(ctx, a.seqLens, "rowViewMerge seqLens", [R]);
  const slot = i32(ctx, a.reqSlot, "rowViewMerge reqSlot", [R]);
  if (a.rowFlags !== null) i32(ctx, a.rowFlags, "rowViewMerge rowFlags", [R]);
  if (a.tokenRow !== null) i32(ctx, a.tokenRow, "rowViewMerge tokenRow", [R]);
  expectShape(plan.viewTopk, "rowViewMerge viewTopk", [R, K]);
  const outStride = Math.max(W, K);
  const out: MergedRowView = {
    topk: ctx.out([T, K], "i32"),
    blockTables: ctx.out([R, outStride], "i32"),
    seqLens: ctx.out([R], "i32"),
  };
  if (R === 0 && T === 0) return out;
  const ptr = (x: Tensor, what: string) => ctx.dev(x, what).ptr;
  ctx.addon.rowViewMerge(ctx.stream, {
    topk: topk.ptr,
    blockTables: tables.ptr,
    seqLens: seq.ptr,
    rowFlags: ptrOf(ctx, a.rowFlags, "rowViewMerge rowFlags"),
    reqSlot: slot.ptr,
    tokenRow: ptrOf(ctx, a.tokenRow, "rowViewMerge tokenRow"),
    viewTopk: ptr(plan.viewTopk, "rowViewMerge viewTopk"),
    viewTable: ptr(plan.viewTable, "rowViewMerge viewTable"),
    viewSeqLens: ptr(plan.viewSeqLens, "rowViewMerge viewSeqLens"),
    outTopk: ptr(out.topk, "rowViewMerge outTopk"),
    outTables: ptr(out.blockTables, "rowViewMerge outTables"),
    outSeqLens: ptr(out.seqLens, "rowViewMerge outSeqLens"),
    numReqs: R,
    numTokens: T,
    K,
    tableStride: W,
    outStride,
    numSlots: a.numSlots,
  });
  return out;
}

/** The benchmark's selection-overlap state of one set-up: previous selections per (slot, indexer). */
export interface SelectionOverlapState {
  /** i32 [S, numSources, K] previous selection (-1 padded); i32 [S, numSources] its context length (-1: none). */
  prevSelection: Tensor;
  prevSeqLen: Tensor;
  /** Probability of keeping each previous entry. */
  p: number;
}

/**
 * Benchmarks only (hsRowSelectionOverlap): `topk` with each resolved row's selection rewritten to
 * keep each entry of its previous one with probability `state.p`, the rest the model's own
 * picks (native/kernels/hisparse_rows_overlap.cu). @returns a new i32 [T, K].
 */
export function rowSelectionOverlap(
  ctx: CudaAttentionContext,
  topk: Tensor,
  rows: { rowFlags: Tensor | null; reqSlot: Tensor; tokenRow: Tensor | null; seqLens: Tensor },
  state: SelectionOverlapState,
  source: number,
): Tensor {
  const [T, K] = [dim(topk, 0), dim(topk, 1)];
  const R = dim(rows.reqSlot, 0);
  const [S, numSources] = [dim(state.prevSelection, 0), dim(state.prevSelection, 1)];
  const t = i32(ctx, topk, "rowSelectionOverlap topk", [T, K]);
  const prev = i32(ctx, state.prevSelection, "rowSelectionOverlap prevSelection", [S, numSources, K]);
  const prevLen = i32(ctx, state.prevSeqLen, "rowSelectionOverlap prevSeqLen", [S, numSources]);
  const out = ctx.out([T, K], "i32");
  if (T === 0) return out;
  ctx.addon.rowSelectionOverlap(ctx.stream, {
    topk: t.ptr,
    out: ctx.dev(out, "rowSelectionOverlap out").ptr,
    K,
    rowFlags: ptrOf(ctx, rows.rowFlags, "rowSelectionOverlap rowFlags"),
    reqSlot: i32(ctx, rows.reqSlot, "rowSelectionOverlap reqSlot", [R]).ptr,
    tokenRow: ptrOf(ctx, rows.tokenRow, "rowSelectionOverlap tokenRow"),
    seqLens: i32(ctx, rows.seqLens, "rowSelectionOverlap seqLens", [R]).ptr,
    prevSelection: prev.ptr,
    prevSeqLen: prevLen.ptr,
    source,
    numSources,
    numSlots: S,
    numReqs: R,
    numTokens: T,
    p: state.p,
  });
  return out;
}
