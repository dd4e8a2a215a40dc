import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from "node:worker_threads";
import { pagedAttentionKernel } from "./kernels/attention.js";
import { linearKernel, linearPartRange, linearRow1, linearTile2 } from "./kernels/linear.js";

/**
 * Slots of the shared control block (Int32Array over a SharedArrayBuffer) through which the
 * calling thread hands one job at a time to every worker thread.
 */
const CTRL = {
  /** Job sequence number; workers sleep on it with Atomics.wait. */
  seq: 0,
  /** Workers still running the current job; the last one notifies the caller. */
  pending: 1,
  /** Set to 1 by a worker whose kernel threw (its message follows on its port). */
  error: 2,
  /** Job kind (JOB_*). */
  kind: 3,
  /** First of the job's int arguments. */
  args: 4,
  size: 64,
} as const;

/** y = x @ w^T (+ bias) split over weight rows. Args: see {@link CpuThreadPool.run}. */
export const JOB_LINEAR = 1;
/** Paged attention split over (token, kv head) items. */
export const JOB_ATTENTION = 2;
const JOB_EXIT = 3;

/** What a worker thread receives at start. */
interface WorkerInit {
  ctrl: SharedArrayBuffer;
  port: MessagePort;
  part: number;
  numParts: number;
  spin: number;
  slots: typeof CTRL;
}

/** Messages on a worker's port: share a buffer, forget one, or (worker -> caller) an error. */
type BufferMessage = { op: "add"; id: number; buffer: SharedArrayBuffer } | { op: "delete"; id: number };

/**
 * Body of every worker thread. It runs from source text (see {@link workerSource}), so it may use
 * only its arguments and globals: the kernels come in as parameters.
 * Loop: wait for a new job sequence number (spinning briefly first, since jobs of one forward
 * step follow each other within microseconds), take the buffers announced on the port, run this
 * thread's part of the job, and decrement `pending` (the last worker wakes the caller).
 */
function workerMain(
  data: WorkerInit,
  receive: typeof receiveMessageOnPort,
  linear: typeof linearKernel,
  partRange: typeof linearPartRange,
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
    if (v === undefined) throw new Error(`worker ${data.part}: unknown buffer ${id}`);
    return v;
  };
  const I = (id: number): Int32Array => {
    const v = i32.get(id);
    if (v === undefined) throw new Error(`worker ${data.part}: unknown buffer ${id}`);
    return v;
  };
  let seen = 0;
  for (;;) {
    for (let i = 0; i < data.spin && Atomics.load(ctrl, S.seq) === seen; i++);
    Atomics.wait(ctrl, S.seq, seen);
    seen = Atomics.load(ctrl, S.seq);
    const kind = ctrl[S.kind]!;
    if (kind === 3) return; // JOB_EXIT
    drain();
    const a = (i: number): number => ctrl[S.args + i]!;
    try {
      if (kind === 1) {
        const [n0, n1] = partRange(a(9), data.part, data.numParts);
        const bias = a(4) < 0 ? null : F(a(4));
        linear(F(a(0)), a(1), F(a(2)), a(3), bias, a(5), F(a(6)), a(7), a(8), a(9), a(10), n0, n1);
      } else if (kind === 2) {
        attention(
          F(a(0)),
          a(1),
          F(a(2)),
          a(3),
          F(a(4)),
          a(5),
          I(a(6)),
          a(7),
          I(a(8)),
          a(9),
          I(a(10)),
          a(11),
          a(12),
          a(13),
          a(14),
          a(15),
          a(16),
          a(17),
          data.part,
          data.numParts,
        );
      }
    } catch (e) {
      Atomics.store(ctrl, S.error, 1);
      data.port.postMessage(String((e as Error).stack ?? e));
    }
    if (Atomics.sub(ctrl, S.pending, 1) === 1) Atomics.notify(ctrl, S.pending);
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
    linearPartRange.toString(),
    pagedAttentionKernel.toString(),
    `(${workerMain.toString()})(workerData, receiveMessageOnPort, linearKernel, linearPartRange, pagedAttentionKernel);`,
  ].join("\n");
}

