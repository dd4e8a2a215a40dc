import { type CpuBuffer, type CpuDType, CpuTensor, numelOf } from "./tensor.js";
import type { CpuThreadPool } from "./thread_pool.js";

/** Workspace allocations are aligned to 16 elements (64 bytes, one cache line). */
const ALIGN_ELEMS = 16;
/** Smallest workspace chunk, in elements (4 MiB). */
const MIN_CHUNK_ELEMS = 1 << 20;

/**
 * Memory of the CPU backend: persistent tensors (weights, KV caches, uploads), each in its own
 * buffer, and the step workspace, a bump allocator over chunks that `resetWorkspace()` recycles.
 * When a step needs more workspace than the current chunk, extra chunks are added; at the next
 * reset they are replaced by one chunk large enough for the whole step, so steady-state steps
 * (decode) allocate nothing. With a thread pool every buffer is a SharedArrayBuffer announced to
 * the workers; without one, a plain ArrayBuffer.
 */
export class CpuMemory {
  private nextId = 1;
  private readonly pool: CpuThreadPool | null;
  private chunks: CpuBuffer[] = [];
  private readonly persistent = new Set<CpuBuffer>();
  /** Elements used in the last chunk. */
  private used = 0;
  /** Elements used by this step in all chunks before the last. */
  private usedBefore = 0;
  /** Current workspace epoch: tensors of older epochs are stale. */
  epoch = 0;
  /** Bytes held by live persistent tensors. */
  persistentBytes = 0;

  constructor(pool: CpuThreadPool | null) {
    this.pool = pool;
  }

  /** Bytes held by the workspace chunks. */
  get workspaceBytes(): number {
    let b = 0;
    for (const c of this.chunks) b += c.bytes;
    return b;
  }

  /**
   * Allocates a zeroed buffer of `numel` 4-byte elements, shared with the workers when a pool
   * exists.
   * @throws Error when the allocation fails (out of memory).
   */
  private newBuffer(numel: number): CpuBuffer {
    const bytes = Math.max(4, numel * 4);
    let raw: ArrayBuffer | SharedArrayBuffer;
    try {
      raw = this.pool !== null ? new SharedArrayBuffer(bytes) : new ArrayBuffer(bytes);
    } catch (e) {
      throw new Error(`the CPU backend could not allocate ${bytes} bytes (${(e as Error).message})`);
    }
    const buf: CpuBuffer = {
      id: this.nextId++,
      bytes,
      f32: new Float32Array(raw),
      i32: new Int32Array(raw),
      freed: false,
    };
    if (this.pool !== null) this.pool.registerBuffer(buf.id, raw as SharedArrayBuffer);
    return buf;
  }

  private releaseBuffer(buf: CpuBuffer): void {
    buf.freed = true;
    this.pool?.releaseBuffer(buf.id);
  }

  /** A zeroed persistent tensor (lives until {@link free}). */
  allocPersistent(shape: readonly number[], dtype: CpuDType): CpuTensor {
    const buf = this.newBuffer(numelOf(shape));
    this.persistentBytes += buf.bytes;
    this.persistent.add(buf);
    return new CpuTensor([...shape], dtype, buf, 0, -1);
  }

  /** A workspace tensor, valid until the next {@link resetWorkspace}. Contents are undefined. */
  allocWorkspace(shape: readonly number[], dtype: CpuDType): CpuTensor {
    const numel = numelOf(shape);
    const size = Math.ceil(numel / ALIGN_ELEMS) * ALIGN_ELEMS;
    let last = this.chunks[this.chunks.length - 1];
    if (last === undefined || this.used + size > last.f32.length) {
      const prev = last === undefined ? 0 : last.f32.length;
      if (last !== undefined) this.usedBefore += this.used;
      last = this.newBuffer(Math.max(size, MIN_CHUNK_ELEMS, 2 * prev));
      this.chunks.push(last);
      this.used = 0;
    }
    const t = new CpuTensor([...shape], dtype, last, this.used, this.epoch);
    this.used += size;
    return t;
  }

  /**
   * Recycles the workspace: every workspace tensor handed out so far becomes stale. If the step
   * needed several chunks, they are replaced by one that holds the whole step.
   */
  resetWorkspace(): void {
    this.epoch++;
    if (this.chunks.length > 1) {
      const need = this.usedBefore + this.used;
      for (const c of this.chunks) this.releaseBuffer(c);
      this.chunks = [this.newBuffer(Math.ceil((need * 1.25) / ALIGN_ELEMS) * ALIGN_ELEMS)];
    }
    this.used = 0;
    this.usedBefore = 0;
  }

  /**
   * Frees a persistent tensor's buffer. Freeing a tensor twice is a no-op.
   * @throws Error for workspace tensors (they are recycled by resetWorkspace).
   */
  free(t: CpuTensor): void {
    if (!t.persistent)
      throw new Error("free() takes persistent tensors; workspace tensors are recycled by resetWorkspace()");
    if (t.buffer.freed) return;
    this.persistentBytes -= t.buffer.bytes;
    this.persistent.delete(t.buffer);
    this.releaseBuffer(t.buffer);
  }

  /** Releases the workspace and every persistent buffer; all tensors become invalid. */
  dispose(): void {
    for (const c of this.chunks) this.releaseBuffer(c);
    for (const b of this.persistent) this.releaseBuffer(b);
    this.persistent.clear();
    this.persistentBytes = 0;
    this.chunks = [];
    this.epoch++;
  }
}
