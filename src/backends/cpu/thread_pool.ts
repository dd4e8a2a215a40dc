import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from "node:worker_threads";
import { pagedAttentionKernel } from "./kernels/attention.js";
import { chunkRange, linearKernel, linearRow1, linearTile2 } from "./kernels/linear.js";

/**
 * Slots of the shared control block (Int32Array over a SharedArrayBuffer) through which the
 * calling thread publishes one job at a time.
 */
const CTRL = {
  /** Job sequence number; idle workers sleep on it with Atomics.wait. */
  seq: 0,
  /** Claim word: (seq & SEQ_MASK) << CHUNK_BITS | next unclaimed chunk. */
  claim: 1,
  /** Chunks finished in the current job; the thread finishing the last one notifies. */
  done: 2,
  /** Set to 1 when a worker's kernel threw (its message follows on its port). */
  error: 3,
  /** Job kind (JOB_*). */
  kind: 4,
  /** Chunks in the current job. */
  numChunks: 5,
  /** First of the job's int arguments. */
  args: 8,
  size: 40,
} as const;
/** Bits of the claim word that count chunks; jobs have at most MAX_CHUNKS chunks. */
const CHUNK_BITS = 10;
/** Largest number of chunks of one job. */
export const MAX_CHUNKS = (1 << CHUNK_BITS) - 1;
/** Job sequence bits kept in the claim word (it stays a positive int32). */
const SEQ_MASK = (1 << (31 - CHUNK_BITS)) - 1;

/** y = x @ w^T (+ bias), chunks of weight rows. Args: see {@link CpuThreadPool.run}. */
export const JOB_LINEAR = 1;
/** Paged attention, chunks of (token, kv head) items. */
export const JOB_ATTENTION = 2;
const JOB_EXIT = 3;

/** What a worker thread receives at start. */
interface WorkerInit {
  ctrl: SharedArrayBuffer;
  port: MessagePort;
  spin: number;
  slots: typeof CTRL;
  chunkBits: number;
  seqMask: number;
}

/** Messages on a worker's port: share a buffer or forget one (worker -> caller: error text). */
type BufferMessage = { op: "add"; id: number; buffer: SharedArrayBuffer } | { op: "delete"; id: number };

/**
 * Body of every worker thread. It runs from source text (see {@link workerSource}), so it may use
 * only its arguments and globals: the kernels come in as parameters.
 * Loop: wait for a new job (spinning briefly first, since the jobs of a forward step follow each
 * other within microseconds), take the buffers announced on the port, copy the job's arguments,
 * then claim chunks with compare-and-swap on the claim word until none is left. The claim word
 * carries the job's sequence number, so a worker that woke late and copied arguments of an old
 * job can never claim a chunk of a newer one.
 */
function workerMain(
  data: WorkerInit,
  receive: typeof receiveMessageOnPort,
  linear: typeof linearKernel,
  range: typeof chunkRange,
  attention: typeof pagedAttentionKernel,
): void {
  const S = data.slots;
  const ctrl = new Int32Array(data.ctrl);
  const f32 = new Map<number, Float32Array>();
  const i32 = new Map<number, Int32Array>();
  const drain = (): void => {
    for (let m = receive(data.port); m !== undefined; m = receive(data.port)) {
      const msg = m.message as BufferMessage;
      if (msg.op === "add") {
        f32.set(msg.id, new Float32Array(msg.buffer));
        i32.set(msg.id, new Int32Array(msg.buffer));
      } else {
        f32.delete(msg.id);
        i32.delete(msg.id);
      }
    }
  };
  const F = (id: number): Float32Array => {
    const v = f32.get(id);
    if (v === undefined) throw new Error(`unknown buffer ${id}`);
    return v;
  };
  const I = (id: number): Int32Array => {
    const v = i32.get(id);
    if (v === undefined) throw new Error(`unknown buffer ${id}`);
    return v;
  };
  const chunkMask = (1 << data.chunkBits) - 1;
  let seen = 0;
  for (;;) {
    for (let i = 0; i < data.spin && Atomics.load(ctrl, S.seq) === seen; i++);
    Atomics.wait(ctrl, S.seq, seen);
    seen = Atomics.load(ctrl, S.seq);
    const kind = ctrl[S.kind]!;
    if (kind === 3) return; // JOB_EXIT
    drain();
    const n = ctrl[S.numChunks]!;
    const a = ctrl.slice(S.args, S.size);
    for (;;) {
      const v = Atomics.load(ctrl, S.claim);
      const c = v & chunkMask;
      if (v >>> data.chunkBits !== (seen & data.seqMask) || c >= n) break; // job over (or newer)
      if (Atomics.compareExchange(ctrl, S.claim, v, v + 1) !== v) continue; // lost the race
      try {
        if (kind === 1) {
          const [n0, n1] = range(a[9]!, c, n, 2);
          const bias = a[4]! < 0 ? null : F(a[4]!);
          linear(
            F(a[0]!),
            a[1]!,
            F(a[2]!),
            a[3]!,
            bias,
            a[5]!,
            F(a[6]!),
            a[7]!,
            a[8]!,
            a[9]!,
            a[10]!,
            n0,
            n1,
          );
        } else if (kind === 2) {
          const [i0, i1] = range(a[21]!, c, n, 1);
          attention(
            F(a[0]!),
            a[1]!,
            F(a[2]!),
            a[3]!,
            F(a[4]!),
            a[5]!,
            I(a[6]!),
            a[7]!,
            I(a[8]!),
            a[9]!,
            I(a[10]!),
            a[11]!,
            a[12]!,
            a[13]!,
            a[14]!,
            a[15]!,
            a[16]!,
            a[17]!,
            a[18]!,
            a[19]!,
            a[20]!,
            i0,
            i1,
          );
        }
      } catch (e) {
        Atomics.store(ctrl, S.error, 1);
        data.port.postMessage(String((e as Error).stack ?? e));
      }
      if (Atomics.add(ctrl, S.done, 1) + 1 === n) Atomics.notify(ctrl, S.done);
    }
  }
}

