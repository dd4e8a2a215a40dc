/**
 * Paged attention and the device sampler of the CUDA backend, over the launchers of
 * native/kernels/attention.h and sampling.h (branch wip/cuda-attn). Contracts: Backend.pagedAttention
 * and DeviceSamplingRows in ../backend.ts.
 */
import { DEFAULT_KV_CACHE_SCALE } from "../../core/kv/kv_cache_dtype.js";
import type { AttentionMetadata, DeviceSamplingRows, QkvLayout, Tensor } from "../backend.js";
import { type DevicePtr, NULL_PTR, offsetPtr, type PagedAttentionParams } from "./addon.js";
import type { CudaOpsContext } from "./ops.js";
import { expectDtype, expectShape } from "./tensor.js";

/** The ops context plus raw host transfers on the backend's stream. */
export interface CudaAttentionContext extends CudaOpsContext {
  /** Queues an async copy of host bytes to a device address. */
  uploadBytes(dst: DevicePtr, data: ArrayBufferView): void;
  /** Copies device bytes into `dst`; returns when done. */
  downloadBytes(dst: ArrayBufferView, src: DevicePtr): void;
  /** Workspace scratch shared by the launches of one step (StepWorkspace.sharedScratch). */
  sharedScratch(bytes: number): DevicePtr;
}

/**
 * Causal paged attention (Backend.pagedAttention). Decode batches (one query token per request,
 * token i = request i) take the split-KV decode kernel; anything else the prefill kernel.
 * The static bound on context length used for grid sizing (maxModelLen) is the block-table width
 * times the block size, which is fixed for a captured graph. The kernels' scratch space comes from
 * the step workspace.
 * qkv: bf16 [T, (Hq+2Hkv)*D]; kvCache: bf16 or fp8 (e4m3, dequantised in the kernels)
 * [numBlocks, 2, blockSize, Hkv, D] -> bf16 [T, Hq*D].
 */
export function pagedAttention(
  ctx: CudaAttentionContext,
  qkv: Tensor,
  layout: QkvLayout,
  kvCache: Tensor,
  meta: AttentionMetadata,
  blockSize: number,
): Tensor {
  const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
  const W = (Hq + 2 * Hkv) * D;
  const q = ctx.dev(qkv, "pagedAttention qkv");
  const cache = ctx.dev(kvCache, "pagedAttention kvCache");
  expectShape(qkv, "pagedAttention qkv", [meta.numTokens, W]);
  expectDtype(qkv, "pagedAttention qkv", ["bf16"]);
  expectShape(kvCache, "pagedAttention kvCache", [null, 2, blockSize, Hkv, D]);
  expectDtype(kvCache, "pagedAttention kvCache", ["bf16", "fp8"]);
  const numReqs = meta.numReqs;
  const T = meta.numTokens;
  const qsl = ctx.dev(meta.queryStartLoc, "pagedAttention queryStartLoc");
  const seq = ctx.dev(meta.seqLens, "pagedAttention seqLens");
  const bt = ctx.dev(meta.blockTables, "pagedAttention blockTables");
  expectShape(meta.queryStartLoc, "pagedAttention queryStartLoc", [numReqs + 1]);
  expectShape(meta.seqLens, "pagedAttention seqLens", [numReqs]);
  expectShape(meta.blockTables, "pagedAttention blockTables", [numReqs, null]);
  for (const [t, what] of [
    [meta.queryStartLoc, "queryStartLoc"],
    [meta.seqLens, "seqLens"],
    [meta.blockTables, "blockTables"],
  ] as const) {
    expectDtype(t, `pagedAttention ${what}`, ["i32"]);
  }
  const out = ctx.out([T, Hq * D], "bf16");
  if (T === 0 || numReqs === 0) return out;
  const maxBlocksPerReq = meta.blockTables.shape[1] ?? 0;
  const maxModelLen = maxBlocksPerReq * blockSize;
  const a = ctx.addon;
  const scale = 1 / Math.sqrt(D);
  const isDecode = meta.maxQueryLen <= 1 && T === numReqs;
  // The fields both launchers take (HsPagedAttentionParams), given the workspace.
  const params = (workspace: DevicePtr, workspaceBytes: number): PagedAttentionParams => ({
    qkv: q.ptr,
    qkvRowStride: W,
    kvCache: cache.ptr,
    out: out.ptr,
    queryStartLoc: qsl.ptr,
    seqLens: seq.ptr,
    blockTables: bt.ptr,
    maxBlocksPerReq,
    numReqs,
    numTokens: T,
    numHeads: Hq,
    numKvHeads: Hkv,
    headDim: D,
    blockSize,
    scale,
    maxModelLen,
    workspace,
    workspaceBytes,
    ...kvCacheReadFields(ctx, kvCache),
  });
  if (isDecode) {
    // Split-KV partials; every layer's decode reuses the same region (stream order).
    const wsBytes = a.pagedAttentionWorkspaceBytes(numReqs, T, Hq, D, maxModelLen, blockSize);
    const ws = wsBytes > 0 ? ctx.sharedScratch(wsBytes) : NULL_PTR;
    a.pagedDecodeAttention(ctx.stream, params(ws, wsBytes));
  } else {
    // Split-KV scratch when few query rows attend a long context (a prefix hit, later turns).
    const wsBytes = a.pagedPrefillWorkspaceBytes(numReqs, T, Hq, Hkv, D, meta.maxQueryLen, maxModelLen);
    const ws = wsBytes > 0 ? ctx.sharedScratch(wsBytes) : NULL_PTR;
    a.pagedPrefillAttention(ctx.stream, params(ws, wsBytes), meta.maxQueryLen);
  }
  return out;
}

