import { totalmem } from "node:os";
import { type Backend, DTYPE_BYTES, type DType } from "../backends/backend.js";
import type { CommunicatorRendezvous, DeviceCommunicator } from "../backends/collectives.js";
import { createBackend, createCommunicator } from "../backends/registry.js";
import { stepWorkspaceBytes } from "../config/activation_bytes.js";
import type { EngineArgs } from "../config/engine_args.js";
import { ConfigError } from "../config/engine_args.js";
import { hisparseConfigOf } from "../config/hisparse_config.js";
import { hisparseReasonsFor } from "../config/hisparse_dsa.js";
import { loadModelConfig, type ModelConfig } from "../config/model_config.js";
import { countParameters } from "../config/parameter_count.js";
import type { ModelRunnerOutput, SchedulerOutput } from "../core/sched/output.js";
import { loadModel, resolveModelDir } from "../models/registry.js";
import { createKVCacheSetup } from "./kv_cache_registry.js";
import type { HiSparseWorkerInfo, KVCacheDescription } from "./kv_cache_setup.js";
import { ModelRunner } from "./model_runner.js";

/** What the worker reports once loaded. */
export interface WorkerInfo {
  backend: "cpu" | "cuda";
  deviceName: string;
  modelDir: string;
  modelConfig: ModelConfig;
  maxModelLen: number;
  numGpuBlocks: number;
  blockSize: number;
  kvCacheDtype: DType;
  /** Bytes of one KV block of the device pool (all layers; with HiSparse, the sparse layers). */
  kvBytesPerBlock: number;
  /** HiSparse pools and layers, or null when HiSparse is off. */
  hisparse: HiSparseWorkerInfo | null;
  /** The KV set-up's start-up log entry (KVCacheSetup.description). */
  kvCache: KVCacheDescription;
  /** This worker's tensor-parallel rank: rank, size, and the communicator ("NCCL 2.28.3"; null on the single-worker path). */
  tensorParallel: {
    rank: number;
    size: number;
    communicator: string | null;
    /** Every rank's device name (filled by the tensor-parallel executor; this rank's alone otherwise). */
    devices: string[];
  };
}

/** The rank a worker runs as, under tensor parallelism (engine/tp_executor.ts hands it out). */
export interface RankInit {
  rank: number;
  /** What the ranks share to build their communicators (backends/collectives.ts). */
  rendezvous: CommunicatorRendezvous;
}

/**
 * Owns the backend, the model weights, the KV cache and the ModelRunner
 * (vllm/v1/worker/gpu_worker.py). Created once per engine; runs on the executor's thread.
 */
export class Worker {
  private constructor(
    readonly info: WorkerInfo,
    private readonly backend: Backend,
    readonly modelRunner: ModelRunner,
    private readonly disposeModel: () => void,
  ) {}

  /**
   * Creates the backend, loads the model, and builds the KV set-up that the backend and the
   * enabled feature call for (worker/kv_cache_registry.ts), sized from the memory budget. With
   * `rank` (tensor parallelism) the backend is the rank's (CUDA: device `rank`), the model holds
   * the rank's shards and the KV cache the rank's KV heads, and the rank joins its group's
   * communicator first (every rank at once).
   * @throws ConfigError / ModelConfigError / WeightLoadError with a one-sentence message.
   */
  static async create(
    args: EngineArgs,
    onProgress?: (done: number, total: number) => void,
    rank?: RankInit,
  ): Promise<Worker> {
    checkHiSparseSettings(args);
    // The step workspace holds one layer's activations of a step of max_num_batched_tokens.
    const workspaceBytes = stepWorkspaceBytes(
      loadModelConfig(resolveModelDir(args.model)),
      args.maxNumBatchedTokens,
    );
    const backend = await createBackend(args, rank?.rank ?? 0, { workspaceBytes });
    let comm: DeviceCommunicator | null = null;
    try {
      if (backend.name === "cpu") checkCpuMemory(args);
      if (rank !== undefined) comm = await createCommunicator(backend, rank.rendezvous, rank.rank);
      const tp = { rank: rank?.rank ?? 0, size: rank?.rendezvous.worldSize ?? 1, comm };
      const loaded = loadModel({
        modelDir: args.model,
        backend,
        loadFormat: args.loadFormat,
        seed: args.seed,
        maxModelLen: args.maxModelLen,
        onProgress,
        tensorParallel: tp,
      });
      const { config, model, modelDir, maxModelLen } = loaded;
      const kvCacheDtype = resolveKvDtype(args, backend);
      const kv = createKVCacheSetup(backend, {
        model,
        args,
        kvCacheDtype,
        deviceBudgetBytes: kvMemoryBudget(args, backend, kvCacheDtype),
        maxModelLen,
      });
      const runner = new ModelRunner(backend, model, kv, {
        seed: args.seed,
        enforceEager: args.enforceEager,
        maxModelLen,
        maxNumSeqs: args.maxNumSeqs,
      });
      const info: WorkerInfo = {
        backend: backend.name,
        deviceName: backend.deviceName,
        modelDir,
        modelConfig: config,
        maxModelLen,
        numGpuBlocks: kv.numGpuBlocks,
        blockSize: args.blockSize,
        kvCacheDtype,
        kvBytesPerBlock: kv.info.kvBytesPerBlock,
        hisparse: kv.info.hisparse,
        kvCache: kv.description,
        tensorParallel: {
          rank: tp.rank,
          size: tp.size,
          communicator: comm?.description ?? null,
          devices: [backend.deviceName],
        },
      };
      return new Worker(info, backend, runner, () => {
        model.dispose();
        comm?.dispose();
      });
    } catch (e) {
      comm?.dispose();
      backend.dispose();
      throw e;
    }
  }

