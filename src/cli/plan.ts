import { readFileSync } from "node:fs";
import { isAbsolute, relative } from "node:path";
import { type Command, Option } from "commander";
import {
  type HiSparseConfig,
  resolveHiSparseConfig,
  validateHiSparseConfig,
} from "../config/hisparse_config.js";
import {
  countParameters,
  loadModelConfig,
  type ModelConfig,
  parseModelConfig,
} from "../config/model_config.js";
import { resolveModelDir } from "../models/registry.js";
import { dsaHiSparseLines, planDsaKnobs } from "../plan/dsa_plan.js";
import { type BudgetSource, budgetLines, denseLines, hisparseLines } from "../plan/format.js";
import { planHiSparseKnobs } from "../plan/hisparse_knobs.js";
import { type MlaPlanInput, mlaDenseLines, planMlaDense } from "../plan/mla_plan.js";
import {
  CUDA_DIGEST_ELEMENT_BYTES,
  type HiSparsePlan,
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

/** Bytes per element of the dtypes `plan` accepts. */
const DTYPE_BYTES = { bf16: 2, f16: 2, f32: 4 } as const;
type PlanDtype = keyof typeof DTYPE_BYTES;

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
  kvCacheDtype: PlanDtype;
  weightsDtype: PlanDtype;
  hybridSparseTopk?: number;
  hisparseConfig?: string;
  hostPoolGib?: number;
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
    .option("--config <file>", "an HF config.json instead of --model")
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
    .requiredOption("--context <n>", "tokens per request (prompt + output)", parseIntArg)
    .option("--block-size <n>", "tokens per KV block", parseIntArg, 16)
    .addOption(
      new Option("--kv-cache-dtype <dtype>", "KV cache dtype")
        .choices(Object.keys(DTYPE_BYTES))
        .default("bf16"),
    )
    .addOption(
      new Option("--weights-dtype <dtype>", "weight dtype on the GPU")
        .choices(Object.keys(DTYPE_BYTES))
        .default("bf16"),
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
    .option("--host-pool-gib <g>", "host KV pool in GiB (default: 2 × the GPU pool's pages)", parseGibArg)
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
  try {
    raw = JSON.parse(readFileSync(o.config, "utf8"));
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new Error(
      code === undefined ? `${o.config} is not valid JSON` : `cannot read ${o.config} (${code})`,
    );
  }
  if (raw === null || typeof raw !== "object" || Array.isArray(raw))
    throw new Error(`${o.config} must hold a JSON object`);
  return { config: parseModelConfig(raw as Record<string, unknown>), source: o.config };
}

/**
 * The settings the engine would refuse at start-up, checked by the engine's own rules
 * (validateHiSparseConfig) before any figure is printed.
 * @throws PlanError listing every reason (a context above the model's positions, HiSparse knobs).
 */
function refuseWhatTheEngineWould(input: PlanInput, maxPositions: number, numLayers: number): void {
  const h = input.hisparse;
  const reasons = validateHiSparseConfig(
    resolveHiSparseConfig({
      mode: "on",
      topk: h.topk,
      deviceBufferTokens: h.deviceBufferTokens,
      sinkTokens: h.sinkTokens,
      windowTokens: h.windowTokens,
      denseLayers: [...h.denseLayers],
      minSparseTokens: h.unplanned?.minSparseTokens,
      selector: h.unplanned?.selector as HiSparseConfig["selector"] | undefined,
      residency: h.unplanned?.residency as HiSparseConfig["residency"] | undefined,
    }),
    { blockSize: input.blockSize, enablePrefixCaching: false, numLayers },
  );
  if (input.contextTokens > maxPositions)
    reasons.unshift(
      `--context (${input.contextTokens}) exceeds the model's max_position_embeddings (${maxPositions})`,
    );
  if (reasons.length > 0)
    throw new PlanError(`the engine would refuse these settings: ${reasons.join("; ")}`);
}

async function runPlan(o: PlanOptions): Promise<void> {
  const { config, source } = modelConfigOf(o);
  if (o.gpuMemGib === undefined && o.kvCacheGib === undefined)
    throw new Error("give the GPU's memory (--gpu-mem-gib G) or the KV cache budget (--kv-cache-gib G)");
  if (!(o.gpuMemoryUtilization > 0 && o.gpuMemoryUtilization <= 1))
    throw new Error(`--gpu-memory-utilization must be in (0, 1], got ${o.gpuMemoryUtilization}`);
  const numParameters = countParameters(config);
  const weightElementBytes = DTYPE_BYTES[o.weightsDtype];
  const budget: BudgetSource =
    o.kvCacheGib !== undefined
      ? {}
      : {
          gpuMemBytes: o.gpuMemGib!,
          gpuMemoryUtilization: o.gpuMemoryUtilization,
          numParameters,
          weightElementBytes,
          weightBytes: numParameters * weightElementBytes,
          reserveBytes: Math.round(o.reserveGib * 2 ** 30),
        };
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
  if (gpu !== null && !(kvBudgetBytes > 0)) throw noKvBudgetError(gpu);
  const input: PlanInput = {
    model: config,
    kvBudgetBytes,
    contextTokens: o.context,
    blockSize: o.blockSize,
    kvElementBytes: DTYPE_BYTES[o.kvCacheDtype],
    digestElementBytes: CUDA_DIGEST_ELEMENT_BYTES,
    hisparse: planHiSparseKnobs({
      json: o.hisparseConfig,
      topk: o.hybridSparseTopk,
      hostPoolBytes: o.hostPoolGib,
    }),
  };
  if (config.mla != null) {
    printMlaPlan(o, config, source, kvBudgetBytes, budget, numParameters);
    return;
  }
  refuseWhatTheEngineWould(input, config.maxPositionEmbeddings, config.numHiddenLayers);
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
  console.log(
    `Model ${shown}: ${config.architecture}, ${(numParameters / 1e9).toFixed(2)} B parameters, ${config.numHiddenLayers} layers, ` +
      `${config.numKeyValueHeads} KV heads × ${config.headDim} head_dim; context ${o.context} tokens, blocks of ${o.blockSize}, KV ${o.kvCacheDtype}`,
  );
  const moe = moeSummary(config);
  if (moe !== null) console.log(`${moe} (the weights count every expert; KV is GQA as for dense models)`);
  for (const l of [
    ...budgetLines(kvBudgetBytes, budget),
    ...denseLines(input, dense),
    ...hisparseLines(input, sparse, dense),
  ])
    console.log(l);
}

/** `hisparse plan` of an MLA model: its two KV groups (plan/mla_plan.ts), dense-resident only. */
function printMlaPlan(
  o: PlanOptions,
  config: ModelConfig,
  source: string,
  kvBudgetBytes: number,
  budget: BudgetSource,
  numParameters: number,
): void {
  if (o.context > config.maxPositionEmbeddings)
    throw new PlanError(
      `the engine would refuse these settings: --context (${o.context}) exceeds the model's max_position_embeddings (${config.maxPositionEmbeddings})`,
    );
  const input = {
    mla: config.mla!,
    numHiddenLayers: config.numHiddenLayers,
    kvBudgetBytes,
    contextTokens: o.context,
    blockSize: o.blockSize,
    kvElementBytes: DTYPE_BYTES[o.kvCacheDtype],
  };
  const dense = planMlaDense(input);
  const dsa = dsaPlanOf(o, config, input);
  if (o.json) {
    console.log(
      JSON.stringify(
        { model: source, input: { ...input, mla: undefined }, budget, dense, hisparse: dsa?.plan ?? null },
        null,
        2,
      ),
    );
    return;
  }
  console.log(
    `Model ${source}: ${config.architecture}, ${(numParameters / 1e9).toFixed(2)} B parameters, ${config.numHiddenLayers} layers, ` +
      `MLA (kv_lora_rank ${config.mla!.kvLoraRank} + qk_rope ${config.mla!.qkRopeHeadDim}); context ${o.context} tokens, blocks of ${o.blockSize}, KV ${o.kvCacheDtype}`,
  );
  for (const l of [
    ...budgetLines(kvBudgetBytes, budget),
    ...mlaDenseLines(input, dense),
    ...(dsa?.lines ?? []),
  ])
    console.log(l);
}

/** A DSA model's HiSparse plan (plan/dsa_plan.ts) and its lines; null for MLA without an indexer. */
function dsaPlanOf(
  o: PlanOptions,
  config: ModelConfig,
  input: MlaPlanInput,
): { plan: HiSparsePlan; lines: string[] } | null {
  const mla = config.mla!;
  if (mla.indexer === null) return null;
  const knobs = planDsaKnobs({
    json: o.hisparseConfig,
    topk: o.hybridSparseTopk,
    hostPoolBytes: o.hostPoolGib,
    blockSize: o.blockSize,
    mla,
    numLayers: config.numHiddenLayers,
    architecture: config.architecture,
  });
  const p: PlanInput = {
    model: config,
    kvBudgetBytes: input.kvBudgetBytes,
    contextTokens: input.contextTokens,
    blockSize: input.blockSize,
    kvElementBytes: input.kvElementBytes,
    hisparse: knobs,
  };
  const plan = planHiSparse(p);
  return { plan, lines: dsaHiSparseLines(p, plan, planMlaDense(input), mla) };
}