/**
 * The HsPagedAttentionParams fields that say how to read a cache: fp8 (e4m3 with the layer's
 * per-tensor scales: 1.0, or the first batch's under --calculate-kv-scales,
 * core/kv/kv_cache_scales.ts) or bf16 (scales 1.0, unused).
 */
export function kvCacheReadFields(
  ctx: CudaOpsContext,
  kvCache: Tensor,
): { kvCacheFp8: number; kScale: number; vScale: number } {
  const s = kvCache.dtype === "fp8" ? ctx.kvCacheScales(kvCache) : null;
  return {
    kvCacheFp8: kvCache.dtype === "fp8" ? 1 : 0,
    kScale: s?.kScale ?? DEFAULT_KV_CACHE_SCALE,
    vScale: s?.vScale ?? DEFAULT_KV_CACHE_SCALE,
  };
}

/**
 * Samples one token per row of logits f32 [B, V] with the rule of DeviceSamplingRows; returns the
 * ids (synchronous: it waits for the step's work). The five per-row arrays travel in one copy.
 * @throws Error when a row array's length is not B.
 */
export function sampleOnDevice(
  ctx: CudaAttentionContext,
  logits: Tensor,
  rows: DeviceSamplingRows,
): Int32Array {
  const lg = ctx.dev(logits, "sampleOnDevice logits");
  expectShape(logits, "sampleOnDevice logits", [null, null]);
  expectDtype(logits, "sampleOnDevice logits", ["f32"]);
  const B = logits.shape[0] ?? 0;
  const V = logits.shape[1] ?? 0;
  for (const [name, arr] of Object.entries(rows)) {
    if ((arr as ArrayLike<number>).length !== B) {
      throw new Error(
        `sampleOnDevice: rows.${name} has ${(arr as ArrayLike<number>).length} entries for ${B} rows`,
      );
    }
  }
  const ids = new Int32Array(B);
  if (B === 0) return ids;
  // One host block: [temperature | topK | topP | minP | uniform], B 4-byte words each.
  const packed = new ArrayBuffer(5 * B * 4);
  new Float32Array(packed, 0, B).set(rows.temperature);
  new Int32Array(packed, 4 * B, B).set(rows.topK);
  new Float32Array(packed, 8 * B, B).set(rows.topP);
  new Float32Array(packed, 12 * B, B).set(rows.minP);
  new Float32Array(packed, 16 * B, B).set(rows.uniform);
  const params = ctx.scratch(packed.byteLength);
  ctx.uploadBytes(params, new Uint8Array(packed));
  const outIds = ctx.scratch(B * 4);
  const wsBytes = ctx.addon.sampleWorkspaceBytes(B, V);
  const ws = wsBytes > 0 ? ctx.scratch(wsBytes) : NULL_PTR;
  ctx.addon.sample(
    ctx.stream,
    lg.ptr,
    B,
    V,
    params,
    offsetPtr(params, 4 * B),
    offsetPtr(params, 8 * B),
    offsetPtr(params, 12 * B),
    offsetPtr(params, 16 * B),
    outIds,
    ws,
    wsBytes,
  );
  ctx.downloadBytes(ids, outIds);
  return ids;
}
