/**
 * The engine pieces of the HiSparse benchmarks (bench/hisparse_throughput.ts,
 * bench/hisparse_capacity.ts) on one CUDA backend and one loaded model: for each configuration
 * the KV cache is sized and allocated as Worker.create does (the same KV set-up,
 * worker/kv_cache_registry.ts createKVCacheSetup: dense, or HiSparse), with a ModelRunner in
 * fastPrefill mode (prefill tokens' K/V and digests
 * are written from random rows instead of running the model, so 128K-token contexts fill in
 * seconds; decode steps run the real model, captured in CUDA graphs) and the engine's own
 * Scheduler (with HiSparse scheduling: spills, offload, mirrors, admission). The model is loaded
 * once (dummy weights) and shared by every configuration.
 */
import type { Tensor } from "../src/backends/backend.js";
import type { CudaBackend } from "../src/backends/cuda/cuda_backend.js";
import {
  cacheConfigOf,
  type EngineArgs,
  makeEngineArgs,
  schedulerConfigOf,
} from "../src/config/engine_args.js";
import { type HiSparseConfig, hisparseConfigOf } from "../src/config/hisparse_config.js";
import {
  createHiSparseScheduling,
  type HiSparseScheduling,
} from "../src/core/hisparse/hisparse_scheduling.js";
import { asRequestId } from "../src/core/ids.js";
import { Request, RequestStatus } from "../src/core/request.js";
import { makeSamplingParams } from "../src/core/sampling_params.js";
import type { EngineCoreOutput, SchedulerOutput } from "../src/core/sched/output.js";
import { Scheduler } from "../src/core/sched/scheduler.js";
import type { LoadedModel } from "../src/models/registry.js";
import { createKVCacheSetup } from "../src/worker/kv_cache_registry.js";
import { ModelRunner } from "../src/worker/model_runner.js";

/** One engine configuration over the shared model. */
export interface BenchEngine {
  args: EngineArgs;
  runner: ModelRunner;
  scheduler: Scheduler;
  hisparse: HiSparseScheduling | null;
  numGpuBlocks: number;
  numHostBlocks: number;
  kvCaches: readonly Tensor[];
  /** Frees the KV cache, the HiSparse tables and pinned memory, the graphs. */
  dispose(): void;
}

/** What a configuration needs besides the model. */
export interface BenchEngineOptions {
  blockSize: number;
  maxModelLen: number;
  maxNumSeqs: number;
  maxNumBatchedTokens: number;
  /** Device bytes for the KV cache (dense) or for HiSparse's pools, digests and tables. */
  kvBudgetBytes: number;
  /** HiSparse settings (mode on / auto), or null for the dense engine. */
  hisparse: HiSparseConfig | null;
}

/**
 * Allocates one configuration's KV state, runner and scheduler over `model`.
 * @throws ConfigError when the configuration does not fit (the message says why).
 */
export function createBenchEngine(
  backend: CudaBackend,
  model: LoadedModel["model"],
  o: BenchEngineOptions,
): BenchEngine {
  const args = makeEngineArgs({
    device: "cuda",
    loadFormat: "dummy",
    blockSize: o.blockSize,
    maxModelLen: o.maxModelLen,
    maxNumSeqs: o.maxNumSeqs,
    maxNumBatchedTokens: o.maxNumBatchedTokens,
    extensions: o.hisparse === null ? {} : { hisparse: o.hisparse },
  });
  const kv = createKVCacheSetup(backend, {
    model,
    args,
    kvCacheDtype: "bf16",
    deviceBudgetBytes: o.kvBudgetBytes,
    maxModelLen: o.maxModelLen,
  });
  const runner = new ModelRunner(backend, model, kv, {
    seed: 0,
    enforceEager: false,
    maxModelLen: o.maxModelLen,
    maxNumSeqs: o.maxNumSeqs,
    fastPrefill: true,
  });
  const { numGpuBlocks } = kv;
  const numHostBlocks = kv.info.hisparse?.numHostBlocks ?? 0;
  // The settings in effect (DSA models derive theirs: KVCacheSetup info.hisparse.config).
  const user = hisparseConfigOf(args.extensions);
  const hs = user === null ? null : (kv.info.hisparse?.config ?? user);
  const hisparse =
    hs === null
      ? null
      : createHiSparseScheduling(hs, { blockSize: o.blockSize, numGpuBlocks, numHostBlocks });
  const scheduler = new Scheduler(
    schedulerConfigOf(args, o.maxModelLen),
    cacheConfigOf(args, numGpuBlocks),
    hisparse?.schedulerOptions ?? {},
  );
  return {
    args,
    runner,
    scheduler,
    hisparse,
    numGpuBlocks,
    numHostBlocks,
    kvCaches: kv.kvCaches,
    dispose: () => runner.dispose(),
  };
}

