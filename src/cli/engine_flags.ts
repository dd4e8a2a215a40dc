import { type Command, Option } from "commander";
import { ConfigError, type EngineArgs, makeEngineArgs } from "../config/engine_args.js";
import { hisparseReasonsFor } from "../config/hisparse_dsa.js";
import { loadModelConfig, type ModelConfig } from "../config/model_config.js";
import { KV_CACHE_DTYPES } from "../core/kv/kv_cache_dtype.js";
import { resolveModelDir } from "../models/registry.js";
import { addHiSparseFlags, hisparseConfigFromOptions } from "./hisparse_flags.js";
import { parseBlockSizeArg, parseFloatArg, parseGibArg, parseIntArg } from "./parse_args.js";

export { parseFloatArg, parseGibArg, parseIntArg };

/**
 * Adds the engine flags shared by `serve`, `generate`, `eval` (vLLM's names where vLLM has one).
 * Optional features add their own flags through `extraEngineFlags`.
 */
export function addEngineFlags(cmd: Command): Command {
  cmd
    .option("--model <dir>", "model directory in Hugging Face format (default: the bundled ref-small)")
    .option("--tokenizer <dir>", "tokenizer directory (default: the model directory)")
    .addOption(
      new Option("--device <kind>", "compute device").choices(["auto", "cpu", "cuda"]).default("auto"),
    )
    .addOption(
      new Option("--load-format <fmt>", "weights: safetensors, or dummy (random, seeded)")
        .choices(["auto", "safetensors", "dummy"])
        .default("auto"),
    )
    .option("--seed <n>", "random seed of the engine (and of dummy weights)", parseIntArg, 0)
    .option("--max-model-len <n>", "longest prompt + output in tokens (default: the model's)", parseIntArg)
    .option(
      "--block-size <n>",
      "tokens per KV cache block (a power of two in [1, 256])",
      parseBlockSizeArg,
      16,
    )
    .option("--gpu-memory-utilization <f>", "fraction of GPU memory to use", parseFloatArg, 0.9)
    .option("--num-gpu-blocks-override <n>", "fix the number of KV cache blocks", parseIntArg)
    .addOption(
      new Option("--cpu-kv-cache-gib <gib>", "KV cache size of the CPU backend in GiB")
        .argParser(parseGibArg)
        .default(2 ** 30, "1"),
    )
    .addOption(
      new Option(
        "--kv-cache-dtype <dtype>",
        "KV cache storage dtype (fp8: e4m3, per-layer scales 1.0 unless --calculate-kv-scales)",
      )
        .choices([...KV_CACHE_DTYPES])
        .default("auto"),
    )
    .option(
      "--calculate-kv-scales",
      "fp8 KV cache: measure each layer's k/v scales from the first batch (amax / 200, amax / 100), then keep them",
      false,
    )
    .option("--max-num-seqs <n>", "maximum running requests", parseIntArg, 256)
    .option("--max-num-batched-tokens <n>", "token budget of one engine step", parseIntArg, 2048)
    .option("--no-enable-chunked-prefill", "do not split long prompts across steps")
    .option(
      "--long-prefill-token-threshold <n>",
      "most prefill tokens one request takes per step, so short prompts get in beside long ones (0 = off)",
      parseIntArg,
      0,
    )
    .option("--enable-prefix-caching", "reuse the KV of identical prompt prefixes", false)
    .option("--enforce-eager", "disable CUDA graphs", false)
    .option(
      "--tensor-parallel-size <n>",
      "ranks the model is split over (one worker thread per rank; CUDA: one GPU each)",
      parseIntArg,
      1,
    )
    .addOption(
      new Option(
        "--distributed-executor-backend <kind>",
        "uni: one worker; threads: one worker thread per rank with collectives (default when --tensor-parallel-size > 1)",
      ).choices(["uni", "threads"]),
    )
    .option("--cpu-threads <n>", "threads of the CPU backend", parseIntArg);
  return addHiSparseFlags(cmd);
}

/**
 * Maps parsed commander options (camelCase) onto EngineArgs (HiSparse settings go to
 * `extensions.hisparse`).
 * @throws ConfigError listing every problem of the HiSparse flags (with the knob values' own
 *   problems by the model's rules, hisparseReasonsFor, when a flag is malformed).
 */
export function engineArgsFromOptions(o: Record<string, unknown>): EngineArgs {
  const pick = <T>(k: string): T | undefined => o[k] as T | undefined;
  const hs = hisparseConfigFromOptions(o);
  if (hs.reasons.length > 0) {
    // Report the knob values' problems too, so that one bad flag does not hide the others.
    const ctx = {
      blockSize: pick<number>("blockSize") ?? 16,
      enablePrefixCaching: pick<boolean>("enablePrefixCaching") ?? false,
    };
    throw new ConfigError([
      ...hs.reasons,
      ...(hs.config === null ? [] : hisparseReasonsFor(hs.config, ctx, modelConfigOrNull(pick("model")))),
    ]);
  }
  return makeEngineArgs({
    model: pick<string>("model"),
    tokenizer: pick<string>("tokenizer"),
    servedModelName: pick<string>("servedModelName"),
    device: pick<EngineArgs["device"]>("device") ?? "auto",
    loadFormat: pick<EngineArgs["loadFormat"]>("loadFormat") ?? "auto",
    seed: pick<number>("seed") ?? 0,
    maxModelLen: pick<number>("maxModelLen"),
    blockSize: pick<number>("blockSize") ?? 16,
    gpuMemoryUtilization: pick<number>("gpuMemoryUtilization") ?? 0.9,
    numGpuBlocksOverride: pick<number>("numGpuBlocksOverride"),
    cpuKvCacheBytes: pick<number>("cpuKvCacheGib") ?? 2 ** 30,
    kvCacheDtype: pick<EngineArgs["kvCacheDtype"]>("kvCacheDtype") ?? "auto",
    calculateKvScales: pick<boolean>("calculateKvScales") ?? false,
    maxNumSeqs: pick<number>("maxNumSeqs") ?? 256,
    maxNumBatchedTokens: pick<number>("maxNumBatchedTokens") ?? 2048,
    enableChunkedPrefill: pick<boolean>("enableChunkedPrefill") ?? true,
    longPrefillTokenThreshold: pick<number>("longPrefillTokenThreshold") ?? 0,
    enablePrefixCaching: pick<boolean>("enablePrefixCaching") ?? false,
    enforceEager: pick<boolean>("enforceEager") ?? false,
    tensorParallelSize: pick<number>("tensorParallelSize") ?? 1,
    distributedExecutorBackend: pick<EngineArgs["distributedExecutorBackend"]>("distributedExecutorBackend"),
    cpuThreads: pick<number>("cpuThreads"),
    extensions: hs.config === null ? {} : { hisparse: hs.config },
  });
}

/** The model's config.json, or null when it cannot be read (the engine's load reports why). */
function modelConfigOrNull(model: string | undefined): ModelConfig | null {
  try {
    return loadModelConfig(resolveModelDir(model));
  } catch {
    return null;
  }
}
