/**
 * Addon typings, ops area: the cuBLAS(Lt) GEMM object and the element-wise kernels of
 * native/kernels/kernels.h. Part of the addon's typed surface: import these through addon.ts,
 * the only loader (DESIGN.md §1).
 */
import type { DevicePtr } from "./device_ptr.js";

/** cuBLAS(Lt) GEMM: y [T, N] = x [T, K] @ w[N, K]^T (+ bias [N]); fp32 accumulation. */
export interface NativeBlas {
  /** bias = NULL_PTR for none (biasDtype then ignored). inDtype is that of x and w. */
  linear(
    stream: number,
    y: DevicePtr,
    x: DevicePtr,
    w: DevicePtr,
    bias: DevicePtr,
    T: number,
    N: number,
    K: number,
    inDtype: number,
    outDtype: number,
    biasDtype: number,
  ): void;
  /**
   * Column-major strided batched GEMM (cublasGemmStridedBatchedEx, fp32 accumulation): per batch
   * b, C_b = alpha op(A_b) op(B_b) + beta C_b, op = transpose when the flag is set, X_b = X + b *
   * strideX elements; C is m x n, the product's inner size k. abDtype is that of A and B.
   */
  gemmStridedBatched(
    stream: number,
    transA: boolean,
    transB: boolean,
    m: number,
    n: number,
    k: number,
    alpha: number,
    A: DevicePtr,
    lda: number,
    strideA: number,
    B: DevicePtr,
    ldb: number,
    strideB: number,
    beta: number,
    C: DevicePtr,
    ldc: number,
    strideC: number,
    batchCount: number,
    abDtype: number,
    cDtype: number,
  ): void;
  readonly mode: "lt" | "gemmex";
  /** cublasLtGetVersion(), e.g. 130000. */
  readonly version: number;
  /** The libcublas file that was loaded. */
  readonly cublasPath: string;
  /** Cached cuBLASLt plans (one per shape and dtype combination). */
  readonly numPlans: number;
  dispose(): void;
}

/** hsDenseGemv's largest numTokens (native/kernels/gemv.h HS_GEMV_MAX_TOKENS). */
export const GEMV_MAX_TOKENS = 16;

/** hsDenseGemv's epilogues (native/kernels/gemv.h HsGemvEpilogue). */
export const GEMV_EPILOGUE = { plain: 0, siluAndMul: 1 } as const;

/** The GEMM and element-wise kernel part of the module object (HisparseNative in addon.ts). */
export interface NativeOpsApi {
  /** @throws Error when libcublas/libcublasLt (.so.13 or .so.12) cannot be loaded. */
  Blas: new (options?: {
    workspaceBytes?: number;
    mode?: "lt" | "gemmex";
  }) => NativeBlas;

