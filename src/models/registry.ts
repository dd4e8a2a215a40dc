import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { Backend, HostTensorData } from "../backends/backend.js";
import { ConfigError } from "../config/engine_args.js";
import {
  type CheckpointDtype,
  derivedMaxModelLen,
  derivedMaxModelLenSource,
  loadModelConfig,
  type ModelConfig,
  ModelConfigError,
  type SUPPORTED_ARCHITECTURES,
} from "../config/model_config.js";
import { tensorParallelReasons } from "../core/tensor_parallel.js";
import type { ModelParallel } from "./blocks.js";
import type { DecoderForCausalLM } from "./decoder.js";
import { DummyWeights } from "./dummy.js";
import { DeepseekV3ForCausalLM, LlamaForCausalLM, type LoadProgress } from "./llama.js";
import { SafetensorsCheckpoint } from "./safetensors.js";
import { WeightLoadError, type WeightSource } from "./weights.js";

/** How weights are obtained (`--load-format`, vLLM's LoadFormat names). */
export type LoadFormat = "auto" | "safetensors" | "dummy";

/** A model class: builds itself from a config and a weight source (vLLM's model registry entry). */
export interface ModelClass {
  load(
    config: ModelConfig,
    source: WeightSource,
    backend: Backend,
    maxPositions: number,
    onProgress?: LoadProgress,
    /** The tensor-parallel rank to load (its weight shards); default one rank. */
    tp?: ModelParallel,
  ): DecoderForCausalLM;
}

/**
 * Architecture (`config.json` "architectures"[0]) -> model class (vllm/model_executor/models/
 * registry.py). Every supported family shares the decoder skeleton (decoder.ts) with GQA
 * attention; the family traits in ModelConfig (q/k/v bias, q/k norm, partial rotary) and its
 * MoE settings (per-layer MLP kind, routing rule) select the differences. The MLA families
 * (DeepSeek-V3, DeepSeek-V3.2, GLM-5) share it with MLA attention (attention_mla.ts).
 */
export const MODEL_REGISTRY: Record<keyof typeof SUPPORTED_ARCHITECTURES, ModelClass> = {
  LlamaForCausalLM,
  MistralForCausalLM: LlamaForCausalLM,
  Qwen2ForCausalLM: LlamaForCausalLM,
  Qwen3ForCausalLM: LlamaForCausalLM,
  Qwen3MoeForCausalLM: LlamaForCausalLM,
  Glm4MoeForCausalLM: LlamaForCausalLM,
  DeepseekV3ForCausalLM,
  DeepseekV32ForCausalLM: DeepseekV3ForCausalLM,
  GlmMoeDsaForCausalLM: DeepseekV3ForCausalLM,
};

/** Options of {@link loadModel}. */
export interface LoadModelOptions {
  /** Model directory in HF format (or a bundled name, see resolveModelDir); undefined = ref-small. */
  modelDir?: string;
  backend: Backend;
  loadFormat: LoadFormat;
  /** Seed of dummy weights. */
  seed: number;
  /** Longest prompt + output in tokens; undefined = the model's max_position_embeddings. */
  maxModelLen?: number;
  /** Called after each weight group is uploaded: (done, total). */
  onProgress?: LoadProgress;
  /** The tensor-parallel rank to load; default one rank. */
  tensorParallel?: ModelParallel;
}

/** A loaded model and the settings it was loaded with. */
export interface LoadedModel {
  config: ModelConfig;
  model: DecoderForCausalLM;
  /** Absolute model directory actually used. */
  modelDir: string;
  /** Effective max model length (positions the RoPE table covers). */
  maxModelLen: number;
}

/**
 * Resolves the model directory, reads its config, opens its weights (safetensors or dummy) and
 * loads the model onto `backend` (vLLM's get_model). The weight source is closed afterwards.
 * @throws ModelConfigError when the directory or config.json is missing or unsupported, or
 *   maxModelLen exceeds max_position_embeddings or the model's sliding window.
 * @throws WeightLoadError when weights are missing, corrupt or of the wrong shape.
 * @throws ConfigError when the model cannot be split over the tensor-parallel ranks (the reason).
 */
export function loadModel(opts: LoadModelOptions): LoadedModel {
  const modelDir = resolveModelDir(opts.modelDir);
  const config = loadModelConfig(modelDir);
  const maxModelLen = resolveMaxModelLen(config, opts.maxModelLen);
  const tpReasons = tensorParallelReasons(config, opts.tensorParallel?.size ?? 1);
  if (tpReasons.length > 0) throw new ConfigError(tpReasons);
  const source = openWeightSource(modelDir, config, opts.loadFormat, opts.seed);
  try {
    const model = MODEL_REGISTRY[config.architecture].load(
      config,
      source,
      opts.backend,
      maxModelLen,
      opts.onProgress,
      opts.tensorParallel,
    );
    return { config, model, modelDir, maxModelLen };
  } finally {
    source.close();
  }
}

