/**
 * The element-wise, normalisation, RoPE, copy and GEMM ops of the CUDA backend: shape and dtype
 * checks in TS, then one launcher call each (native/kernels/kernels.h, native/addon/blas.cc).
 * Contracts (shapes, semantics) are those of the Backend interface (../backend.ts); numerics are
 * documented per kernel in kernels.h. `linear` and its fused forms are in linear_ops.ts.
 */
import { DEFAULT_KV_CACHE_SCALE } from "../../core/kv/kv_cache_dtype.js";
import type { KvCacheScales } from "../../core/kv/kv_cache_scales.js";
import { DTYPE_BYTES, type DType, type QkvLayout, type Tensor } from "../backend.js";
import { type DevicePtr, DTYPE_CODE, type HisparseNative, type NativeBlas } from "./addon.js";
import { type CudaTensor, describe, expectDtype, expectShape } from "./tensor.js";

/** What the ops need from the backend. */
export interface CudaOpsContext {
  readonly addon: HisparseNative;
  /** Handle of the backend's stream. */
  readonly stream: number;
  readonly blas: NativeBlas;
  /** Validates that t is a live tensor of this backend. @throws Error naming `what` otherwise. */
  dev(t: Tensor, what: string): CudaTensor;
  /** A new workspace tensor (valid until resetWorkspace()). */
  out(shape: readonly number[], dtype: DType): CudaTensor;
  /** Raw workspace bytes; returns a 256-byte aligned address. */
  scratch(bytes: number): DevicePtr;
  /**
   * `linear` runs the skinny GEMM (native/kernels/gemv.h) instead of cuBLAS when x has at most
   * this many rows (0: always cuBLAS; at most GEMV_MAX_TOKENS).
   */
  readonly denseGemvMaxTokens: number;
  /** An fp8 cache layer's k/v scales (Backend.kvCacheScales); null when the cache is not fp8. */
  kvCacheScales(kvCache: Tensor): Readonly<KvCacheScales> | null;
}

export const FLOAT_DTYPES: readonly DType[] = ["f32", "bf16", "f16"];

export function dim(t: Tensor, i: number): number {
  return t.shape[i] ?? 0;
}

/** Row width (elements) of a fused qkv tensor. */
export function qkvWidth(layout: QkvLayout): number {
  return (layout.numHeads + 2 * layout.numKvHeads) * layout.headDim;
}

/**
 * out[t] = table[ids[t] - vocabStart], zero rows for ids outside the table (Backend.embedding).
 * ids: i32 [T]; table: [V, H] -> [T, H] (table's dtype).
 */
export function embedding(ctx: CudaOpsContext, ids: Tensor, table: Tensor, vocabStart = 0): Tensor {
  const idsT = ctx.dev(ids, "embedding ids");
  const tab = ctx.dev(table, "embedding table");
  expectDtype(ids, "embedding ids", ["i32"]);
  expectShape(ids, "embedding ids", [null]);
  expectShape(table, "embedding table", [null, null]);
  const T = dim(ids, 0);
  const [V, H] = [dim(table, 0), dim(table, 1)];
  const out = ctx.out([T, H], table.dtype);
  ctx.addon.gatherRows(
    ctx.stream,
    out.ptr,
    tab.ptr,
    idsT.ptr,
    T,
    V,
    H * DTYPE_BYTES[table.dtype],
    vocabStart,
  );
  return out;
}

/** out[b] = x[indices[b]]. x: [T, H]; indices: i32 [B] -> [B, H]. */
export function gatherRows(ctx: CudaOpsContext, x: Tensor, indices: Tensor): Tensor {
  const xt = ctx.dev(x, "gatherRows x");
  const idx = ctx.dev(indices, "gatherRows indices");
  expectShape(x, "gatherRows x", [null, null]);
  expectDtype(indices, "gatherRows indices", ["i32"]);
  expectShape(indices, "gatherRows indices", [null]);
  const [T, H] = [dim(x, 0), dim(x, 1)];
  const B = dim(indices, 0);
  const out = ctx.out([B, H], x.dtype);
  ctx.addon.gatherRows(ctx.stream, out.ptr, xt.ptr, idx.ptr, B, T, H * DTYPE_BYTES[x.dtype], 0);
  return out;
}

