/**
 * HiSparse decode attention of the CUDA backend: hsSparseDecodeAttention (native/kernels/
 * attention.h), where rows read per-(request, kv head) block tables made by the resolver
 * (hisparse_ops.ts resolve), and the Backend.sparsePagedAttention adapter over it. Imports the
 * resolver's output type from hisparse_ops.ts (one direction: that file imports nothing here).
 */

import type { AttentionMetadata, PerHeadBlockTables, QkvLayout, Tensor } from "../backend.js";
import { NULL_PTR } from "./addon.js";
import type { CudaAttentionContext } from "./attention_ops.js";
import { kvCacheReadFields } from "./attention_ops.js";
import { dim, i32, ptrOf } from "./hisparse_args.js";
import type { ResolvedTensors } from "./hisparse_ops.js";
import { expectDtype, expectShape } from "./tensor.js";

/** Which rows read per-head tables, and where their q / output rows are. */
export interface SparseDecodeOptions {
  /** i32 [R] nonzero: per-head tables; null: every row. */
  rowFlags?: Tensor | null;
  /** i32 [R] q / out row of each request (-1: skip); null: row r. */
  tokenRow?: Tensor | null;
  /** Leave rows without the flag unwritten (their output comes from another kernel). */
  onlyFlaggedRows?: boolean;
  /** Output to write into (bf16 [T, Hq*D]); default a new workspace tensor. */
  out?: Tensor;
}

/**
 * Decode attention where flagged rows read per-(row, kv head) block tables and lengths
 * (hsSparseDecodeAttention); other rows read meta.blockTables / meta.seqLens. The split grid is
 * sized from max(dense, per-head table width) * blockSize, the dense launcher's bound when both
 * widths are equal: then dense-equal tables give pagedAttention's bits.
 * qkv: bf16 [T, (Hq+2Hkv)*D]; tables: i32 [R, Hkv, W'], i32 [R, Hkv] -> bf16 [T, Hq*D].
 * @throws Error when the batch is not one query token per row and no tokenRow is given.
 */
export function sparseDecodeAttention(
  ctx: CudaAttentionContext,
  qkv: Tensor,
  layout: QkvLayout,
  kvCache: Tensor,
  meta: AttentionMetadata,
  tables: ResolvedTensors,
  blockSize: number,
  opts: SparseDecodeOptions = {},
): Tensor {
  const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
  const W = (Hq + 2 * Hkv) * D;
  const q = ctx.dev(qkv, "sparseDecodeAttention qkv");
  expectShape(qkv, "sparseDecodeAttention qkv", [meta.numTokens, W]);
  expectDtype(qkv, "sparseDecodeAttention qkv", ["bf16"]);
  const cache = ctx.dev(kvCache, "sparseDecodeAttention kvCache");
  expectShape(kvCache, "sparseDecodeAttention kvCache", [null, 2, blockSize, Hkv, D]);
  expectDtype(kvCache, "sparseDecodeAttention kvCache", ["bf16", "fp8"]);
  const R = meta.numReqs;
  const T = meta.numTokens;
  if (!opts.tokenRow && T !== R)
    throw new Error(`sparseDecodeAttention takes one query token per request (${T} tokens, ${R} requests)`);
  const bt = i32(ctx, meta.blockTables, "sparseDecodeAttention blockTables", [R, null]);
  const seq = i32(ctx, meta.seqLens, "sparseDecodeAttention seqLens", [R]);
  const qsl = ctx.dev(meta.queryStartLoc, "sparseDecodeAttention queryStartLoc");
  const headT = i32(ctx, tables.headBlockTables, "sparseDecodeAttention headBlockTables", [R, Hkv, null]);
  const headS = i32(ctx, tables.headSeqLens, "sparseDecodeAttention headSeqLens", [R, Hkv]);
  const out = opts.out ?? ctx.out([T, Hq * D], "bf16");
  expectShape(out, "sparseDecodeAttention out", [T, Hq * D]);
  expectDtype(out, "sparseDecodeAttention out", ["bf16"]);
  if (R === 0 || T === 0) return out;
  const denseW = dim(meta.blockTables, 1);
  const headW = dim(tables.headBlockTables, 2);
  const maxModelLen = Math.max(denseW, headW) * blockSize;
  const a = ctx.addon;
  const wsBytes = a.pagedAttentionWorkspaceBytes(R, T, Hq, D, maxModelLen, blockSize);
  const ws = wsBytes > 0 ? ctx.sharedScratch(wsBytes) : NULL_PTR;
  a.sparseDecodeAttention(ctx.stream, {
    qkv: q.ptr,
    qkvRowStride: W,
    kvCache: cache.ptr,
    out: ctx.dev(out, "sparseDecodeAttention out").ptr,
    queryStartLoc: qsl.ptr,
    seqLens: seq.ptr,
    blockTables: bt.ptr,
    maxBlocksPerReq: denseW,
    numReqs: R,
    numTokens: T,
    numHeads: Hq,
    numKvHeads: Hkv,
    headDim: D,
    blockSize,
    scale: 1 / Math.sqrt(D),
    maxModelLen,
    workspace: ws,
    workspaceBytes: wsBytes,
    ...kvCacheReadFields(ctx, kvCache),
    headBlockTables: headT.ptr,
    headSeqLens: headS.ptr,
    headTableStride: headW,
    rowFlags: ptrOf(ctx, opts.rowFlags, "sparseDecodeAttention rowFlags"),
    tokenRow: ptrOf(ctx, opts.tokenRow, "sparseDecodeAttention tokenRow"),
    onlyFlaggedRows: opts.onlyFlaggedRows === true ? 1 : 0,
  });
  return out;
}

/**
 * HiSparse decode attention with per-(request, kv head) tables for every row (Backend contract;
 * sparseDecodeAttention). Decode batches only (one query token per request).
 * @throws Error for any other batch.
 */
export function sparsePagedAttention(
  ctx: CudaAttentionContext,
  qkv: Tensor,
  layout: QkvLayout,
  kvCache: Tensor,
  meta: AttentionMetadata,
  tables: PerHeadBlockTables,
  blockSize: number,
): Tensor {
  if (meta.maxQueryLen > 1 || meta.numTokens !== meta.numReqs)
    throw new Error("sparsePagedAttention on CUDA takes decode batches (one query token per request)");
  return sparseDecodeAttention(
    ctx,
    qkv,
    layout,
    kvCache,
    meta,
    { headBlockTables: tables.blockTables, headSeqLens: tables.seqLens },
    blockSize,
  );
}
