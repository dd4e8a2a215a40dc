import type { CacheConfig, SchedulerConfig } from "./configs.js";
import { LONG_PREFILL_THRESHOLD_OFF, validateCacheConfig, validateSchedulerConfig } from "./configs.js";
import type { HiSparseConfig } from "./hisparse_config.js";
import { hisparseReasonsFor } from "./hisparse_dsa.js";
import type { ModelConfig } from "./model_config.js";

/** Compute device selection (`--device`): auto picks CUDA when a GPU and the addon load. */
export type DeviceKind = "auto" | "cpu" | "cuda";

/**
 * Every engine setting, with vLLM's names (camelCase) and defaults where vLLM has one. The CLI
 * maps flags onto these (cli/engine_flags.ts); the library takes them directly.
 */
export interface EngineArgs {
  /** Model directory in HF format; undefined = the bundled ref-small. */
  model?: string;
  /** Tokenizer directory; defaults to the model directory. */
  tokenizer?: string;
  /** Name the server reports (`--served-model-name`); defaults to the model directory's name. */
  servedModelName?: string;
  device: DeviceKind;
  /** "auto" reads safetensors; "dummy" builds random weights from config.json. */
  loadFormat: "auto" | "safetensors" | "dummy";
  /** Seed of the engine-level random generator and of dummy weights. */
  seed: number;
  /** Longest prompt + output; defaults to the model's max_position_embeddings. */
  maxModelLen?: number;
  blockSize: number;
  gpuMemoryUtilization: number;
  /** Fix the number of device KV blocks (vLLM `--num-gpu-blocks-override`). */
  numGpuBlocksOverride?: number;
  /** KV cache memory for the CPU backend in bytes (vLLM's VLLM_CPU_KVCACHE_SPACE; default 1 GiB). */
  cpuKvCacheBytes: number;
  kvCacheDtype: CacheConfig["kvCacheDtype"];
  /** `--calculate-kv-scales`: fp8 k/v scales from the first batch (CacheConfig.calculateKvScales). */
  calculateKvScales: boolean;
  maxNumSeqs: number;
  maxNumBatchedTokens: number;
  enableChunkedPrefill: boolean;
  /** Cap of one request's prefill tokens per step, tokens; 0 = off (SchedulerConfig.longPrefillTokenThreshold). */
  longPrefillTokenThreshold: number;
  enablePrefixCaching: boolean;
  /** Disable CUDA graphs (`--enforce-eager`). */
  enforceEager: boolean;
  /** Threads the CPU backend may use (default: min(2, cores)). */
  cpuThreads?: number;
  /**
   * Ranks the model is split over (`--tensor-parallel-size`, vLLM's): one worker thread per rank,
   * each with its own backend (CUDA: device i), in lock-step (engine/tp_executor.ts). Default 1.
   */
  tensorParallelSize: number;
  /**
   * How the workers run (vLLM `--distributed-executor-backend`): "uni" one worker (tensor
   * parallel size 1), "threads" one worker thread per rank with collectives (the default when
   * the size is above 1; with size 1 it runs the collectives path on one rank, to check it
   * against "uni").
   */
  distributedExecutorBackend?: "uni" | "threads";
  /** Run the worker on the calling thread instead of a worker_thread (tests, debugging; tensor parallel size 1 only). */
  inprocWorker: boolean;
  /** Extension settings of optional features (HiSparse), keyed by feature. */
  extensions: Record<string, unknown>;
}

/** vLLM-like defaults (CPU-friendly budgets: the CPU backend is the CI default). */
export function defaultEngineArgs(): EngineArgs {
  return {
    device: "auto",
    loadFormat: "auto",
    seed: 0,
    blockSize: 16,
    gpuMemoryUtilization: 0.9,
    cpuKvCacheBytes: 1 << 30,
    kvCacheDtype: "auto",
    calculateKvScales: false,
    maxNumSeqs: 256,
    maxNumBatchedTokens: 2048,
    enableChunkedPrefill: true,
    longPrefillTokenThreshold: LONG_PREFILL_THRESHOLD_OFF,
    enablePrefixCaching: false,
    enforceEager: false,
    tensorParallelSize: 1,
    inprocWorker: false,
    extensions: {},
  };
}

/** Builds full args from a partial set, applying defaults. */
export function makeEngineArgs(p: Partial<EngineArgs> = {}): EngineArgs {
  return { ...defaultEngineArgs(), ...p };
}