let nextId = 0;

/**
 * Adds n requests of `promptLen` deterministic pseudo-random tokens (ids in [1, vocab)), each
 * generating `maxTokens` tokens with EOS ignored. @returns their ids.
 */
export function addRequests(
  e: BenchEngine,
  vocab: number,
  n: number,
  promptLen: number,
  maxTokens: number,
): string[] {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const id = `bench-${nextId++}`;
    const seed = nextId * 7919;
    const prompt = Array.from({ length: promptLen }, (_, j) => 1 + ((seed + j * 104729) % (vocab - 1)));
    const sp = makeSamplingParams({ temperature: 0, maxTokens, ignoreEos: true });
    e.scheduler.addRequest(new Request(asRequestId(id), prompt, sp, [], 0));
    ids.push(id);
  }
  return ids;
}

/** One engine step (schedule, execute, update), as LLMEngine.step does. */
export function step(e: BenchEngine): { so: SchedulerOutput; outs: EngineCoreOutput[] } {
  const so = e.scheduler.schedule();
  const mro = e.runner.executeModel(so);
  const outs = e.scheduler.updateFromOutput(so, mro);
  return { so, outs };
}

/** Aborts every request and runs the steps that release them (pools whole again). */
export function abortAll(e: BenchEngine, ids: readonly string[]): void {
  e.scheduler.finishRequests(ids.map(asRequestId), RequestStatus.FINISHED_ABORTED);
  for (let i = 0; i < 4 && (e.scheduler.hasUnfinishedRequests() || e.scheduler.hasFinishedRequests()); i++)
    step(e);
}

/** True when the step is a pure decode step (every scheduled request computes one token). */
export function isDecodeStep(so: SchedulerOutput): boolean {
  for (const n of so.numScheduledTokens.values()) if (n !== 1) return false;
  return so.numScheduledTokens.size > 0;
}

/** What {@link measureConcurrency} saw. */
export interface ConcurrencyRun {
  /** Most requests decoding in one step before the first preemption (or the end). */
  maxDecoding: number;
  preempted: boolean;
  steps: number;
}

/**
 * Steps until the first preemption, every request decoding at once, or `maxSteps` (and, with
 * `stopAtFirstFinish`, the first finished request: memory it frees would let later requests in),
 * counting the requests that decode (one token past a `promptLen`-token prompt) in each step:
 * the capacity figure of bench/hisparse_capacity.ts and bench/dsa_capacity.ts.
 */
export function measureConcurrency(
  e: BenchEngine,
  promptLen: number,
  numRequests: number,
  maxSteps: number,
  stopAtFirstFinish = false,
): ConcurrencyRun {
  let maxDecoding = 0;
  let steps = 0;
  while (steps < maxSteps && (e.scheduler.hasUnfinishedRequests() || e.scheduler.hasFinishedRequests())) {
    const { so, outs } = step(e);
    steps++;
    if (e.scheduler.makeStats().numPreemptions > 0) break;
    if (stopAtFirstFinish && outs.some((o) => o.finishReason !== null)) break;
    let decoding = 0;
    for (const [id, n] of so.numScheduledTokens) {
      const r = e.scheduler.getRequest(id);
      if (n === 1 && r !== undefined && r.numComputedTokens > promptLen) decoding++;
    }
    maxDecoding = Math.max(maxDecoding, decoding);
    if (maxDecoding === numRequests) break; // every request decodes at once: nothing more to learn
  }
  return { maxDecoding, preempted: e.scheduler.makeStats().numPreemptions > 0, steps };
}