/**
 * Source text of a worker thread: the kernels (their compiled text, identical to what the calling
 * thread runs) and {@link workerMain}. `__name` is the helper that esbuild-based loaders (tsx)
 * insert to keep function names; it is defined as a no-op here.
 */
function workerSource(): string {
  return [
    '"use strict";',
    'const { workerData, receiveMessageOnPort } = require("node:worker_threads");',
    "var __name = function (f) { return f; };",
    linearRow1.toString(),
    linearTile2.toString(),
    linearKernel.toString(),
    chunkRange.toString(),
    pagedAttentionKernel.toString(),
    `(${workerMain.toString()})(workerData, receiveMessageOnPort, linearKernel, chunkRange, pagedAttentionKernel);`,
  ].join("\n");
}

/**
 * A small pool of worker threads that share big kernels (matmuls, attention) with the calling
 * thread, on SharedArrayBuffers, synchronised with Atomics. A job is cut into chunks that every
 * thread, the caller included, claims dynamically; so when a worker is slow to wake or its core
 * is busy with another process, the caller simply computes more chunks (at worst it waits for
 * one chunk in flight). Which thread computes a chunk never changes its result.
 * The API is synchronous and may be called from the main thread (Node allows Atomics.wait
 * there). Threads are unref'ed, so an idle pool never keeps the process alive; `dispose()` ends
 * them.
 */
export class CpuThreadPool {
  /** Threads that share a job, the calling thread included. */
  readonly numThreads: number;
  private readonly ctrl: Int32Array;
  private readonly workers: Worker[] = [];
  private readonly ports: MessagePort[] = [];
  private seq = 0;
  private disposed = false;

  /**
   * @param numThreads threads per job including the caller (>= 2).
   * @param spinIterations polls of the job counter before an idle worker sleeps (~5 ns each).
   * @throws Error when numThreads < 2.
   */
  constructor(numThreads: number, spinIterations = 4000) {
    if (!Number.isInteger(numThreads) || numThreads < 2) {
      throw new Error(`a thread pool needs >= 2 threads, got ${numThreads}`);
    }
    this.numThreads = numThreads;
    const ctrlBuffer = new SharedArrayBuffer(CTRL.size * 4);
    this.ctrl = new Int32Array(ctrlBuffer);
    const source = workerSource();
    for (let i = 1; i < numThreads; i++) {
      const { port1, port2 } = new MessageChannel();
      const init: WorkerInit = {
        ctrl: ctrlBuffer,
        port: port2,
        spin: spinIterations,
        slots: CTRL,
        chunkBits: CHUNK_BITS,
        seqMask: SEQ_MASK,
      };
      const w = new Worker(source, { eval: true, workerData: init, transferList: [port2], execArgv: [] });
      w.unref();
      port1.unref();
      this.workers.push(w);
      this.ports.push(port1);
    }
  }

