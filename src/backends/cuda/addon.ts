/**
 * The native addon's whole surface, typed (DESIGN.md §1: one narrow native boundary). This is the
 * only file that loads `hisparse_native.node`; everything else imports the types and
 * `loadAddon()` from here. native/README.md states the ABI rules; the C side is native/addon/*.cc.
 *
 * Conventions of the flat functions:
 * - Device (and UVA host) addresses, byte counts and handles are JS numbers (user addresses are
 *   below 2^48, so a double holds them exactly); 0 is the null address / the legacy stream.
 * - `stream` is `Stream.handle`. Launches are asynchronous on that stream; a launch error throws
 *   an Error naming the launcher and the CUDA error.
 * - Dtype arguments are DTYPE_CODE values.
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { DType } from "../backend.js";

/** Version of the JS-visible surface this file describes (native/addon/module.cc kAbiVersion). */
export const ADDON_ABI_VERSION = 2;

/** Element type codes shared with native/kernels/kernels.h (HsDtype). */
export const DTYPE_CODE: Record<DType, number> = { f32: 0, bf16: 1, f16: 2, i32: 3 };

/** Result of `probe()`: whether the CUDA runtime sees a device. Never throws. */
export interface CudaProbe {
  ok: boolean;
  deviceCount: number;
  /** cudaDriverGetVersion (e.g. 13000), 0 without a driver. */
  driverVersion: number;
  /** cudaRuntimeGetVersion of the statically linked runtime. */
  runtimeVersion: number;
  /** "description (cudaErrorName)" when cudaGetDeviceCount failed, else "". */
  error: string;
}

/** The fields of cudaDeviceProp the engine uses. Sizes in bytes. */
export interface DeviceProperties {
  name: string;
  major: number;
  minor: number;
  totalGlobalMem: number;
  multiProcessorCount: number;
  l2CacheSize: number;
  sharedMemPerBlockOptin: number;
  sharedMemPerMultiprocessor: number;
  memoryBusWidth: number;
  pciBusId: number;
  canMapHostMemory: boolean;
  unifiedAddressing: boolean;
}

/** Counters of a DeviceAllocator (bytes; counts since creation). */
export interface AllocatorStats {
  /** Bytes of blocks handed out (size classes, see native/addon/allocator.h). */
  bytesInUse: number;
  /** Bytes asked for by the live allocations. */
  bytesRequested: number;
  /** Bytes held from cudaMalloc (in use + cached). */
  bytesReserved: number;
  /** bytesReserved - bytesInUse. */
  bytesCached: number;
  peakBytesInUse: number;
  peakBytesReserved: number;
  numAllocs: number;
  numFrees: number;
  numCacheHits: number;
  numCudaMallocs: number;
  numCudaFrees: number;
  numOomRetries: number;
  caching: boolean;
}

/** Caching device allocator. `caching: false` maps every call to cudaMalloc/cudaFree (sanitizer runs). */
export interface NativeDeviceAllocator {
  /** @throws Error "out of device memory: ..." when even an emptied cache leaves no room. */
  malloc(bytes: number): number;
  /** @throws Error for an address this allocator did not hand out. */
  free(ptr: number): void;
  emptyCache(): void;
  stats(): AllocatorStats;
  /** Frees every block, live or cached. */
  dispose(): void;
}

/** Page-locked, device-mapped host memory (cudaHostAlloc Mapped|Portable) seen as an ArrayBuffer. */
export interface NativePinnedBuffer {
  /** Device-visible address of the buffer (UVA: the host address). 0 once disposed. */
  readonly ptr: number;
  readonly byteLength: number;
  /** The memory as an external ArrayBuffer; detached (length 0) after dispose(). */
  readonly buffer: ArrayBuffer;
  dispose(): void;
}

export interface NativeStream {
  /** cudaStream_t as a number, for the `stream` argument of the flat functions. */
  readonly handle: number;
  synchronize(): void;
  /** True when all queued work is done. */
  query(): boolean;
  waitEvent(eventHandle: number): void;
  dispose(): void;
}

export interface NativeEvent {
  readonly handle: number;
  record(stream: number): void;
  synchronize(): void;
  query(): boolean;
  /** Milliseconds from `startEventHandle` to this event (both created with timing). */
  elapsedMs(startEventHandle: number): number;
  dispose(): void;
}

