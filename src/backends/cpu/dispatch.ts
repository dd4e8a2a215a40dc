import type { QkvLayout } from "../backend.js";
import type { CheckedMetadata } from "./checks.js";
import { pagedAttentionKernel } from "./kernels/attention.js";
import { chunkRange, linearKernel } from "./kernels/linear.js";
import type { CpuTensor } from "./tensor.js";
import { type CpuThreadPool, JOB_ATTENTION, JOB_LINEAR } from "./thread_pool.js";

/**
 * Work of one chunk of a threaded call, in multiply-adds (~15 us at the ~2.2 G multiply-adds/s of
 * one thread): big enough that claiming a chunk (one compare-and-swap) is free, small enough that
 * a thread never waits long for another's last chunk (bench/results/cpu_ops.md).
 */
export const CHUNK_MACS = 1 << 15;
/** Chunks per threaded call at most (more gives no better balance). */
const MAX_CHUNKS_PER_CALL = 64;

/** [buffer id, element offset] of a tensor: how a job names it to the worker threads. */
const ref = (t: CpuTensor): [number, number] => [t.buffer.id, t.offset];

/**
 * Runs the big kernels (matmul, paged attention) on the calling thread or, when the call is big
 * enough, in chunks shared with the thread pool. Arguments are already checked by CpuBackend.
 */
export class KernelDispatcher {
  constructor(
    private readonly pool: CpuThreadPool | null,
    private readonly chunkMacs: number,
  ) {}

  /**
   * Chunks for a call of `macs` multiply-adds that splits into at most `maxSplits` pieces: one
   * per chunkMacs, at most 64. Calls under three chunks of work get 1 (the calling thread runs
   * them): there, waking a worker costs more than it saves (bench/results/cpu_ops.md).
   */
  numChunks(macs: number, maxSplits: number): number {
    if (this.pool === null || macs < 3 * this.chunkMacs) return 1;
    return Math.max(1, Math.min(Math.floor(macs / this.chunkMacs), maxSplits, MAX_CHUNKS_PER_CALL));
  }

  /** out = x @ w^T (+ b). x: [T, K]; w: [N, K]; b: [N] | null; out: [T, N]. */
  linear(
    x: CpuTensor,
    w: CpuTensor,
    b: CpuTensor | null,
    out: CpuTensor,
    T: number,
    N: number,
    K: number,
  ): void {
    this.linearAt(x, x.offset, w, w.offset, b, out, out.offset, T, N, K);
  }

  /**
   * Grouped matmul of the MoE experts: for each expert e with rows [offsets[e], offsets[e+1]),
   * out[rows] = x[rows] @ w[e]^T, with the linear kernel (so each row gets linear's bits).
   * x: [P, K]; w: [E, N, K]; offsets: [E + 1] host copy; out: [P, N]. Rows outside every
   * segment are left as they are.
   */
  groupedLinear(
    x: CpuTensor,
    w: CpuTensor,
    offsets: Int32Array,
    out: CpuTensor,
    E: number,
    N: number,
    K: number,
  ): void {
    for (let e = 0; e < E; e++) {
      const r0 = offsets[e]!;
      const rows = offsets[e + 1]! - r0;
      if (rows === 0) continue;
      this.linearAt(
        x,
        x.offset + r0 * K,
        w,
        w.offset + e * N * K,
        null,
        out,
        out.offset + r0 * N,
        rows,
        N,
        K,
      );
    }
  }

  /** linear with explicit element offsets of x, w and out in their buffers. */
  private linearAt(
    x: CpuTensor,
    xOff: number,
    w: CpuTensor,
    wOff: number,
    b: CpuTensor | null,
    out: CpuTensor,
    oOff: number,
    T: number,
    N: number,
    K: number,
  ): void {
    const bias = b?.buffer.f32 ?? null;
    const bOff = b?.offset ?? 0;
    const run = (n0: number, n1: number): void =>
      linearKernel(x.buffer.f32, xOff, w.buffer.f32, wOff, bias, bOff, out.buffer.f32, oOff, T, N, K, n0, n1);
    const chunks = this.numChunks(T * N * K, N >> 1);
    if (this.pool === null || chunks < 2) {
      run(0, N);
      return;
    }
    const args = [
      x.buffer.id,
      xOff,
      w.buffer.id,
      wOff,
      b?.buffer.id ?? -1,
      bOff,
      out.buffer.id,
      oOff,
      T,
      N,
      K,
    ];
    this.pool.run(JOB_LINEAR, args, chunks, (c) => run(...chunkRange(N, c, chunks, 2)));
  }

  /**
   * Paged attention of every (token, kv head) item. qkv: [T, (Hq + 2 * Hkv) * D];
   * kv: the layer's cache; out: [T, Hq * D]; m: checked metadata of `numReqs` requests, whose
   * seqLens and blockTables rows are shared by all kv heads (`m.perHead` false: dense,
   * [numReqs] and [numReqs, maxBlocksPerReq]) or given per kv head (true: [numReqs, Hkv] and
   * [numReqs, Hkv, maxBlocksPerReq]).
   */
  pagedAttention(
    qkv: CpuTensor,
    kv: CpuTensor,
    out: CpuTensor,
    m: CheckedMetadata,
    numReqs: number,
    layout: QkvLayout,
    T: number,
    blockSize: number,
  ): void {
    const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
    const numItems = T * Hkv;
    const [qsl, sl, bt] = [m.qsl, m.seqLens, m.blockTables];
    const mb = m.maxBlocksPerReq;
    // Strides (elements) of a request's and a kv head's seqLen and block-table row.
    const strides = m.perHead ? [Hkv, 1, Hkv * mb, mb] : [1, 0, mb, 0];
    const [slS, slH, btS, btH] = strides as [number, number, number, number];
    const run = (i0: number, i1: number): void =>
      // biome-ignore format: the kernel's 23 arguments read best grouped
      pagedAttentionKernel(
        qkv.buffer.f32, qkv.offset, kv.buffer.f32, kv.offset, out.buffer.f32, out.offset,
        qsl.buffer.i32, qsl.offset, sl.buffer.i32, sl.offset, bt.buffer.i32, bt.offset,
        slS, slH, btS, btH, numReqs, Hq, Hkv, D, blockSize, i0, i1,
      );
    // Multiply-adds: q.k and p.v over headDim for every (query, key) pair and q head.
    const chunks = this.numChunks(2 * m.pairs * Hq * D, numItems);
    if (this.pool === null || chunks < 2) {
      run(0, numItems);
      return;
    }
    const args = [...ref(qkv), ...ref(kv), ...ref(out), ...ref(qsl), ...ref(sl), ...ref(bt)];
    args.push(slS, slH, btS, btH, numReqs, Hq, Hkv, D, blockSize, numItems);
    this.pool.run(JOB_ATTENTION, args, chunks, (c) => run(...chunkRange(numItems, c, chunks, 1)));
  }
}
