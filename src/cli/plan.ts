import { readFileSync, statSync } from "node:fs";
import { isAbsolute, join, relative } from "node:path";
import { type Command, Option } from "commander";
import { defaultEngineArgs } from "../config/engine_args.js";
import {
  type HiSparseConfig,
  resolveHiSparseConfig,
  validateHiSparseConfig,
} from "../config/hisparse_config.js";
import {
  derivedMaxModelLen,
  derivedMaxModelLenSource,
  loadModelConfig,
  type ModelConfig,
  parseModelConfig,
} from "../config/model_config.js";
import { countParameters, weightSplit } from "../config/parameter_count.js";
import {
  KV_CACHE_DTYPE_BYTES,
  KV_CACHE_DTYPES,
  type KVCacheDtype,
  resolveKVCacheDtype,
} from "../core/kv/kv_cache_dtype.js";
import { kvHeadsPerRank } from "../core/kv/kv_cache_interface.js";
import { tensorParallelReasons } from "../core/tensor_parallel.js";
import { resolveModelDir } from "../models/registry.js";
import { dsaHiSparseLines, planDsaKnobs } from "../plan/dsa_plan.js";
import {
  type BudgetSource,
  budgetLines,
  denseLines,
  formatParameterCount,
  hisparseLines,
} from "../plan/format.js";
import { planHiSparseKnobs } from "../plan/hisparse_knobs.js";
import {
  cudaDigestElementBytes,
  kvBudgetFromGpu,
  noKvBudgetError,
  PlanError,
  type PlanInput,
  planDense,
  planHiSparse,
} from "../plan/plan.js";
import { parseFloatArg, parseGibArg, parseIntArg } from "./engine_flags.js";
import { action } from "./errors.js";
import { HISPARSE_CONFIG_HELP } from "./hisparse_flags.js";
import { moeSummary } from "./info.js";
import { parseBlockSizeArg, parsePositiveIntArg } from "./parse_args.js";

/**
 * Bytes per weight element of `--weights-dtype` (fp8: an FP8 checkpoint's 1 byte per weight, its
 * block scales and bf16 norms not counted; the engine itself loads bf16 / f32 weights).
 */
const WEIGHT_DTYPE_BYTES = { bf16: 2, f16: 2, f32: 4, fp8: 1 } as const;
type WeightDtype = keyof typeof WEIGHT_DTYPE_BYTES;
/** `--kv-cache-dtype auto` plans the CUDA engine: its activation dtype, bf16. */
const PLAN_ACTIVATION_DTYPE = "bf16";

/** Default reserve for activations, CUDA graphs and allocator slack, GiB (an estimate; see README). */
export const DEFAULT_RESERVE_GIB = 2;

interface PlanOptions {
  model?: string;
  config?: string;
  gpuMemGib?: number;
  kvCacheGib?: number;
  gpuMemoryUtilization: number;
  reserveGib: number;
  context: number;
  blockSize: number;
  kvCacheDtype: KVCacheDtype;
  weightsDtype: WeightDtype;
  tensorParallelSize: number;
  hybridSparseTopk?: number;
  hisparseConfig?: string;
  hostPoolGib?: number;
  maxNumBatchedTokens: number;
  json: boolean;
}

