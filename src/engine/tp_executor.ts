import type { EngineArgs } from "../config/engine_args.js";
import type { ModelRunnerOutput, SchedulerOutput } from "../core/sched/output.js";
import { checkTensorParallelShapes, createRendezvous } from "../worker/parallel_state.js";
import type { WorkerInfo } from "../worker/worker.js";
import { type Executor, type ProgressFn, ThreadExecutor, WorkerError } from "./executor.js";

/**
 * Tensor parallelism in one process (vLLM's MultiprocExecutor, with worker threads instead of
 * processes): one worker thread per rank (ThreadExecutor with a RankInit), each with its own
 * backend (CUDA: device = rank) and its shards of the model, driven in lock-step: every step's
 * SchedulerOutput goes to every rank, the ranks run the same forward with their collectives
 * (all-reduce after each row-parallel linear, logits gathered) and sample the same tokens from
 * the same logits; rank 0's output is the engine's (the others are checked against it).
 *
 * Why threads, not processes: the ranks exchange through one SharedArrayBuffer (the CPU
 * collectives, the NCCL unique id) with Atomics, with no IPC layer and no second copy of the
 * tokenizer or server; each thread has its own event loop and N-API environment, so a CUDA rank
 * keeps its device current on its own thread, and a blocking collective in one rank blocks only
 * that rank's thread.
 */
export class TensorParallelExecutor implements Executor {
  private readonly ranks: ThreadExecutor[];

  constructor(readonly worldSize: number) {
    const rendezvous = createRendezvous(worldSize);
    this.ranks = Array.from({ length: worldSize }, (_, rank) => new ThreadExecutor({ rank, rendezvous }));
  }

  /**
   * Starts every rank at once (they meet in their communicator's set-up), reports rank 0's
   * progress, and returns rank 0's info with the pools every rank can hold (the smallest) and
   * every rank's device.
   * @throws ConfigError before any rank starts when the model cannot be split; else the first
   *   rank's error (name kept); every rank is stopped then.
   */
  async init(args: EngineArgs, onProgress?: ProgressFn): Promise<WorkerInfo> {
    checkTensorParallelShapes(args);
    const infos = await this.all((r, i) => r.init(args, i === 0 ? onProgress : undefined));
    const first = infos[0]!;
    const numGpuBlocks = Math.min(...infos.map((x) => x.numGpuBlocks));
    const hs = first.hisparse;
    return {
      ...first,
      numGpuBlocks,
      hisparse:
        hs === null
          ? null
          : { ...hs, numHostBlocks: Math.min(...infos.map((x) => x.hisparse!.numHostBlocks)) },
      tensorParallel: { ...first.tensorParallel, devices: infos.map((x) => x.deviceName) },
    };
  }

  /**
   * Broadcasts the step to every rank and returns rank 0's output.
   * @throws WorkerError "RankDivergence" when a rank sampled other tokens than rank 0 (their
   *   logits must be identical); the first rank's error otherwise.
   */
  async executeModel(so: SchedulerOutput): Promise<ModelRunnerOutput> {
    const outs = await this.all((r) => r.executeModel(so));
    const want = JSON.stringify(outs[0]!.sampledTokenIds);
    outs.forEach((o, rank) => {
      if (JSON.stringify(o.sampledTokenIds) !== want)
        throw new WorkerError(
          "RankDivergence",
          `tensor-parallel rank ${rank} sampled ${JSON.stringify(o.sampledTokenIds)} where rank 0 sampled ${want}`,
        );
    });
    return outs[0]!;
  }

  async shutdown(): Promise<void> {
    await Promise.all(this.ranks.map((r) => r.shutdown()));
  }

  /**
   * Runs `fn` on every rank; resolves when all have, rejects at the first failure (the others
   * may be blocked in a collective waiting for the failed rank, so they are not awaited: the
   * caller shuts the executor down).
   */
  private all<T>(fn: (r: ThreadExecutor, rank: number) => Promise<T>): Promise<T[]> {
    return new Promise<T[]>((resolve, reject) => {
      const out: T[] = new Array(this.ranks.length);
      let left = this.ranks.length;
      this.ranks.forEach((r, i) => {
        fn(r, i).then((v) => {
          out[i] = v;
          if (--left === 0) resolve(out);
        }, reject);
      });
    });
  }
}