  // ---- kernels (native/kernels/kernels.h; argument order = the C launcher's, stream first) -----
  /** out[r] = src[indices[r] - firstIndex] (rowBytes per row); out-of-range source row -> zero row. */
  gatherRows(
    stream: number,
    out: DevicePtr,
    src: DevicePtr,
    indices: DevicePtr,
    numRows: number,
    numSrcRows: number,
    rowBytes: number,
    firstIndex: number,
  ): void;
  rmsNorm(
    stream: number,
    out: DevicePtr,
    x: DevicePtr,
    weight: DevicePtr,
    numTokens: number,
    hidden: number,
    eps: number,
    xDtype: number,
    wDtype: number,
  ): void;
  fusedAddRmsNorm(
    stream: number,
    x: DevicePtr,
    residual: DevicePtr,
    weight: DevicePtr,
    numTokens: number,
    hidden: number,
    eps: number,
    xDtype: number,
    wDtype: number,
  ): void;
  qkNorm(
    stream: number,
    qkv: DevicePtr,
    qWeight: DevicePtr,
    kWeight: DevicePtr,
    numTokens: number,
    rowStride: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    eps: number,
    dtype: number,
    wDtype: number,
  ): void;
  /** qkNorm then rotaryEmbedding (rotary heads: numHeads + numKvHeads) in one launch (hsQkNormRotaryEmbedding). */
  qkNormRotaryEmbedding(
    stream: number,
    qkv: DevicePtr,
    qWeight: DevicePtr,
    kWeight: DevicePtr,
    positions: DevicePtr,
    cosSin: DevicePtr,
    numTokens: number,
    rowStride: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    rotaryDim: number,
    maxPositions: number,
    eps: number,
    dtype: number,
    wDtype: number,
  ): void;
  rotaryEmbedding(
    stream: number,
    qkv: DevicePtr,
    positions: DevicePtr,
    cosSin: DevicePtr,
    numTokens: number,
    rowStride: number,
    numRotHeads: number,
    headDim: number,
    /** Rotated dims per head (the cos/sin table's width; < headDim for partial rotary). */
    rotaryDim: number,
    maxPositions: number,
    dtype: number,
  ): void;
  siluAndMul(
    stream: number,
    out: DevicePtr,
    x: DevicePtr,
    numTokens: number,
    intermediate: number,
    dtype: number,
  ): void;
  reshapeAndCache(
    stream: number,
    qkv: DevicePtr,
    kvCache: DevicePtr,
    slotMapping: DevicePtr,
    numTokens: number,
    rowStride: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    blockSize: number,
    numBlocks: number,
    dtype: number,
  ): void;
  /** hsReshapeAndCacheFp8: bf16 qkv into an e4m3 cache, stored = e4m3(x / scale) (kernels.h). */
  reshapeAndCacheFp8(
    stream: number,
    qkv: DevicePtr,
    kvCache: DevicePtr,
    slotMapping: DevicePtr,
    numTokens: number,
    rowStride: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    blockSize: number,
    numBlocks: number,
    kScale: number,
    vScale: number,
  ): void;
  /**
   * hsKvAmax (`--calculate-kv-scales`): out (3 x u32, device) = f32 bits of amax |k|, of amax |v|
   * over the bf16 qkv rows whose slot is >= 0, and 1 when some row has one (kernels.h).
   */
  kvAmax(
    stream: number,
    qkv: DevicePtr,
    slotMapping: DevicePtr,
    numTokens: number,
    rowStride: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    out: DevicePtr,
  ): void;
  biasAdd(
    stream: number,
    y: DevicePtr,
    bias: DevicePtr,
    rows: number,
    cols: number,
    yDtype: number,
    biasDtype: number,
  ): void;
  cast(
    stream: number,
    dst: DevicePtr,
    dstDtype: number,
    src: DevicePtr,
    srcDtype: number,
    count: number,
  ): void;
  /**
   * hsDenseGemv (gemv.h): y [T, N] (plain; [T, N/2] for silu_and_mul) = x [T, K] @ w[N, K]^T
   * (+ bias [N]) for T <= GEMV_MAX_TOKENS; K % 8 == 0, x and w 16-byte aligned; bias NULL_PTR
   * for none. epilogue: a GEMV_EPILOGUE value.
   */
  denseGemv(
    stream: number,
    y: DevicePtr,
    x: DevicePtr,
    w: DevicePtr,
    bias: DevicePtr,
    T: number,
    N: number,
    K: number,
    inDtype: number,
    outDtype: number,
    biasDtype: number,
    epilogue: number,
  ): void;
  /**
   * hsDenseGemvRope (gemv.h): the plain skinny GEMM into y [T, N], then NeoX RoPE over all
   * headDim dims of the first numRotHeads heads (= hsRotaryEmbedding with rotaryDim = headDim).
   * positions: i32 [T]; cosSin: f32 [maxPositions, headDim]. N % headDim == 0.
   */
  denseGemvRope(
    stream: number,
    y: DevicePtr,
    x: DevicePtr,
    w: DevicePtr,
    bias: DevicePtr,
    positions: DevicePtr,
    cosSin: DevicePtr,
    T: number,
    N: number,
    K: number,
    headDim: number,
    numRotHeads: number,
    maxPositions: number,
    dtype: number,
    biasDtype: number,
  ): void;
  /**
   * hsSetKernelLaunchOptions (kernels.h): launch options of the decode-path kernels for the
   * launches that follow in this process (bit 1: programmatic dependent launch, bit 2: deeper
   * decode-attention pipeline at small batch; default 3, or HISPARSE_KERNEL_LAUNCH). Results are
   * bit for bit the same with every setting. options < 0 only reads. Returns the previous options.
   */
  setKernelLaunchOptions(options: number): number;
}
