import { Worker as ThreadWorker } from "node:worker_threads";
import type { EngineArgs } from "../config/engine_args.js";
import type { ModelRunnerOutput, SchedulerOutput } from "../core/sched/output.js";
import type { RankInit, WorkerInfo } from "../worker/worker.js";

/** Loading progress reported by the worker: bytes of weights placed so far / in all (models/weight_loader.ts). */
export type ProgressFn = (done: number, total: number) => void;

/**
 * Runs the Worker somewhere and relays steps to it (vllm/v1/executor). `InprocExecutor` calls it
 * on this thread (tests, library use that wants logits); `ThreadExecutor` runs it on a
 * worker_thread so the event loop (HTTP server, streaming) stays responsive during a step.
 */
export interface Executor {
  /** Loads the model and sizes the KV cache. @throws the worker's load error (name kept). */
  init(args: EngineArgs, onProgress?: ProgressFn): Promise<WorkerInfo>;
  /** Runs one step. @throws the worker's error (name kept) if the step failed. */
  executeModel(so: SchedulerOutput): Promise<ModelRunnerOutput>;
  shutdown(): Promise<void>;
}

/** An error raised inside the worker thread, re-raised here with its original name and message. */
export class WorkerError extends Error {
  constructor(name: string, message: string, stack?: string) {
    super(message);
    this.name = name;
    if (stack !== undefined) this.stack = stack;
  }
}

/** Executes on the calling thread. */
export class InprocExecutor implements Executor {
  private worker: import("../worker/worker.js").Worker | null = null;

  async init(args: EngineArgs, onProgress?: ProgressFn): Promise<WorkerInfo> {
    const { Worker } = await import("../worker/worker.js");
    this.worker = await Worker.create(args, onProgress);
    return this.worker.info;
  }

  /** The worker itself, for tests that inspect the model runner. */
  get inner(): import("../worker/worker.js").Worker {
    if (this.worker === null) throw new Error("executor is not initialised");
    return this.worker;
  }

  async executeModel(so: SchedulerOutput): Promise<ModelRunnerOutput> {
    return this.inner.executeModel(so);
  }

  async shutdown(): Promise<void> {
    this.worker?.shutdown();
    this.worker = null;
  }
}

type Reply =
  | { type: "progress"; done: number; total: number }
  | { type: "ready"; info: WorkerInfo }
  | { type: "result"; output: ModelRunnerOutput }
  | { type: "error"; name: string; message: string; stack?: string };

/**
 * Executes on a worker_thread (worker/thread_main.ts). One request in flight at a time: the
 * engine awaits each step before scheduling the next. The thread keeps the process alive only
 * while a request (init or a step) waits for its reply: it is unref'd whenever it is idle, so a
 * script that never calls `shutdown()` still exits once its last result is in (as node's own
 * handles and vLLM's `LLM` do), while a step in flight keeps it running.
 */
export class ThreadExecutor implements Executor {
  private thread: ThreadWorker | null = null;
  private pending: { resolve: (r: Reply) => void; reject: (e: Error) => void } | null = null;
  private onProgress: ProgressFn | undefined;

  /** @param rank the tensor-parallel rank the thread's worker runs as (tp_executor.ts); none: the single worker. */
  constructor(private readonly rank?: RankInit) {}

  async init(args: EngineArgs, onProgress?: ProgressFn): Promise<WorkerInfo> {
    this.onProgress = onProgress;
    this.thread = spawnWorkerThread(new URL("../worker/thread_main.js", import.meta.url));
    this.thread.unref();
    this.thread.on("message", (m: Reply) => this.onMessage(m));
    this.thread.on("error", (e) => this.fail(e));
    this.thread.on("exit", (code) => {
      this.thread = null;
      this.fail(new WorkerError("WorkerExit", `worker thread exited with code ${code}`));
    });
    const r = await this.request({
      type: "init",
      args,
      ...(this.rank === undefined ? {} : { rank: this.rank }),
    });
    if (r.type !== "ready") throw new Error(`unexpected worker reply ${r.type}`);
    return r.info;
  }

  async executeModel(so: SchedulerOutput): Promise<ModelRunnerOutput> {
    const r = await this.request({ type: "execute", so });
    if (r.type !== "result") throw new Error(`unexpected worker reply ${r.type}`);
    return r.output;
  }

  /** Terminates the thread; a step (or init) still waiting for its reply is rejected with WorkerExit. */
  async shutdown(): Promise<void> {
    const t = this.thread;
    this.thread = null;
    this.fail(new WorkerError("WorkerExit", "the worker thread was shut down before it replied"));
    if (t !== null) {
      t.removeAllListeners("exit");
      await t.terminate();
    }
  }

  private request(msg: unknown): Promise<Reply> {
    if (this.thread === null)
      return Promise.reject(new WorkerError("WorkerExit", "worker thread is not running"));
    if (this.pending !== null) return Promise.reject(new Error("a worker request is already in flight"));
    return new Promise<Reply>((resolve, reject) => {
      this.pending = { resolve, reject };
      this.thread!.ref();
      this.thread!.postMessage(msg);
    });
  }

  private onMessage(m: Reply): void {
    if (m.type === "progress") {
      this.onProgress?.(m.done, m.total);
      return;
    }
    const p = this.pending;
    this.pending = null;
    this.thread?.unref();
    if (p === null) return;
    if (m.type === "error") p.reject(new WorkerError(m.name, m.message, m.stack));
    else p.resolve(m);
  }

  private fail(e: Error): void {
    const p = this.pending;
    this.pending = null;
    this.thread?.unref();
    p?.reject(e);
  }
}

/**
 * Starts a worker_thread running the module at `url`. When running from TypeScript sources
 * (tsx), the thread registers tsx first so it can import .ts files.
 */
export function spawnWorkerThread(url: URL): ThreadWorker {
  const fromSource = import.meta.url.endsWith(".ts");
  if (!fromSource) return new ThreadWorker(url);
  const tsUrl = url.href.replace(/\.js$/, ".ts");
  const boot = `import("tsx/esm/api").then((m) => { m.register(); return import(${JSON.stringify(tsUrl)}); })`;
  return new ThreadWorker(boot, { eval: true });
}