  executeModel(so: SchedulerOutput): ModelRunnerOutput {
    return this.modelRunner.executeModel(so);
  }

  /** Frees the runner (and with it the KV set-up), the weights and the backend. */
  shutdown(): void {
    this.modelRunner.dispose();
    this.disposeModel();
    this.backend.dispose();
  }
}

function resolveKvDtype(args: EngineArgs, backend: Backend): DType {
  return args.kvCacheDtype === "auto" ? backend.activationDtype : args.kvCacheDtype;
}

/**
 * Device bytes for the KV cache. CPU: `cpuKvCacheBytes` (for an emulated fp8 cache, which the CPU
 * stores in f32, scaled by 1/4 so that the formula's 1-byte elements fit the real storage). GPU: what is left of
 * `gpuMemoryUtilization × total` after the weights and the backend's workspace are allocated
 * (vLLM determine_num_available_blocks, without a profiling run: our workspace is preallocated).
 */
function kvMemoryBudget(args: EngineArgs, backend: Backend, kvCacheDtype: DType): number {
  if (backend.name === "cpu")
    return kvCacheDtype === "fp8"
      ? args.cpuKvCacheBytes * (DTYPE_BYTES.fp8 / DTYPE_BYTES.f32)
      : args.cpuKvCacheBytes;
  const { free, total } = backend.memoryInfo();
  const used = total - free;
  return Math.max(0, total * args.gpuMemoryUtilization - used);
}

/**
 * Refuses, before any allocation, a model the CPU backend cannot hold: weights widen to f32
 * (4 bytes per parameter) and the KV cache takes `cpuKvCacheBytes`; together they must fit in
 * 90% of the machine's memory (os.totalmem()), else the process would be killed mid-load.
 * @throws ConfigError naming the sizes.
 */
function checkCpuMemory(args: EngineArgs): void {
  const config = loadModelConfig(resolveModelDir(args.model));
  const weights = countParameters(config) * 4;
  const total = totalmem();
  const gib = (b: number) => (b / 2 ** 30).toFixed(1);
  if (weights + args.cpuKvCacheBytes > CPU_MEMORY_FRACTION * total) {
    throw new ConfigError([
      `the CPU backend needs about ${gib(weights)} GiB for this model's weights (f32) plus ${gib(args.cpuKvCacheBytes)} GiB of KV cache, more than this machine's ${gib(total)} GiB allows; use --device cuda or a smaller model`,
    ]);
  }
}

/**
 * Refuses, before anything loads, HiSparse settings that cannot work for this model, by its
 * family's rules (config.json only: hisparseReasonsFor; DSA models refuse Quest's keys before any
 * Quest check). The set-ups check what depends on the backend and the pools later.
 * @throws ConfigError listing every reason; ModelConfigError when config.json cannot be read.
 */
function checkHiSparseSettings(args: EngineArgs): void {
  const hs = hisparseConfigOf(args.extensions);
  if (hs === null) return;
  const config = loadModelConfig(resolveModelDir(args.model));
  const ctx = { blockSize: args.blockSize, enablePrefixCaching: args.enablePrefixCaching };
  const reasons = hisparseReasonsFor(hs, ctx, config);
  if (reasons.length > 0) throw new ConfigError(reasons);
}

/** Share of system memory the CPU backend may plan to use for weights and KV cache. */
const CPU_MEMORY_FRACTION = 0.9;
