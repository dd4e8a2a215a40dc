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
import type { AttentionBackend } from "../src/attention/backend.js";
import type { MlaAttentionBackend } from "../src/attention/mla.js";
import { CudaDsaHiSparseAttention } from "../src/attention/sparse/cuda/cuda_dsa_attention.js";
import { CudaHiSparseAttention } from "../src/attention/sparse/cuda/cuda_hisparse_attention.js";
import { CudaQuestSelector } from "../src/attention/sparse/cuda/cuda_quest.js";
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
import type { KVCacheSetup } from "../src/worker/kv_cache_setup.js";
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
  /** The KV set-up's attention backend (the device selector of HiSparse on CUDA). */
  attention: AttentionBackend;
  /** An MLA model's attention backend (HiSparse for DSA models on CUDA), else null. */
  mlaAttention: MlaAttentionBackend | null;
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

/** The engine arguments of a configuration. */
function benchArgs(o: BenchEngineOptions): EngineArgs {
  return makeEngineArgs({
    device: "cuda",
    loadFormat: "dummy",
    blockSize: o.blockSize,
    maxModelLen: o.maxModelLen,
    maxNumSeqs: o.maxNumSeqs,
    maxNumBatchedTokens: o.maxNumBatchedTokens,
    extensions: o.hisparse === null ? {} : { hisparse: o.hisparse },
  });
}

/** The device side of a configuration: its KV set-up and the runner that owns it. */
interface BenchDevice {
  kv: KVCacheSetup;
  runner: ModelRunner;
}

/** A scheduler (with HiSparse scheduling when `args` enable it) over a device side. */
function scheduledEngine(
  dev: BenchDevice,
  args: EngineArgs,
  maxModelLen: number,
  blockSize: number,
): BenchEngine {
  const { kv, runner } = dev;
  const { numGpuBlocks } = kv;
  const numHostBlocks = kv.info.hisparse?.numHostBlocks ?? 0;
  // The settings in effect (DSA models derive theirs: KVCacheSetup info.hisparse.config).
  const user = hisparseConfigOf(args.extensions);
  const hs =
    user === null
      ? null
      : { ...(kv.info.hisparse?.config ?? user), mode: user.mode, residency: user.residency };
  const schedulerConfig = schedulerConfigOf(args, maxModelLen);
  // As the engine's (engine/llm_engine.ts hisparseSchedulingFor): a set-up whose prefill reads
  // host pages (DSA) lets a long prefill stream its pages to the host tier.
  const hisparse =
    hs === null
      ? null
      : createHiSparseScheduling(hs, {
          blockSize,
          numGpuBlocks,
          numHostBlocks,
          prefillReadsHostTier: kv.info.hisparse?.prefillReadsHostTier ?? false,
          maxNumBatchedTokens: schedulerConfig.maxNumBatchedTokens,
        });
  const scheduler = new Scheduler(
    schedulerConfig,
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
    attention: kv.attention,
    mlaAttention: kv.mla?.attention ?? null,
    dispose: () => runner.dispose(),
  };
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
  const args = benchArgs(o);
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
  const e = scheduledEngine({ kv, runner }, args, o.maxModelLen, o.blockSize);
  devices.set(e, { kv, runner, options: o });
  return e;
}

/** The device side and options of each engine createBenchEngine or rescheduleBenchEngine made. */
const devices = new WeakMap<BenchEngine, BenchDevice & { options: BenchEngineOptions }>();

/**
 * Another HiSparse mode (`auto`, `on` with either residency) over e's device side: the same KV
 * caches, pinned host tier, slot tables, runner and graphs, with a fresh Scheduler and HiSparse
 * scheduling for `hisparse`. The device set-up depends on neither the mode nor the residency
 * (worker/hisparse/layout.ts), so one pinned host tier (the slowest part of a configuration to
 * allocate) serves every HiSparse mode of a benchmark. Only the mode and residency of `hisparse`
 * are taken; the rest must be e's. After this, e must not step again: dispose the new engine
 * (it frees the shared device side), not e.
 * @throws Error when e is not a HiSparse engine of this harness, or still holds requests.
 */
export function rescheduleBenchEngine(e: BenchEngine, hisparse: HiSparseConfig): BenchEngine {
  const dev = devices.get(e);
  if (dev === undefined || e.hisparse === null || dev.options.hisparse === null)
    throw new Error("rescheduleBenchEngine takes a HiSparse engine made by createBenchEngine");
  if (e.scheduler.hasUnfinishedRequests() || e.scheduler.hasFinishedRequests())
    throw new Error("rescheduleBenchEngine: the engine still holds requests (abortAll first)");
  const options = {
    ...dev.options,
    hisparse: { ...dev.options.hisparse, mode: hisparse.mode, residency: hisparse.residency },
  };
  const next = scheduledEngine(dev, benchArgs(options), options.maxModelLen, options.blockSize);
  devices.set(next, { kv: dev.kv, runner: dev.runner, options });
  return next;
}

/**
 * Benchmarks only: the selection overlap p of e's CUDA Quest selector for later steps
 * (CudaQuestSelector.setBenchSelectionOverlap), and drops the captured decode graphs, which hold
 * the previous p as a kernel argument (they are captured again on the next decode steps).
 * @throws Error when e's attention is not CUDA Quest HiSparse built with benchSelectionOverlap.
 */
export function setSelectionOverlap(e: BenchEngine, p: number): void {
  const a = e.attention;
  if (!(a instanceof CudaHiSparseAttention) || !(a.selector instanceof CudaQuestSelector))
    throw new Error("setSelectionOverlap needs CUDA Quest HiSparse (the DSA overlap is set at start-up)");
  a.selector.setBenchSelectionOverlap(p);
  e.runner.dropGraphs();
}

/**
 * Benchmarks only: turns the DSA row prefetch of e's CUDA attention on or off
 * (CudaDsaHiSparseAttention.rowPrefetch) and drops the captured decode graphs, which hold the
 * previous setting (captured again on the next decode steps).
 * @throws Error when e's attention is not CUDA DSA HiSparse.
 */
export function setRowPrefetch(e: BenchEngine, on: boolean): void {
  const a = e.mlaAttention;
  if (!(a instanceof CudaDsaHiSparseAttention))
    throw new Error("setRowPrefetch needs CUDA HiSparse for a DSA model");
  a.rowPrefetch = on;
  e.runner.dropGraphs();
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