/** `hisparse plan`: how many requests of a context fit, dense vs HiSparse, with the arithmetic. */
export function registerPlan(program: Command): void {
  program
    .command("plan")
    .description(
      "how many requests of a given context fit on one GPU, dense vs HiSparse (shows the arithmetic)",
    )
    .option(
      "--model <dir>",
      "model directory or bundled name, e.g. llama-3.1-8b (default: the bundled ref-small)",
    )
    .option("--config <file>", "an HF config.json (or a folder holding one) instead of --model")
    .option("--gpu-mem-gib <g>", "GPU memory in GiB (e.g. 141 for an H200)", parseGibArg)
    .option(
      "--kv-cache-gib <g>",
      "KV cache budget in GiB, instead of deriving it from --gpu-mem-gib",
      parseGibArg,
    )
    .option("--gpu-memory-utilization <f>", "fraction of GPU memory the engine may use", parseFloatArg, 0.9)
    .option(
      "--reserve-gib <g>",
      "GPU memory kept for activations and CUDA graphs",
      parseFloatArg,
      DEFAULT_RESERVE_GIB,
    )
    .requiredOption("--context <n>", "tokens per request (prompt + output)", parsePositiveIntArg)
    .option("--block-size <n>", "tokens per KV block (a power of two in [1, 256])", parseBlockSizeArg, 16)
    .option(
      "--max-num-batched-tokens <n>",
      "token budget of one engine step (DSA: the chunk a streaming prefill holds on the GPU)",
      parsePositiveIntArg,
      defaultEngineArgs().maxNumBatchedTokens,
    )
    .addOption(
      new Option(
        "--kv-cache-dtype <dtype>",
        "KV cache dtype (vLLM's: auto = bf16 on CUDA; fp8 = e4m3, per-tensor scales)",
      )
        .choices(KV_CACHE_DTYPES)
        .default("auto"),
    )
    .addOption(
      new Option(
        "--weights-dtype <dtype>",
        "weight dtype on the GPU (fp8: an FP8 checkpoint, 1 B per weight)",
      )
        .choices(Object.keys(WEIGHT_DTYPE_BYTES))
        .default("bf16"),
    )
    .option(
      "--tensor-parallel-size <n>",
      "GPUs the model is split over (as serve): weights and GQA heads split, MLA rows on every rank; figures per rank",
      parseIntArg,
      1,
    )
    .option(
      "--hybrid-sparse-topk <n>",
      "tokens each sparse decode step attends to (default 2048)",
      parseIntArg,
    )
    .option(
      "--hisparse-config <json>",
      `${HISPARSE_CONFIG_HELP} (as serve; selector, min_sparse_tokens and residency change no figure)`,
    )
    .option(
      "--host-pool-gib <g>",
      "host KV pool in GiB (default: 2 × the GPU pool's pages; DSA models: the one that holds the most requests of --context)",
      parseGibArg,
    )
    .option("--json", "print JSON", false)
    .action(action(runPlan));
}

