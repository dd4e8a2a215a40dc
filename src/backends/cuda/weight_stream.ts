import { DTYPE_BYTES, type DType } from "../backend.js";
import {
  type DevicePtr,
  DTYPE_CODE,
  type HisparseNative,
  type NativeEvent,
  type NativeFileReader,
  offsetPtr,
} from "./addon.js";

/**
 * Checkpoint bytes streamed from files to device weights (Backend.loadWeightFiles on CUDA):
 *
 *   file --pread, reader threads--> pinned buffer b --cudaMemcpyAsync--> weight (or scratch -> cast)
 *
 * The byte ranges of all tensors are sorted by (file, offset) and cut into chunks of at most one
 * buffer (`planChunks`); neighbouring ranges share a chunk, so one read serves many small tensors
 * and a large tensor spans several chunks. `buffers` pinned buffers form a ring: the reads of the
 * next chunks run on native threads (addon FileReader) while the copies of the current one are
 * queued on the stream, and a buffer is read into again only after an event says its copies are
 * done. Each copy goes straight to its destination rows (a part of a fused q/k/v weight lands in
 * its row range); a range whose dtype differs from the weight's is copied to a device scratch and
 * cast there (the cast kernel of uploads). Reads from the page cache run in parallel on the
 * reader threads; the host-to-device copies run at PCIe speed behind them.
 */

/** Sizes of the streaming pipeline (CudaBackendOptions.weightStreaming). */
export interface WeightStreamOptions {
  /** Pinned buffers in the ring (default 8). */
  buffers: number;
  /** Bytes of each buffer, the largest read (default 32 MiB). */
  bufferBytes: number;
  /** Reader threads (default 8). */
  threads: number;
}

export const DEFAULT_WEIGHT_STREAM: WeightStreamOptions = {
  buffers: 8,
  bufferBytes: 32 * 2 ** 20,
  threads: 8,
};

/** Bytes two ranges of one file may lie apart and still share a read (the gap is read and dropped). */
const MAX_READ_GAP = 64 * 1024;

/** One range to place: bytes of a file and their device destination. */
export interface StreamRange {
  fd: number;
  path: string;
  position: number;
  byteLength: number;
  srcDtype: DType;
  /** Device address of the range's first element in the weight, and the weight's dtype. */
  dst: DevicePtr;
  dstDtype: DType;
}

/** One host-to-device copy out of a chunk's buffer. */
export interface ChunkCopy {
  /** Offset in the buffer (bytes). */
  bufferOffset: number;
  bytes: number;
  dst: DevicePtr;
  srcDtype: DType;
  dstDtype: DType;
}

/** One read: `byteLength` bytes at `position` of `fd`, and the copies out of it. */
export interface Chunk {
  fd: number;
  path: string;
  position: number;
  byteLength: number;
  copies: ChunkCopy[];
  /** Bytes of ranges in this chunk (progress; gaps excluded). */
  rangeBytes: number;
}

/**
 * Cuts the ranges into reads of at most `bufferBytes` (pure planning, unit-tested). Ranges are
 * taken in (fd, position) order; a range joins the current chunk when it is in the same file, at
 * most MAX_READ_GAP bytes after the chunk's end (or overlapping it) and the chunk still has room;
 * the rest of a range that does not fit goes on in the next chunk. A range that is cast is only
 * split on whole source elements.
 * @throws Error when bufferBytes cannot hold one source element.
 */
export function planChunks(ranges: readonly StreamRange[], bufferBytes: number): Chunk[] {
  if (!(bufferBytes >= 4)) throw new Error(`planChunks: buffers of ${bufferBytes} bytes are too small`);
  const sorted = [...ranges].sort((a, b) => a.fd - b.fd || a.position - b.position);
  const chunks: Chunk[] = [];
  let cur: Chunk | null = null;
  const open = (r: StreamRange, pos: number): Chunk => {
    const c: Chunk = { fd: r.fd, path: r.path, position: pos, byteLength: 0, copies: [], rangeBytes: 0 };
    chunks.push(c);
    return c;
  };
  for (const r of sorted) {
    const srcEB = DTYPE_BYTES[r.srcDtype];
    const cast = r.srcDtype !== r.dstDtype;
    let done = 0;
    while (done < r.byteLength) {
      const pos = r.position + done;
      const joins =
        cur !== null &&
        cur.fd === r.fd &&
        pos >= cur.position &&
        pos <= cur.position + cur.byteLength + MAX_READ_GAP &&
        pos < cur.position + bufferBytes;
      const c: Chunk = joins ? cur! : open(r, pos);
      cur = c;
      let take = Math.min(r.byteLength - done, c.position + bufferBytes - pos);
      if (cast && take < r.byteLength - done) take -= take % srcEB;
      if (take === 0) {
        cur = open(r, pos); // the room left holds no whole element: the next read starts here
        continue;
      }
      const dst = offsetPtr(r.dst, cast ? (done / srcEB) * DTYPE_BYTES[r.dstDtype] : done);
      c.copies.push({
        bufferOffset: pos - c.position,
        bytes: take,
        dst,
        srcDtype: r.srcDtype,
        dstDtype: r.dstDtype,
      });
      c.byteLength = Math.max(c.byteLength, pos + take - c.position);
      c.rangeBytes += take;
      done += take;
    }
  }
  return chunks;
}