/** RMSNorm per row. x: [T, H]; weight: [H] -> [T, H]. */
export function rmsNorm(ctx: CudaOpsContext, x: Tensor, weight: Tensor, eps: number): Tensor {
  const xt = ctx.dev(x, "rmsNorm x");
  const w = ctx.dev(weight, "rmsNorm weight");
  expectShape(x, "rmsNorm x", [null, null]);
  expectDtype(x, "rmsNorm x", FLOAT_DTYPES);
  const [T, H] = [dim(x, 0), dim(x, 1)];
  expectShape(weight, "rmsNorm weight", [H]);
  expectDtype(weight, "rmsNorm weight", FLOAT_DTYPES);
  const out = ctx.out([T, H], x.dtype);
  ctx.addon.rmsNorm(
    ctx.stream,
    out.ptr,
    xt.ptr,
    w.ptr,
    T,
    H,
    eps,
    DTYPE_CODE[x.dtype],
    DTYPE_CODE[weight.dtype],
  );
  return out;
}

/** In place: residual += x; x = rmsNorm(residual) * weight. x, residual: [T, H]; weight: [H]. */
export function fusedAddRmsNorm(
  ctx: CudaOpsContext,
  x: Tensor,
  residual: Tensor,
  weight: Tensor,
  eps: number,
): void {
  const xt = ctx.dev(x, "fusedAddRmsNorm x");
  const r = ctx.dev(residual, "fusedAddRmsNorm residual");
  const w = ctx.dev(weight, "fusedAddRmsNorm weight");
  expectShape(x, "fusedAddRmsNorm x", [null, null]);
  expectDtype(x, "fusedAddRmsNorm x", FLOAT_DTYPES);
  const [T, H] = [dim(x, 0), dim(x, 1)];
  expectShape(residual, "fusedAddRmsNorm residual", [T, H]);
  expectDtype(residual, "fusedAddRmsNorm residual", [x.dtype]);
  expectShape(weight, "fusedAddRmsNorm weight", [H]);
  expectDtype(weight, "fusedAddRmsNorm weight", FLOAT_DTYPES);
  ctx.addon.fusedAddRmsNorm(
    ctx.stream,
    xt.ptr,
    r.ptr,
    w.ptr,
    T,
    H,
    eps,
    DTYPE_CODE[x.dtype],
    DTYPE_CODE[weight.dtype],
  );
}

/** The checked q/k norm weights of qkNorm: [headDim] each, one dtype. */
function qkNormWeights(ctx: CudaOpsContext, layout: QkvLayout, qWeight: Tensor, kWeight: Tensor) {
  const qw = ctx.dev(qWeight, "qkNorm qWeight");
  const kw = ctx.dev(kWeight, "qkNorm kWeight");
  expectShape(qWeight, "qkNorm qWeight", [layout.headDim]);
  expectShape(kWeight, "qkNorm kWeight", [layout.headDim]);
  expectDtype(kWeight, "qkNorm kWeight", [qWeight.dtype]);
  return { qw: qw.ptr, kw: kw.ptr, wDtype: DTYPE_CODE[qWeight.dtype] };
}

/** The checked qkv [T, (Hq+2Hkv)*D] of the in-place q/k ops: pointer, T, row width. */
function qkvRows(ctx: CudaOpsContext, qkv: Tensor, layout: QkvLayout, what: string) {
  const q = ctx.dev(qkv, `${what} qkv`);
  const W = qkvWidth(layout);
  expectShape(qkv, `${what} qkv`, [null, W]);
  expectDtype(qkv, `${what} qkv`, FLOAT_DTYPES);
  return { ptr: q.ptr, T: dim(qkv, 0), W, dtype: DTYPE_CODE[qkv.dtype] };
}