/**
 * A small pool of worker threads that run parts of big kernels (matmuls, attention) on
 * SharedArrayBuffers, synchronised with Atomics.wait / Atomics.notify. The API is synchronous:
 * `run` returns when every part is done; the calling thread computes part 0 itself, worker i
 * part i + 1. The calling thread may be the main thread (Node allows Atomics.wait there).
 * Threads are unref'ed, so an idle pool never keeps the process alive; `dispose()` ends them.
 */
export class CpuThreadPool {
  /** Threads that share a job, the calling thread included. */
  readonly numThreads: number;
  private readonly ctrl: Int32Array;
  private readonly workers: Worker[] = [];
  private readonly ports: MessagePort[] = [];
  private disposed = false;

  /**
   * @param numThreads threads per job including the caller (>= 2).
   * @param spinIterations polls of the job counter before a thread sleeps (bounded busy wait).
   * @throws Error when numThreads < 2.
   */
  constructor(numThreads: number, spinIterations = 20000) {
    if (!Number.isInteger(numThreads) || numThreads < 2)
      throw new Error(`a thread pool needs >= 2 threads, got ${numThreads}`);
    this.numThreads = numThreads;
    const ctrlBuffer = new SharedArrayBuffer(CTRL.size * 4);
    this.ctrl = new Int32Array(ctrlBuffer);
    const source = workerSource();
    for (let i = 1; i < numThreads; i++) {
      const { port1, port2 } = new MessageChannel();
      const init: WorkerInit = {
        ctrl: ctrlBuffer,
        port: port2,
        part: i,
        numParts: numThreads,
        spin: spinIterations,
        slots: CTRL,
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
   * Runs one job on every thread and returns when all parts are done.
   * JOB_LINEAR args: [xId, xOff, wId, wOff, biasId (-1: none), biasOff, outId, outOff, T, N, K].
   * JOB_ATTENTION args: [qkvId, qkvOff, kvId, kvOff, outId, outOff, qslId, qslOff, seqLensId,
   *   seqLensOff, blockTablesId, blockTablesOff, maxBlocksPerReq, numReqs, Hq, Hkv, D, blockSize].
   * Offsets are in elements. `mainPart(0, numThreads)` computes the caller's share.
   * @throws Error when a worker's kernel threw (with its message), or after dispose().
   */
  run(kind: number, args: readonly number[], mainPart: (part: number, numParts: number) => void): void {
    if (this.disposed) throw new Error("the CPU thread pool was disposed");
    const c = this.ctrl;
    for (let i = 0; i < args.length; i++) c[CTRL.args + i] = args[i]!;
    c[CTRL.kind] = kind;
    Atomics.store(c, CTRL.pending, this.workers.length);
    Atomics.add(c, CTRL.seq, 1);
    Atomics.notify(c, CTRL.seq);
    let mainError: unknown = null;
    try {
      mainPart(0, this.numThreads);
    } catch (e) {
      mainError = e;
    }
    this.waitForWorkers();
    if (mainError !== null) throw mainError;
    if (Atomics.load(c, CTRL.error) !== 0) {
      Atomics.store(c, CTRL.error, 0);
      const messages: string[] = [];
      for (const p of this.ports) {
        for (let m = receiveMessageOnPort(p); m !== undefined; m = receiveMessageOnPort(p))
          messages.push(String(m.message));
      }
      throw new Error(`a CPU backend worker thread failed: ${messages.join("; ")}`);
    }
  }

  /** Spins briefly, then sleeps until `pending` reaches 0. */
  private waitForWorkers(): void {
    const c = this.ctrl;
    for (let i = 0; i < 200000 && Atomics.load(c, CTRL.pending) !== 0; i++);
    for (let p = Atomics.load(c, CTRL.pending); p !== 0; p = Atomics.load(c, CTRL.pending))
      Atomics.wait(c, CTRL.pending, p);
  }

  /** Ends every worker thread. Idempotent. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    const c = this.ctrl;
    c[CTRL.kind] = JOB_EXIT;
    Atomics.add(c, CTRL.seq, 1);
    Atomics.notify(c, CTRL.seq);
    for (const w of this.workers) void w.terminate();
    for (const p of this.ports) p.close();
  }
}