/** The model config from --config FILE or --model DIR. */
function modelConfigOf(o: PlanOptions): { config: ModelConfig; source: string } {
  if (o.config !== undefined && o.model !== undefined)
    throw new Error("give either --model or --config, not both");
  if (o.config === undefined) {
    const dir = resolveModelDir(o.model);
    return { config: loadModelConfig(dir), source: dir };
  }
  let raw: unknown;
  const file = isDirectory(o.config) ? join(o.config, "config.json") : o.config;
  try {
    raw = JSON.parse(readFileSync(file, "utf8"));
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new Error(code === undefined ? `${file} is not valid JSON` : `cannot read ${file} (${code})`);
  }
  if (raw === null || typeof raw !== "object" || Array.isArray(raw))
    throw new Error(`${file} must hold a JSON object`);
  return { config: parseModelConfig(raw as Record<string, unknown>), source: o.config };
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/**
 * The settings the engine would refuse at start-up, checked by the engine's own rules
 * (validateHiSparseConfig) before any figure is printed.
 * @throws PlanError listing every reason (a context above the model's positions, HiSparse knobs).
 */
function refuseWhatTheEngineWould(
  input: PlanInput,
  maxPositions: { len: number; what: string },
  numLayers: number,
): void {
  const h = input.hisparse;
  const reasons = validateHiSparseConfig(
    resolveHiSparseConfig(
      {
        mode: "on",
        topk: h.topk,
        deviceBufferTokens: h.deviceBufferTokens,
        sinkTokens: h.sinkTokens,
        windowTokens: h.windowTokens,
        digestTokens: h.digestTokens,
        digestDtype: h.digestDtype,
        denseLayers: [...h.denseLayers],
        minSparseTokens: h.unplanned?.minSparseTokens,
        selector: h.unplanned?.selector as HiSparseConfig["selector"] | undefined,
        residency: h.unplanned?.residency as HiSparseConfig["residency"] | undefined,
      },
      input.blockSize,
    ),
    { blockSize: input.blockSize, enablePrefixCaching: false, numLayers },
  );
  if (input.contextTokens > maxPositions.len)
    reasons.unshift(
      `--context (${input.contextTokens}) exceeds the model's ${maxPositions.what} (${maxPositions.len})`,
    );
  if (reasons.length > 0)
    throw new PlanError(`the engine would refuse these settings: ${reasons.join("; ")}`);
}

/**
 * Weights one rank holds: (routed experts + TP-sharded weights) / tp + replicated weights
 * (config/parameter_count.ts weightSplit), in parameters.
 * @throws Error when the rank count is not a positive integer.
 */
function weightsPerRank(
  config: ModelConfig,
  tp: number,
): { parameters: number; split: BudgetSource["weightSplit"] } {
  if (!(Number.isInteger(tp) && tp >= 1)) throw new Error(`--tensor-parallel-size must be >= 1, got ${tp}`);
  const w = weightSplit(config);
  return { parameters: Math.ceil((w.routedExperts + w.sharded) / tp) + w.replicated, split: w };
}

/** The budget's source terms: GPU memory minus one rank's weights and the reserve, or given. */
function budgetSourceOf(o: PlanOptions, config: ModelConfig, numParameters: number): BudgetSource {
  if (o.kvCacheGib !== undefined) return {};
  const tp = o.tensorParallelSize;
  const weightElementBytes = WEIGHT_DTYPE_BYTES[o.weightsDtype];
  const rank = weightsPerRank(config, tp);
  return {
    gpuMemBytes: o.gpuMemGib!,
    gpuMemoryUtilization: o.gpuMemoryUtilization,
    numParameters: tp > 1 ? rank.parameters : numParameters,
    weightElementBytes,
    weightBytes: (tp > 1 ? rank.parameters : numParameters) * weightElementBytes,
    reserveBytes: Math.round(o.reserveGib * 2 ** 30),
    ...(tp > 1 ? { tensorParallelSize: tp, weightSplit: rank.split } : {}),
  };
}

async function runPlan(o: PlanOptions): Promise<void> {
  const { config, source } = modelConfigOf(o);
  if (o.gpuMemGib === undefined && o.kvCacheGib === undefined)
    throw new Error("give the GPU's memory (--gpu-mem-gib G) or the KV cache budget (--kv-cache-gib G)");
  if (!(o.gpuMemoryUtilization > 0 && o.gpuMemoryUtilization <= 1))
    throw new Error(`--gpu-memory-utilization must be in (0, 1], got ${o.gpuMemoryUtilization}`);
  const numParameters = countParameters(config);
  const budget = budgetSourceOf(o, config, numParameters);
  const gpu =
    o.kvCacheGib !== undefined
      ? null
      : {
          gpuMemBytes: budget.gpuMemBytes!,
          gpuMemoryUtilization: budget.gpuMemoryUtilization!,
          weightBytes: budget.weightBytes!,
          reserveBytes: budget.reserveBytes!,
        };
  const kvBudgetBytes = gpu === null ? o.kvCacheGib! : kvBudgetFromGpu(gpu);
  if (gpu !== null && !(kvBudgetBytes > 0)) {
    const fp8 = o.weightsDtype === "fp8" ? undefined : budget.numParameters! * WEIGHT_DTYPE_BYTES.fp8;
    throw noKvBudgetError(gpu, fp8);
  }
  const kvDtype = resolveKVCacheDtype(o.kvCacheDtype, PLAN_ACTIVATION_DTYPE);
  const hisparse =
    config.mla?.indexer != null
      ? planDsaKnobs({
          json: o.hisparseConfig,
          topk: o.hybridSparseTopk,
          hostPoolBytes: o.hostPoolGib,
          blockSize: o.blockSize,
          mla: config.mla,
          numLayers: config.numHiddenLayers,
          architecture: config.architecture,
          maxNumBatchedTokens: o.maxNumBatchedTokens,
        })
      : planHiSparseKnobs({
          json: o.hisparseConfig,
          topk: o.hybridSparseTopk,
          hostPoolBytes: o.hostPoolGib,
          blockSize: o.blockSize,
        });
  const input: PlanInput = {
    model: config,
    kvBudgetBytes,
    contextTokens: o.context,
    blockSize: o.blockSize,
    kvElementBytes: KV_CACHE_DTYPE_BYTES[kvDtype],
    tensorParallelSize: o.tensorParallelSize,
    digestElementBytes: cudaDigestElementBytes(hisparse),
    hisparse,
  };
  const maxLen = { len: derivedMaxModelLen(config), what: derivedMaxModelLenSource(config) };
  refuseWhatTheEngineWould(input, maxLen, config.numHiddenLayers);
  const dense = planDense(input);
  const sparse = planHiSparse(input);
  if (o.json) {
    console.log(
      JSON.stringify(
        { model: source, input: { ...input, model: undefined }, budget, dense, hisparse: sparse },
        null,
        2,
      ),
    );
    return;
  }
  const rel = relative(process.cwd(), source);
  const shown = rel.startsWith("..") || isAbsolute(rel) ? source : rel;
  const kvShown = o.kvCacheDtype === kvDtype ? kvDtype : `${o.kvCacheDtype} (${kvDtype})`;
  console.log(
    `Model ${shown}: ${config.architecture}, ${formatParameterCount(numParameters)} parameters, ${config.numHiddenLayers} layers, ` +
      `${attentionSummary(config)}; context ${o.context} tokens, blocks of ${o.blockSize}, KV ${kvShown}` +
      (o.tensorParallelSize > 1 ? `, --tensor-parallel-size ${o.tensorParallelSize}` : ""),
  );
  const moe = moeSummary(config);
  if (moe !== null)
    console.log(
      `${moe} (the weights count every expert${config.mla == null ? "; KV is GQA as for dense models" : ""})`,
    );
  for (const l of [
    ...budgetLines(kvBudgetBytes, budget),
    ...denseLines(input, dense),
    ...(config.mla?.indexer != null
      ? dsaHiSparseLines(input, sparse, dense, config.mla)
      : hisparseLines(input, sparse, dense)),
    ...deploymentLines(config, o.tensorParallelSize, dense, sparse),
    ...engineSupportLines(config, o.tensorParallelSize),
  ])
    console.log(l);
}

/**
 * A note when the engine refuses the planned split today (e.g. MLA or MoE models at TP > 1):
 * the figures above are the memory arithmetic only.
 */
function engineSupportLines(config: ModelConfig, tp: number): string[] {
  const reasons = tp > 1 ? tensorParallelReasons(config, tp) : [];
  if (reasons.length === 0) return [];
  return [
    `Note: the engine refuses this split today: ${reasons.join("; ")}; the figures above are the memory arithmetic only.`,
  ];
}

/** "8 KV heads × 128 head_dim" (GQA) or "MLA (kv_lora_rank 512 + qk_rope 64), DSA indexer keys 128". */
function attentionSummary(c: ModelConfig): string {
  if (c.mla == null) return `${c.numKeyValueHeads} KV heads × ${c.headDim} head_dim`;
  const ix = c.mla.indexer;
  return (
    `MLA (kv_lora_rank ${c.mla.kvLoraRank} + qk_rope ${c.mla.qkRopeHeadDim})` +
    (ix === null ? "" : `, DSA indexer (top-${ix.topk}, keys of ${ix.headDim})`)
  );
}

/**
 * What the per-rank figures mean for the deployment: every rank holds the same blocks (GQA: its
 * share of the heads; MLA: the whole latent and indexer rows, as vLLM keeps them), so the
 * deployment runs one rank's requests; and, for MLA models, that the engine does not run
 * HiSparse on them yet.
 */
function deploymentLines(
  c: ModelConfig,
  tp: number,
  dense: ReturnType<typeof planDense>,
  sparse: ReturnType<typeof planHiSparse>,
): string[] {
  const lines: string[] = [];
  if (tp > 1)
    lines.push(
      `Deployment (${tp} GPUs, one tensor-parallel group): every rank holds the same block ids, ` +
        (c.mla == null
          ? `each with ${kvHeadsPerRank(c.numKeyValueHeads, tp)} of the ${c.numKeyValueHeads} KV heads`
          : "each with the whole MLA latent and indexer rows (replicated, as vLLM keeps MLA KV under TP)") +
        `, so ${tp} GPUs run ${dense.maxConcurrent} requests dense, ${sparse.given.maxConcurrent} with HiSparse (default host pool), ${sparse.best.maxConcurrent} with the best host pool`,
      `  host pools are per rank: ${tp} × ${(sparse.best.hostPoolBytes / 2 ** 30).toFixed(2)} GiB pinned for the best one` +
        (c.mla == null
          ? " (each rank's pages hold its own heads)"
          : "; MLA rows are the same on every rank, so one copy shared by the ranks would do (as vLLM shares it per DP replica)"),
    );
  if (c.mla != null && c.mla.indexer === null)
    lines.push(
      "Note: the engine runs HiSparse on MLA models only with a DSA indexer (its top-k selects the latent rows to recall; worker/hisparse/setup.ts modelReasons); the HiSparse figures are the KV memory formula's split (latent rows offloadable)",
    );
  return lines;
}