/** Step workspace: bump allocator over one device buffer (bytes; addresses 256-byte aligned by default). */
export interface NativeWorkspace {
  readonly base: number;
  readonly capacity: number;
  readonly used: number;
  readonly peak: number;
  /** @throws RangeError "step workspace exhausted: ..." when the buffer is full. */
  alloc(bytes: number, align?: number): number;
  reset(): void;
  /** Marks [0, bytes) as taken (after a graph replay, whose outputs sit there). */
  setUsed(bytes: number): void;
  dispose(): void;
}

/** cuBLAS(Lt) GEMM: y [T, N] = x [T, K] @ w[N, K]^T (+ bias [N]); fp32 accumulation. */
export interface NativeBlas {
  /** bias = 0 for none (biasDtype then ignored). inDtype is that of x and w. */
  linear(
    stream: number,
    y: number,
    x: number,
    w: number,
    bias: number,
    T: number,
    N: number,
    K: number,
    inDtype: number,
    outDtype: number,
    biasDtype: number,
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

/** A CUDA graph captured from a stream (thread-local capture mode) and instantiated. */
export interface NativeCudaGraph {
  captureBegin(stream: number): void;
  /** Ends the capture and instantiates; throws if the capture was invalidated. */
  captureEnd(): void;
  /** Ends a failed capture and drops it (never throws). */
  captureAbort(): void;
  launch(stream: number): void;
  readonly numNodes: number;
  dispose(): void;
}

/** What the addon was built with. */
export interface AddonBuildInfo {
  cudaRuntimeVersion: number;
  /** False when native/kernels/attention.h was absent at build time (the attention functions then throw). */
  hasAttention: boolean;
  hasSampling: boolean;
  /** The HiSparse kernels (native/kernels/hisparse.h) and sparseDecodeAttention are present. */
  hasHiSparse: boolean;
  /** Built with HISPARSE_DEBUG_SYNC (stream sync after every launch). */
  debugSync: boolean;
  gencode: string;
}

/** The module object of hisparse_native.node. */
export interface HisparseNative {
  readonly abiVersion: number;
  readonly buildInfo: AddonBuildInfo;

  // ---- device ----------------------------------------------------------------------------------
  probe(): CudaProbe;
  deviceProperties(device: number): DeviceProperties;
  setDevice(device: number): void;
  getDevice(): number;
  /** Free and total bytes of the current device (cudaMemGetInfo). */
  memGetInfo(): { free: number; total: number };
  deviceSynchronize(): void;
  /** cudaMemcpyAsync with cudaMemcpyDefault (direction from UVA). */
  memcpyAsync(dst: number, src: number, bytes: number, stream: number): void;
  memsetAsync(dst: number, byteValue: number, bytes: number, stream: number): void;

  // ---- classes ---------------------------------------------------------------------------------
  DeviceAllocator: new (options?: {
    caching?: boolean;
  }) => NativeDeviceAllocator;
  PinnedBuffer: new (bytes: number) => NativePinnedBuffer;
  Stream: new (options?: { nonBlocking?: boolean }) => NativeStream;
  Event: new (options?: { timing?: boolean }) => NativeEvent;
  Workspace: new (bytes: number) => NativeWorkspace;
  /** @throws Error when libcublas/libcublasLt (.so.13 or .so.12) cannot be loaded. */
  Blas: new (options?: {
    workspaceBytes?: number;
    mode?: "lt" | "gemmex";
  }) => NativeBlas;
  CudaGraph: new () => NativeCudaGraph;

  // ---- kernels (native/kernels/kernels.h; argument order = the C launcher's, stream first) -----
  /** out[r] = src[indices[r]] (rowBytes per row); out-of-range index -> zero row. */
  gatherRows(
    stream: number,
    out: number,
    src: number,
    indices: number,
    numRows: number,
    numSrcRows: number,
    rowBytes: number,
  ): void;
  rmsNorm(
    stream: number,
    out: number,
    x: number,
    weight: number,
    numTokens: number,
    hidden: number,
    eps: number,
    xDtype: number,
    wDtype: number,
  ): void;
  fusedAddRmsNorm(
    stream: number,
    x: number,
    residual: number,
    weight: number,
    numTokens: number,
    hidden: number,
    eps: number,
    xDtype: number,
    wDtype: number,
  ): void;
  qkNorm(
    stream: number,
    qkv: number,
    qWeight: number,
    kWeight: number,
    numTokens: number,
    rowStride: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    eps: number,
    dtype: number,
    wDtype: number,
  ): void;
  rotaryEmbedding(
    stream: number,
    qkv: number,
    positions: number,
    cosSin: number,
    numTokens: number,
    rowStride: number,
    numRotHeads: number,
    headDim: number,
    maxPositions: number,
    dtype: number,
  ): void;
  siluAndMul(
    stream: number,
    out: number,
    x: number,
    numTokens: number,
    intermediate: number,
    dtype: number,
  ): void;
  reshapeAndCache(
    stream: number,
    qkv: number,
    kvCache: number,
    slotMapping: number,
    numTokens: number,
    rowStride: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    blockSize: number,
    numBlocks: number,
    dtype: number,
  ): void;
  biasAdd(
    stream: number,
    y: number,
    bias: number,
    rows: number,
    cols: number,
    yDtype: number,
    biasDtype: number,
  ): void;
  cast(stream: number, dst: number, dstDtype: number, src: number, srcDtype: number, count: number): void;

  // ---- attention and sampling (native/kernels/attention.h, sampling.h) --------------------------
  pagedAttentionWorkspaceBytes(
    maxNumReqs: number,
    maxNumTokens: number,
    numHeads: number,
    headDim: number,
    maxModelLen: number,
    blockSize: number,
  ): number;
  pagedDecodeAttention(
    stream: number,
    qkv: number,
    qkvRowStride: number,
    kvCache: number,
    out: number,
    queryStartLoc: number,
    seqLens: number,
    blockTables: number,
    maxBlocksPerReq: number,
    numReqs: number,
    numTokens: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    blockSize: number,
    scale: number,
    maxModelLen: number,
    workspace: number,
    workspaceBytes: number,
  ): void;
  pagedPrefillAttention(
    stream: number,
    qkv: number,
    qkvRowStride: number,
    kvCache: number,
    out: number,
    queryStartLoc: number,
    seqLens: number,
    blockTables: number,
    maxBlocksPerReq: number,
    numReqs: number,
    numTokens: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    blockSize: number,
    scale: number,
    maxModelLen: number,
    workspace: number,
    workspaceBytes: number,
    maxQueryLen: number,
  ): void;
  sampleWorkspaceBytes(B: number, V: number): number;
  sample(
    stream: number,
    logits: number,
    B: number,
    V: number,
    temperature: number,
    topK: number,
    topP: number,
    minP: number,
    uniform: number,
    outIds: number,
    workspace: number,
    workspaceBytes: number,
  ): void;

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
    stream: number,
    qkv: number,
    qkvRowStride: number,
    kvCache: number,
    out: number,
    queryStartLoc: number,
    seqLens: number,
    blockTables: number,
    maxBlocksPerReq: number,
    numReqs: number,
    numTokens: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    blockSize: number,
    scale: number,
    maxModelLen: number,
    workspace: number,
    workspaceBytes: number,
    headBlockTables: number,
    headSeqLens: number,
    headTableStride: number,
    rowFlags: number,
    tokenRow: number,
    onlyFlaggedRows: number,
  ): void;
}

/** Raised when the addon is missing or unusable; the message is one sentence for the user. */
export class AddonLoadError extends Error {
  override name = "AddonLoadError";
}

/** Folder holding package.json and native/ (this file sits in src/ or dist/src/ below it). */
function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    if (existsSync(join(dir, "package.json")) && existsSync(join(dir, "native"))) return dir;
    dir = dirname(dir);
  }
  return join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
}

