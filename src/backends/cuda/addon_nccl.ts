import type { DevicePtr } from "./device_ptr.js";

/**
 * NCCL, loaded by the addon at run time with dlopen("libnccl.so.2") (native/addon/nccl_dl.h:
 * the prototypes; nccl.cc: these functions). NCCL_NVLS_ENABLE=0 is set before the library is
 * opened. Communicator handles are plain numbers (the ncclComm_t address); collectives are
 * enqueued on `stream` (captured into a CUDA graph when the stream is capturing).
 */
export interface NativeNcclApi {
  /**
   * The loaded library: NCCL_VERSION_CODE (e.g. 22803 = 2.28.3) and the path dlopen took.
   * @throws Error "NCCL (libnccl.so.2) could not be loaded; ..." when it is missing.
   */
  ncclInfo(): { version: number; path: string };
  /** A fresh unique id (128 bytes), made by rank 0 and shared with the others. */
  ncclGetUniqueId(): Uint8Array;
  /** Joins the communicator of `worldSize` ranks as `rank` on the current device; blocks until all joined. */
  ncclCommInitRank(uniqueId: Uint8Array, worldSize: number, rank: number): number;
  ncclCommDestroy(comm: number): void;
  /** Sum over ranks of `count` elements (DTYPE_CODE `dtype`); send === recv is in place. */
  ncclAllReduce(
    stream: number,
    comm: number,
    send: DevicePtr,
    recv: DevicePtr,
    count: number,
    dtype: number,
  ): void;
  /** recv [worldSize * sendCount] = every rank's send, rank-major. */
  ncclAllGather(
    stream: number,
    comm: number,
    send: DevicePtr,
    recv: DevicePtr,
    sendCount: number,
    dtype: number,
  ): void;
}

/** "2.28.3" from NCCL_VERSION_CODE 22803 (2.9+: major * 10000 + minor * 100 + patch). */
export function ncclVersionString(code: number): string {
  const major = Math.floor(code / 10000);
  const minor = Math.floor((code % 10000) / 100);
  return `${major}.${minor}.${code % 100}`;
}