/** The scheduler's view of the args once maxModelLen and the block count are known. */
export function schedulerConfigOf(a: EngineArgs, maxModelLen: number): SchedulerConfig {
  return {
    maxNumSeqs: a.maxNumSeqs,
    maxNumBatchedTokens: a.maxNumBatchedTokens,
    maxModelLen,
    enableChunkedPrefill: a.enableChunkedPrefill,
    longPrefillTokenThreshold: a.longPrefillTokenThreshold,
  };
}

export function cacheConfigOf(a: EngineArgs, numGpuBlocks: number): CacheConfig {
  return {
    blockSize: a.blockSize,
    numGpuBlocks,
    gpuMemoryUtilization: a.gpuMemoryUtilization,
    kvCacheDtype: a.kvCacheDtype,
    calculateKvScales: a.calculateKvScales,
    enablePrefixCaching: a.enablePrefixCaching,
  };
}

/**
 * Reasons the args are invalid before the weights are loaded (empty when valid).
 * @param model what the HiSparse settings are checked by: the model's config when read already
 *   (config.json: hisparseReasonsFor applies the model's rules, a DSA model's refusals rather
 *   than Quest's page checks); null: Quest's checks (the model's config could not be read);
 *   undefined (default): not checked here, because the family decides which rules apply; the
 *   worker checks them before anything loads ({@link hisparseReasonsFor} in worker.ts).
 */
export function validateEngineArgs(a: EngineArgs, model?: ModelConfig | null): string[] {
  const r: string[] = [];
  if (!["auto", "cpu", "cuda"].includes(a.device))
    r.push(`--device must be auto, cpu or cuda, got ${a.device}`);
  if (!["auto", "safetensors", "dummy"].includes(a.loadFormat))
    r.push(`--load-format must be auto, safetensors or dummy, got ${a.loadFormat}`);
  if (!Number.isInteger(a.seed)) r.push(`--seed must be an integer, got ${a.seed}`);
  if (
    a.numGpuBlocksOverride !== undefined &&
    (!Number.isInteger(a.numGpuBlocksOverride) || a.numGpuBlocksOverride < 1)
  )
    r.push(`--num-gpu-blocks-override must be >= 1, got ${a.numGpuBlocksOverride}`);
  if (!(a.cpuKvCacheBytes > 0)) r.push(`CPU KV cache size must be > 0 bytes, got ${a.cpuKvCacheBytes}`);
  if (!Number.isInteger(a.tensorParallelSize) || a.tensorParallelSize < 1)
    r.push(`--tensor-parallel-size must be an integer >= 1, got ${a.tensorParallelSize}`);
  const deb = a.distributedExecutorBackend;
  if (deb !== undefined && deb !== "uni" && deb !== "threads")
    r.push(`--distributed-executor-backend must be uni or threads, got ${deb}`);
  if (a.tensorParallelSize > 1 && deb === "uni")
    r.push(
      `--tensor-parallel-size ${a.tensorParallelSize} needs --distributed-executor-backend threads (uni runs one rank)`,
    );
  if (a.inprocWorker && (a.tensorParallelSize > 1 || deb === "threads"))
    r.push("the in-process worker runs one rank; tensor parallelism runs one worker thread per rank");
  if (a.cpuThreads !== undefined && (!Number.isInteger(a.cpuThreads) || a.cpuThreads < 1))
    r.push(`--cpu-threads must be >= 1, got ${a.cpuThreads}`);
  // Reasons tied to --max-model-len are checked here when it is given; a length derived from the
  // model's config is checked by the scheduler once the config is read.
  r.push(
    ...validateSchedulerConfig(schedulerConfigOf(a, a.maxModelLen ?? 1)).filter(
      (x) => a.maxModelLen !== undefined || !x.includes("max-model-len"),
    ),
  );
  if (a.maxModelLen !== undefined && (!Number.isInteger(a.maxModelLen) || a.maxModelLen < 1))
    r.push(`--max-model-len must be >= 1, got ${a.maxModelLen}`);
  r.push(...validateCacheConfig(cacheConfigOf(a, a.numGpuBlocksOverride ?? 0)));
  const hs = a.extensions["hisparse"] as HiSparseConfig | undefined;
  if (hs !== undefined && model !== undefined)
    r.push(
      ...hisparseReasonsFor(
        hs,
        { blockSize: a.blockSize, enablePrefixCaching: a.enablePrefixCaching },
        model,
      ),
    );
  return r;
}

/** Invalid configuration; `reasons` lists every problem (the message joins them). */
export class ConfigError extends Error {
  override name = "ConfigError";
  constructor(readonly reasons: string[]) {
    super(
      reasons.length === 1
        ? `invalid configuration: ${reasons[0]!}`
        : `invalid configuration:\n  - ${reasons.join("\n  - ")}`,
    );
  }
}