  /** Shares a buffer with every worker under `id` (before any job that names it). */
  registerBuffer(id: number, buffer: SharedArrayBuffer): void {
    for (const p of this.ports) p.postMessage({ op: "add", id, buffer } satisfies BufferMessage);
  }

  /** Lets the workers drop their reference to buffer `id`. */
  releaseBuffer(id: number): void {
    if (this.disposed) return;
    for (const p of this.ports) p.postMessage({ op: "delete", id } satisfies BufferMessage);
  }

  /**
   * Runs one job of `numChunks` chunks on every thread and returns when all chunks are done.
   * JOB_LINEAR args: [xId, xOff, wId, wOff, biasId (-1: none), biasOff, outId, outOff, T, N, K];
   *   chunk c covers weight rows chunkRange(N, c, numChunks, 2).
   * JOB_ATTENTION args: [qkvId, qkvOff, kvId, kvOff, outId, outOff, qslId, qslOff, seqLensId,
   *   seqLensOff, blockTablesId, blockTablesOff, slStride, slHeadStride, btStride, btHeadStride,
   *   numReqs, Hq, Hkv, D, blockSize, numItems = T * Hkv]; chunk c covers items
   *   chunkRange(numItems, c, numChunks, 1) (strides: pagedAttentionKernel).
   * Offsets are in elements. `runChunk(c)` computes chunk c on the calling thread, exactly as a
   * worker would.
   * @throws Error when a kernel threw (a worker's with its message), when numChunks is outside
   *   [1, MAX_CHUNKS], or after dispose().
   */
  run(kind: number, args: readonly number[], numChunks: number, runChunk: (chunk: number) => void): void {
    if (this.disposed) throw new Error("the CPU thread pool was disposed");
    if (!(numChunks >= 1 && numChunks <= MAX_CHUNKS))
      throw new Error(`a job needs 1..${MAX_CHUNKS} chunks, got ${numChunks}`);
    const c = this.ctrl;
    for (let i = 0; i < args.length; i++) c[CTRL.args + i] = args[i]!;
    c[CTRL.kind] = kind;
    c[CTRL.numChunks] = numChunks;
    Atomics.store(c, CTRL.done, 0);
    this.seq = (this.seq + 1) | 0;
    const tag = (this.seq & SEQ_MASK) << CHUNK_BITS;
    Atomics.store(c, CTRL.claim, tag);
    Atomics.store(c, CTRL.seq, this.seq);
    Atomics.notify(c, CTRL.seq);
    let mainError: unknown = null;
    for (;;) {
      const v = Atomics.load(c, CTRL.claim);
      const chunk = v - tag;
      if (chunk >= numChunks) break;
      if (Atomics.compareExchange(c, CTRL.claim, v, v + 1) !== v) continue; // a worker took it
      if (mainError === null) {
        try {
          runChunk(chunk);
        } catch (e) {
          mainError = e;
        }
      }
      Atomics.add(c, CTRL.done, 1);
    }
    this.waitForChunks(numChunks);
    if (mainError !== null) throw mainError;
    if (Atomics.load(c, CTRL.error) !== 0) {
      Atomics.store(c, CTRL.error, 0);
      const messages: string[] = [];
      for (const p of this.ports) {
        for (let m = receiveMessageOnPort(p); m !== undefined; m = receiveMessageOnPort(p)) {
          messages.push(String(m.message));
        }
      }
      throw new Error(`a CPU backend worker thread failed: ${messages.join("; ")}`);
    }
  }

  /** Spins briefly, then sleeps until every chunk of the job is done. */
  private waitForChunks(numChunks: number): void {
    const c = this.ctrl;
    for (let i = 0; i < 4000 && Atomics.load(c, CTRL.done) !== numChunks; i++);
    for (let d = Atomics.load(c, CTRL.done); d !== numChunks; d = Atomics.load(c, CTRL.done)) {
      Atomics.wait(c, CTRL.done, d);
    }
  }

  /** Ends every worker thread. Idempotent. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    const c = this.ctrl;
    c[CTRL.kind] = JOB_EXIT;
    Atomics.store(c, CTRL.seq, (this.seq + 1) | 0);
    Atomics.notify(c, CTRL.seq);
    for (const w of this.workers) void w.terminate();
    for (const p of this.ports) p.close();
  }
}