/** Where the addon is looked for: $HISPARSE_NATIVE_ADDON, else <root>/build/Release/hisparse_native.node. */
export function defaultAddonPath(): string {
  const fromEnv = process.env.HISPARSE_NATIVE_ADDON;
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  return join(packageRoot(), "build", "Release", "hisparse_native.node");
}

const loaded = new Map<string, HisparseNative>();

/**
 * Loads (once per path and thread) and returns the addon.
 * @throws AddonLoadError when the file is missing ("run `npm run build:native`"), cannot be
 *   loaded, or was built for another ABI version.
 */
export function loadAddon(path: string = defaultAddonPath()): HisparseNative {
  const cached = loaded.get(path);
  if (cached !== undefined) return cached;
  if (!existsSync(path)) {
    throw new AddonLoadError(
      `the native CUDA addon is not built (${path} is missing): run \`npm run build:native\``,
    );
  }
  let mod: HisparseNative;
  try {
    mod = createRequire(import.meta.url)(path) as HisparseNative;
  } catch (err) {
    throw new AddonLoadError(`the native CUDA addon at ${path} failed to load: ${(err as Error).message}`);
  }
  if (mod.abiVersion !== ADDON_ABI_VERSION) {
    throw new AddonLoadError(
      `the native CUDA addon at ${path} has ABI version ${mod.abiVersion}, expected ${ADDON_ABI_VERSION}: run \`npm run build:native\``,
    );
  }
  loaded.set(path, mod);
  return mod;
}