/**
 * The max model length to use: `requested`, or the model's derived length when undefined
 * (config/model_config.ts derivedMaxModelLen: max_position_embeddings, or
 * original_max_position_embeddings x factor under YaRN, as vLLM derives it).
 * @throws ModelConfigError when it is not a positive integer, exceeds that length,
 *   or exceeds a sliding window the engine does not implement.
 */
export function resolveMaxModelLen(config: ModelConfig, requested: number | undefined): number {
  const maxPos = derivedMaxModelLen(config);
  const len = requested ?? maxPos;
  if (!Number.isInteger(len) || len < 1)
    throw new ModelConfigError(`--max-model-len must be a positive integer, got ${len}`);
  if (len > maxPos) {
    const what = derivedMaxModelLenSource(config);
    throw new ModelConfigError(`--max-model-len ${len} exceeds the model's ${what} (${maxPos})`);
  }
  const window = config.slidingWindow ?? null;
  if (window !== null && len > window) {
    throw new ModelConfigError(
      `the model uses sliding-window attention over ${window} tokens, which hisparse does not implement, so --max-model-len must be <= ${window} (got ${len})`,
    );
  }
  return len;
}

/** The HostTensorData dtype matching a checkpoint dtype (dummy weights use the model's dtype). */
const DUMMY_DTYPE_OF: Record<CheckpointDtype, HostTensorData["dtype"]> = {
  bfloat16: "bf16",
  float16: "f16",
  float32: "f32",
};

/**
 * Opens the weights of `modelDir` for `loadFormat`: "dummy" builds seeded random weights from
 * the config; "safetensors" and "auto" open the safetensors checkpoint ("auto" names the other
 * formats it finds when there is none).
 * @throws WeightLoadError when the directory has no usable weights.
 */
export function openWeightSource(
  modelDir: string,
  config: ModelConfig,
  loadFormat: LoadFormat,
  seed: number,
): WeightSource {
  if (loadFormat === "dummy") return new DummyWeights(config, { seed, dtype: DUMMY_DTYPE_OF[config.dtype] });
  if (loadFormat === "auto" && !SafetensorsCheckpoint.existsIn(modelDir)) {
    const bin = readdirSync(modelDir).find((f) => /^pytorch_model.*\.bin$/.test(f));
    if (bin !== undefined) {
      throw new WeightLoadError(
        `model directory ${modelDir} has only PyTorch .bin weights (${bin}); convert them to safetensors or use --load-format dummy`,
      );
    }
  }
  return SafetensorsCheckpoint.open(modelDir);
}

/** Model folder bundled with the package, used when no model is given (`models/ref-small`). */
export const DEFAULT_MODEL_NAME = "ref-small";

/**
 * The model directory for `--model`: the bundled `models/ref-small` when `arg` is undefined;
 * else `arg` as a path; when no such path exists, a bundled name (`models/<arg>` or the
 * config-only `configs/<arg>` of a source checkout, e.g. "llama-3.1-8b" for dummy runs).
 * @returns an absolute directory path.
 * @throws ModelConfigError when the path does not exist or is not a directory.
 */
export function resolveModelDir(arg: string | undefined): string {
  const root = packageRoot();
  if (arg === undefined) return join(root, "models", DEFAULT_MODEL_NAME);
  const asPath = resolve(arg);
  if (existsSync(asPath)) {
    if (!statSync(asPath).isDirectory())
      throw new ModelConfigError(`model path ${asPath} is not a directory`);
    return asPath;
  }
  for (const folder of ["models", "configs"]) {
    const bundled = join(root, folder, arg);
    if (!arg.includes("..") && existsSync(join(bundled, "config.json"))) return bundled;
  }
  throw new ModelConfigError(`model path ${asPath} does not exist`);
}

/**
 * Root folder of the hisparse package: the nearest folder above this module with a
 * package.json named "hisparse". Works from `src/models/` (tsx) and `dist/src/models/` (built).
 * @throws Error when no such folder exists (a broken installation).
 */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, "package.json");
    if (existsSync(pkg)) {
      try {
        if ((JSON.parse(readFileSync(pkg, "utf8")) as { name?: unknown }).name === "hisparse") return dir;
      } catch {
        // An unreadable package.json of some other folder: keep walking up.
      }
    }
    const parent = dirname(dir);
    if (parent === dir) throw new Error("cannot find the hisparse package root above models/registry");
    dir = parent;
  }
}
