/**
 * Addon typings, runtime area: device queries, memory (caching allocator, pinned host buffers,
 * step workspace), streams, events and CUDA graphs (native/addon/*.cc). Part of the addon's
 * typed surface: import these through addon.ts, the only loader (DESIGN.md §1).
 */
import type { DevicePtr } from "./device_ptr.js";

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
  malloc(bytes: number): DevicePtr;
  /** @throws Error for an address this allocator did not hand out. */
  free(ptr: DevicePtr): void;
  emptyCache(): void;
  stats(): AllocatorStats;
  /** Frees every block, live or cached. */
  dispose(): void;
}

/** Page-locked, device-mapped host memory (cudaHostAlloc Mapped|Portable) seen as an ArrayBuffer. */
export interface NativePinnedBuffer {
  /** Device-visible address of the buffer (UVA: the host address). 0 once disposed. */
  readonly ptr: DevicePtr;
  readonly byteLength: number;
  /**
   * The memory as an external ArrayBuffer, created on first read; views made before dispose()
   * read as empty afterwards (the buffer is detached).
   * @throws RangeError above 4 GiB (node::Buffer's limit on external ArrayBuffers; the kernels
   *   use `ptr`), Error once disposed.
   */
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
  readonly base: DevicePtr;
  readonly capacity: number;
  readonly used: number;
  readonly peak: number;
  /** @throws RangeError "step workspace exhausted: ..." when the buffer is full. */
  alloc(bytes: number, align?: number): DevicePtr;
  reset(): void;
  /** Marks [0, bytes) as taken (after a graph replay, whose outputs sit there). */
  setUsed(bytes: number): void;
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

/** The runtime part of the module object (HisparseNative in addon.ts). */
export interface NativeMemoryApi {
  // ---- device ----------------------------------------------------------------------------------
  probe(): CudaProbe;
  deviceProperties(device: number): DeviceProperties;
  setDevice(device: number): void;
  getDevice(): number;
  /** Free and total bytes of the current device (cudaMemGetInfo). */
  memGetInfo(): { free: number; total: number };
  deviceSynchronize(): void;
  /** cudaMemcpyAsync with cudaMemcpyDefault (direction from UVA). */
  memcpyAsync(dst: DevicePtr, src: DevicePtr, bytes: number, stream: number): void;
  memsetAsync(dst: DevicePtr, byteValue: number, bytes: number, stream: number): void;

  // ---- classes ---------------------------------------------------------------------------------
  DeviceAllocator: new (options?: {
    caching?: boolean;
  }) => NativeDeviceAllocator;
  PinnedBuffer: new (bytes: number) => NativePinnedBuffer;
  Stream: new (options?: { nonBlocking?: boolean }) => NativeStream;
  Event: new (options?: { timing?: boolean }) => NativeEvent;
  Workspace: new (bytes: number) => NativeWorkspace;
  CudaGraph: new () => NativeCudaGraph;
}