/** The checked positions i32 [T] and cos/sin table f32 [maxPositions, R] of rotaryEmbedding. */
function ropeTable(
  ctx: CudaOpsContext,
  T: number,
  layout: QkvLayout,
  positions: Tensor,
  cosSinCache: Tensor,
) {
  const pos = ctx.dev(positions, "rotaryEmbedding positions");
  const cs = ctx.dev(cosSinCache, "rotaryEmbedding cosSinCache");
  expectShape(positions, "rotaryEmbedding positions", [T]);
  expectDtype(positions, "rotaryEmbedding positions", ["i32"]);
  expectShape(cosSinCache, "rotaryEmbedding cosSinCache", [null, null]);
  expectDtype(cosSinCache, "rotaryEmbedding cosSinCache", ["f32"]);
  const [maxPositions, R] = [dim(cosSinCache, 0), dim(cosSinCache, 1)];
  if (!(R >= 2 && R % 2 === 0 && R <= layout.headDim)) {
    throw new Error(
      `rotaryEmbedding: cosSinCache width ${R} must be even and in [2, headDim ${layout.headDim}], got ${describe(cosSinCache)}`,
    );
  }
  return { pos: pos.ptr, cs: cs.ptr, maxPositions, R };
}

/** In place per-head RMSNorm of the q and k heads of qkv (Qwen3). qWeight, kWeight: [headDim]. */
export function qkNorm(
  ctx: CudaOpsContext,
  qkv: Tensor,
  layout: QkvLayout,
  qWeight: Tensor,
  kWeight: Tensor,
  eps: number,
): void {
  const q = qkvRows(ctx, qkv, layout, "qkNorm");
  const w = qkNormWeights(ctx, layout, qWeight, kWeight);
  const { numHeads, numKvHeads, headDim } = layout;
  ctx.addon.qkNorm(
    ctx.stream,
    q.ptr,
    w.qw,
    w.kw,
    q.T,
    q.W,
    numHeads,
    numKvHeads,
    headDim,
    eps,
    q.dtype,
    w.wDtype,
  );
}

/**
 * In place NeoX RoPE on the q and k heads of qkv [T, (Hq+2Hkv)*D], over the first R dims of each
 * head (partial rotary when R < D). positions: i32 [T]; cosSinCache: f32 [maxPositions, R], R even
 * and <= D. Rows with a position outside the table are left unchanged.
 */
export function rotaryEmbedding(
  ctx: CudaOpsContext,
  qkv: Tensor,
  layout: QkvLayout,
  positions: Tensor,
  cosSinCache: Tensor,
): void {
  const q = qkvRows(ctx, qkv, layout, "rotaryEmbedding");
  const r = ropeTable(ctx, q.T, layout, positions, cosSinCache);
  const rotHeads = layout.numHeads + layout.numKvHeads;
  ctx.addon.rotaryEmbedding(
    ctx.stream,
    q.ptr,
    r.pos,
    r.cs,
    q.T,
    q.W,
    rotHeads,
    layout.headDim,
    r.R,
    r.maxPositions,
    q.dtype,
  );
}

/** Largest headDim of the fused kernel (native/kernels/qk_norm_rope.cu kMaxHeadDim). */
const QK_NORM_ROPE_MAX_HEAD_DIM = 512;

/**
 * qkNorm then rotaryEmbedding in one launch, equal bit for bit (Backend.qkNormRotaryEmbedding);
 * the two launches past QK_NORM_ROPE_MAX_HEAD_DIM.
 */
export function qkNormRotaryEmbedding(
  ctx: CudaOpsContext,
  qkv: Tensor,
  layout: QkvLayout,
  qWeight: Tensor,
  kWeight: Tensor,
  eps: number,
  positions: Tensor,
  cosSinCache: Tensor,
): void {
  if (layout.headDim > QK_NORM_ROPE_MAX_HEAD_DIM) {
    qkNorm(ctx, qkv, layout, qWeight, kWeight, eps);
    rotaryEmbedding(ctx, qkv, layout, positions, cosSinCache);
    return;
  }
  const q = qkvRows(ctx, qkv, layout, "qkNormRotaryEmbedding");
  const w = qkNormWeights(ctx, layout, qWeight, kWeight);
  const r = ropeTable(ctx, q.T, layout, positions, cosSinCache);
  const { numHeads, numKvHeads, headDim } = layout;
  ctx.addon.qkNormRotaryEmbedding(
    ctx.stream,
    q.ptr,
    w.qw,
    w.kw,
    r.pos,
    r.cs,
    q.T,
    q.W,
    numHeads,
    numKvHeads,
    headDim,
    r.R,
    r.maxPositions,
    eps,
    q.dtype,
    w.wDtype,
  );
}

