import { totalmem } from "node:os";
import type { Backend, DType, Tensor } from "../backends/backend.js";
import { DTYPE_BYTES } from "../backends/backend.js";
import type { CudaBackend } from "../backends/cuda/cuda_backend.js";
import { createBackend } from "../backends/registry.js";
import type { EngineArgs } from "../config/engine_args.js";
import { ConfigError } from "../config/engine_args.js";
import { hisparseConfigOf } from "../config/hisparse_config.js";
import {
  countParameters,
  kvBytesPerToken,
  loadModelConfig,
  type ModelConfig,
} from "../config/model_config.js";
import type { ModelRunnerOutput, SchedulerOutput } from "../core/sched/output.js";
import { loadModel, resolveModelDir } from "../models/registry.js";
import { setupCudaHiSparse } from "./hisparse/cuda/setup_cuda.js";
import { type HiSparseWorkerInfo, setupHiSparse } from "./hisparse/setup.js";
import { allocateMlaKvCache } from "./mla_kv_cache.js";
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
}

/**
 * Owns the backend, the model weights, the KV cache and the ModelRunner
 * (vllm/v1/worker/gpu_worker.py). Created once per engine; runs on the executor's thread.
 */
export class Worker {
  private constructor(
    readonly info: WorkerInfo,
    private readonly backend: Backend,
    private readonly kvCaches: Tensor[],
    readonly modelRunner: ModelRunner,
    private readonly disposeModel: () => void,
  ) {}

  /**
   * Creates the backend, loads the model, sizes and allocates the KV cache.
   * @throws ConfigError / ModelConfigError / WeightLoadError with a one-sentence message.
   */
  static async create(args: EngineArgs, onProgress?: (done: number, total: number) => void): Promise<Worker> {
    const backend = await createBackend(args);
    try {
      if (backend.name === "cpu") checkCpuMemory(args);
      const loaded = loadModel({
        modelDir: args.model,
        backend,
        loadFormat: args.loadFormat,
        seed: args.seed,
        maxModelLen: args.maxModelLen,
        onProgress,
      });
      const { config, model, modelDir, maxModelLen } = loaded;
      const kvCacheDtype = resolveKvDtype(args, backend);
      const hs = hisparseConfigOf(args.extensions);
      if (hs !== null && config.mla != null) {
        throw new ConfigError([
          `Hybrid HiSparse does not run multi-head latent attention models (${config.architecture}) yet; use --enable-hybrid-sparse off`,
        ]);
      }
      const budget = () => kvMemoryBudget(args, backend);
      const sparse =
        hs === null
          ? null
          : backend.name === "cuda"
            ? setupCudaHiSparse(backend as CudaBackend, model, args, hs, kvCacheDtype, budget(), maxModelLen)
            : setupHiSparse(backend, model, args, hs, kvCacheDtype, budget());
      const dense = sparse === null ? denseKvCache(args, backend, config, kvCacheDtype) : null;
      const kv = sparse ?? dense!;
      const runner = new ModelRunner(backend, model, kv.kvCaches, args.blockSize, {
        seed: args.seed,
        enforceEager: args.enforceEager,
        maxModelLen,
        maxNumSeqs: args.maxNumSeqs,
        indexerKeyCaches: dense?.indexerKeyCaches,
      });
      if (sparse !== null) {
        runner.attention = sparse.attention;
        runner.extensions.push(sparse.extension);
      }
      // Every cache tensor the worker frees at shutdown (MLA: the indexer key groups too).
      const kvCaches = [...kv.kvCaches, ...(dense?.indexerKeyCaches ?? [])].filter(
        (t): t is Tensor => t !== null,
      );
      const info: WorkerInfo = {
        backend: backend.name,
        deviceName: backend.deviceName,
        modelDir,
        modelConfig: config,
        maxModelLen,
        numGpuBlocks: kv.numGpuBlocks,
        blockSize: args.blockSize,
        kvCacheDtype,
        kvBytesPerBlock: kv.kvBytesPerBlock,
        hisparse: sparse?.info ?? null,
      };
      return new Worker(info, backend, kvCaches, runner, () => model.dispose());
    } catch (e) {
      backend.dispose();
      throw e;
    }
  }

  executeModel(so: SchedulerOutput): ModelRunnerOutput {
    return this.modelRunner.executeModel(so);
  }

  /** Frees the KV cache, the weights and the backend. */
  shutdown(): void {
    this.modelRunner.dispose();
    for (const t of this.kvCaches) this.backend.free(t);
    this.disposeModel();
    this.backend.dispose();
  }
}

function resolveKvDtype(args: EngineArgs, backend: Backend): DType {
  return args.kvCacheDtype === "auto" ? backend.activationDtype : args.kvCacheDtype;
}

/**
 * Sizes and allocates the dense engine's KV cache: one [numGpuBlocks, 2, blockSize, Hkv, D]
 * tensor per layer; for MLA models the latent and indexer key groups (mla_kv_cache.ts), sized
 * by the bytes of both (kvBytesPerToken).
 * @throws ConfigError when no block fits the budget.
 */
function denseKvCache(
  args: EngineArgs,
  backend: Backend,
  config: ModelConfig,
  kvCacheDtype: DType,
): {
  numGpuBlocks: number;
  kvBytesPerBlock: number;
  kvCaches: Tensor[];
  indexerKeyCaches?: (Tensor | null)[];
} {
  const kvBytesPerBlock = args.blockSize * kvBytesPerToken(config, DTYPE_BYTES[kvCacheDtype]);
  const numGpuBlocks =
    args.numGpuBlocksOverride ?? Math.floor(kvMemoryBudget(args, backend) / kvBytesPerBlock);
  if (numGpuBlocks < 1) {
    throw new ConfigError([
      `no memory is left for the KV cache (one block needs ${kvBytesPerBlock} bytes); lower --max-model-len or raise the memory budget`,
    ]);
  }
  if (config.mla != null) {
    const mla = allocateMlaKvCache(backend, config, numGpuBlocks, args.blockSize, kvCacheDtype);
    return { numGpuBlocks, kvBytesPerBlock, kvCaches: mla.latent, indexerKeyCaches: mla.indexerKeys };
  }
  const kvCaches = backend.allocateKvCache({
    numLayers: config.numHiddenLayers,
    numBlocks: numGpuBlocks,
    blockSize: args.blockSize,
    numKvHeads: config.numKeyValueHeads,
    headDim: config.headDim,
    dtype: kvCacheDtype,
  });
  return { numGpuBlocks, kvBytesPerBlock, kvCaches };
}

/**
 * Device bytes for the KV cache. CPU: `cpuKvCacheBytes`. GPU: what is left of
 * `gpuMemoryUtilization × total` after the weights and the backend's workspace are allocated
 * (vLLM determine_num_available_blocks, without a profiling run: our workspace is preallocated).
 */
function kvMemoryBudget(args: EngineArgs, backend: Backend): number {
  if (backend.name === "cpu") return args.cpuKvCacheBytes;
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

/** Share of system memory the CPU backend may plan to use for weights and KV cache. */
const CPU_MEMORY_FRACTION = 0.9;
