/**
 * Addon typings, weight-loading area (native/addon/loader.cc): the FileReader that reads file
 * ranges into pinned staging buffers on native threads, and the generated-weight launcher
 * (native/kernels/weight_fill.h). Part of the addon's typed surface: import these through
 * addon.ts, the only loader (DESIGN.md §1).
 */
import type { DevicePtr } from "./device_ptr.js";

/**
 * `buffers` page-locked host buffers of `bufferBytes` each and `threads` reader threads. A read
 * into buffer i runs on a reader thread while JS goes on; `wait(i)` returns once it is done.
 */
export interface NativeFileReader {
  readonly numBuffers: number;
  readonly bufferBytes: number;
  /** Address of buffer i (UVA: the source of cudaMemcpyAsync). @throws RangeError for no such buffer. */
  bufferPtr(i: number): DevicePtr;
  /**
   * Queues a read of `bytes` bytes (<= bufferBytes) at byte `position` of the open file
   * descriptor `fd` into buffer i, from its start; returns at once.
   * @throws Error when buffer i has a read that was not waited for; RangeError on bad arguments.
   */
  read(i: number, fd: number, position: number, bytes: number): void;
  /**
   * Blocks until buffer i's read is done.
   * @throws Error "read of N bytes at offset P failed: <errno text>" or "the file ended K bytes
   *   into a read of N bytes at offset P (truncated file?)"; Error when no read was queued.
   */
  wait(i: number): void;
  /** Stops the threads (a read in progress finishes first) and frees the buffers. */
  dispose(): void;
}

/** The weight-loading part of the module object (HisparseNative in addon.ts). */
export interface NativeLoaderApi {
  FileReader: new (options: { buffers: number; bufferBytes: number; threads: number }) => NativeFileReader;
  /**
   * hsFillWeight: elements [first, first + count) of a generated fill into dst (weight_fill.ts
   * rule, bit for bit); `table` = NULL_PTR writes `constantBits` everywhere. dtype gives the element size;
   * the table holds [65536] entries already in dst's dtype. key0, key1, constantBits < 2^32.
   */
  fillWeight(
    stream: number,
    dst: DevicePtr,
    dtype: number,
    count: number,
    first: number,
    table: DevicePtr,
    constantBits: number,
    key0: number,
    key1: number,
  ): void;
}