/** out = silu(x[:, :I]) * x[:, I:]. x: [T, 2I] -> [T, I]. */
export function siluAndMul(ctx: CudaOpsContext, x: Tensor): Tensor {
  const xt = ctx.dev(x, "siluAndMul x");
  expectShape(x, "siluAndMul x", [null, null]);
  expectDtype(x, "siluAndMul x", FLOAT_DTYPES);
  const [T, twoI] = [dim(x, 0), dim(x, 1)];
  if (twoI % 2 !== 0) throw new Error(`siluAndMul: the last dim must be even, got ${describe(x)}`);
  const out = ctx.out([T, twoI / 2], x.dtype);
  ctx.addon.siluAndMul(ctx.stream, out.ptr, xt.ptr, T, twoI / 2, DTYPE_CODE[x.dtype]);
  return out;
}

/**
 * Writes the k and v heads of qkv into the paged cache [numBlocks, 2, blockSize, Hkv, D] at each
 * token's slot (vLLM reshape_and_cache; slot -1 = skip). slotMapping: i32 [T].
 */
export function reshapeAndCache(
  ctx: CudaOpsContext,
  qkv: Tensor,
  layout: QkvLayout,
  kvCache: Tensor,
  slotMapping: Tensor,
  blockSize: number,
): void {
  const q = ctx.dev(qkv, "reshapeAndCache qkv");
  const cache = ctx.dev(kvCache, "reshapeAndCache kvCache");
  const slots = ctx.dev(slotMapping, "reshapeAndCache slotMapping");
  const W = qkvWidth(layout);
  expectShape(qkv, "reshapeAndCache qkv", [null, W]);
  expectDtype(qkv, "reshapeAndCache qkv", FLOAT_DTYPES);
  const T = dim(qkv, 0);
  expectShape(kvCache, "reshapeAndCache kvCache", [null, 2, blockSize, layout.numKvHeads, layout.headDim]);
  expectDtype(kvCache, "reshapeAndCache kvCache", kvCache.dtype === "fp8" ? ["fp8"] : [qkv.dtype]);
  expectShape(slotMapping, "reshapeAndCache slotMapping", [T]);
  expectDtype(slotMapping, "reshapeAndCache slotMapping", ["i32"]);
  const numBlocks = dim(kvCache, 0);
  const { numHeads, numKvHeads, headDim } = layout;
  if (kvCache.dtype === "fp8") {
    // e4m3 with the layer's scales (1.0, or the first batch's under --calculate-kv-scales)
    expectDtype(qkv, "reshapeAndCache qkv (fp8 cache)", ["bf16"]);
    const s = ctx.kvCacheScales(kvCache) ?? {
      kScale: DEFAULT_KV_CACHE_SCALE,
      vScale: DEFAULT_KV_CACHE_SCALE,
    };
    ctx.addon.reshapeAndCacheFp8(
      ctx.stream,
      q.ptr,
      cache.ptr,
      slots.ptr,
      T,
      W,
      numHeads,
      numKvHeads,
      headDim,
      blockSize,
      numBlocks,
      s.kScale,
      s.vScale,
    );
    return;
  }
  ctx.addon.reshapeAndCache(
    ctx.stream,
    q.ptr,
    cache.ptr,
    slots.ptr,
    T,
    W,
    numHeads,
    numKvHeads,
    headDim,
    blockSize,
    numBlocks,
    DTYPE_CODE[qkv.dtype],
  );
}