/** What streaming needs from the backend: the addon, its stream, and the device scratch of casts. */
export interface StreamContext {
  addon: HisparseNative;
  stream: number;
  /** Device scratch for ranges that are cast (at least bufferBytes). */
  scratch: DevicePtr;
  scratchBytes: number;
}

/**
 * Places every range (planChunks + the buffer ring above); returns when all copies are done.
 * onBytes(done, total) follows the range bytes queued. On an error the stream is drained before
 * the buffers are freed (no copy reads freed memory).
 * @throws Error "<path>: <what the read said>" when a read fails or a file ends early.
 */
export function streamWeightFiles(
  ctx: StreamContext,
  ranges: readonly StreamRange[],
  opts: WeightStreamOptions,
  onBytes?: (done: number, total: number) => void,
): void {
  const chunks = planChunks(ranges, opts.bufferBytes);
  const total = chunks.reduce((a, c) => a + c.rangeBytes, 0);
  if (chunks.length === 0) return;
  if (ranges.some((r) => r.srcDtype !== r.dstDtype) && ctx.scratchBytes < opts.bufferBytes)
    throw new Error(`weight streaming: the cast scratch (${ctx.scratchBytes} B) is smaller than a buffer`);
  const { addon, stream } = ctx;
  const K = Math.min(opts.buffers, chunks.length);
  const reader = new addon.FileReader({
    buffers: K,
    bufferBytes: opts.bufferBytes,
    threads: Math.min(opts.threads, K),
  });
  const events: NativeEvent[] = [];
  const submit = (j: number) => {
    const c = chunks[j]!;
    reader.read(j % K, c.fd, c.position, c.byteLength);
  };
  try {
    for (let b = 0; b < K; b++) events.push(new addon.Event());
    for (let j = 0; j < K; j++) submit(j);
    // Buffer of chunk j is refilled after chunk j + lag was queued: with one buffer at once,
    // else one chunk later, so the wait on its copies overlaps the next chunk's read.
    const lag = K >= 2 ? 1 : 0;
    let done = 0;
    for (let j = 0; j < chunks.length; j++) {
      const c = chunks[j]!;
      const b = j % K;
      try {
        reader.wait(b);
      } catch (e) {
        throw new Error(`${c.path}: ${(e as Error).message}`);
      }
      queueCopies(ctx, reader.bufferPtr(b), c);
      events[b]!.record(stream);
      done += c.rangeBytes;
      onBytes?.(done, total);
      const r = j - lag;
      if (r >= 0 && r + K < chunks.length) {
        events[r % K]!.synchronize();
        submit(r + K);
      }
    }
    for (const e of events) e.synchronize();
  } finally {
    drainThenRelease(ctx, reader, events);
  }
}

/** Queues chunk c's copies out of the buffer at `buffer`: direct, or through the scratch and a cast. */
function queueCopies(ctx: StreamContext, buffer: DevicePtr, c: Chunk): void {
  for (const cp of c.copies) {
    const src = offsetPtr(buffer, cp.bufferOffset);
    if (cp.srcDtype === cp.dstDtype) {
      ctx.addon.memcpyAsync(cp.dst, src, cp.bytes, ctx.stream);
    } else {
      ctx.addon.memcpyAsync(ctx.scratch, src, cp.bytes, ctx.stream);
      const n = cp.bytes / DTYPE_BYTES[cp.srcDtype];
      ctx.addon.cast(ctx.stream, cp.dst, DTYPE_CODE[cp.dstDtype], ctx.scratch, DTYPE_CODE[cp.srcDtype], n);
    }
  }
}

/** Waits for the stream (queued copies may still read the buffers), then frees reader and events. */
function drainThenRelease(ctx: StreamContext, reader: NativeFileReader, events: NativeEvent[]): void {
  try {
    const sync = new ctx.addon.Event();
    try {
      sync.record(ctx.stream);
      sync.synchronize();
    } finally {
      sync.dispose();
    }
  } finally {
    reader.dispose();
    for (const e of events) e.dispose();
  }
}
