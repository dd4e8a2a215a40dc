import { readFileSync } from "node:fs";
import { join } from "node:path";
import { type ModelFamily, SUPPORTED_ARCHITECTURES } from "./architectures.js";
import { FAMILY_TRAITS, parseRotaryDim, parseSlidingWindow } from "./family_traits.js";
import { type MlaConfig, parseMlaConfig } from "./mla_config.js";
import { ModelConfigError } from "./model_config_error.js";
import { type MoeConfig, parseMoeConfig } from "./moe_config.js";

export { type ModelFamily, SUPPORTED_ARCHITECTURES } from "./architectures.js";
export type { DsaIndexerConfig, IndexerType, MlaConfig } from "./mla_config.js";
export { ModelConfigError } from "./model_config_error.js";
export type { MlpKind, MoeConfig, MoeRoutingRule } from "./moe_config.js";
export { mlpKindOf } from "./moe_config.js";

/** Architectures known but not runnable yet: the one-sentence reason they are refused. */
const PENDING_ARCHITECTURES: Readonly<Record<string, string>> = {};

/** Storage dtypes of checkpoints that the loader reads. */
export type CheckpointDtype = "float32" | "bfloat16" | "float16";

/**
 * Rotary position embedding settings, from `rope_parameters` (newer HF files) or top-level
 * `rope_theta` + `rope_scaling` (older files). Types: "default", "linear", "llama3", "yarn"
 * (transformers/modeling_rope_utils.py).
 */
export interface RopeConfig {
  type: "default" | "linear" | "llama3" | "yarn";
  theta: number;
  /** Scaling factor (linear, llama3, yarn). */
  factor: number;
  /** llama3 only. */
  lowFreqFactor: number;
  highFreqFactor: number;
  /** llama3 and yarn: the pretrained context. */
  originalMaxPositionEmbeddings: number;
  /** yarn only (HF _compute_yarn_parameters; absent for the other types). */
  yarn?: YarnParams;
}

/** YaRN's optional keys (arXiv 2309.00071; HF _compute_yarn_parameters), HF's defaults applied. */
export interface YarnParams {
  /** `beta_fast` (32) and `beta_slow` (1): rotation counts bounding the ramp. */
  betaFast: number;
  betaSlow: number;
  /** `mscale`, `mscale_all_dim` (DeepSeek): 0 when absent. */
  mscale: number;
  mscaleAllDim: number;
  /** `attention_factor`: the cos/sin multiplier; null = derived from factor and the mscales. */
  attentionFactor: number | null;
  /** `truncate` (true): floor/ceil the correction range. */
  truncate: boolean;
}

/** The parts of an HF `config.json` the engine needs, with HF's semantics. */
export interface ModelConfig {
  architecture: keyof typeof SUPPORTED_ARCHITECTURES;
  family: ModelFamily;
  hiddenSize: number;
  intermediateSize: number;
  numHiddenLayers: number;
  numAttentionHeads: number;
  numKeyValueHeads: number;
  /** Per-head dimension (`head_dim`, else hidden_size / num_attention_heads). */
  headDim: number;
  vocabSize: number;
  rmsNormEps: number;
  maxPositionEmbeddings: number;
  tieWordEmbeddings: boolean;
  /** q/k/v projections have biases (Qwen2 always; Llama when `attention_bias`). */
  attentionBias: boolean;
  /** o_proj bias (Llama `attention_bias` also sets it; Qwen2 has none). */
  oProjBias: boolean;
  mlpBias: boolean;
  /** Qwen3 (and GLM-4.5 with `use_qk_norm`): RMSNorm over each q and k head before RoPE. */
  qkNorm: boolean;
  rope: RopeConfig;
  /**
   * Leading dims of each q/k head that RoPE rotates (NeoX pairs (i, i + rotaryDim/2) within
   * them; the rest pass through): int(headDim * `partial_rotary_factor`), GLM-4.5 half the head
   * (HF glm4_moe apply_rotary_pos_emb). Absent in hand-built configs = headDim.
   */
  rotaryDim?: number;
  /** Mixture-of-experts settings (config/moe_config.ts); null or absent for dense models. */
  moe?: MoeConfig | null;
  /**
   * Multi-head latent attention (and DSA indexer) settings (config/mla_config.ts) of the
   * DeepSeek-V3 / V3.2 and GLM-5 families; null or absent for GQA models, whose attention
   * fields (numKeyValueHeads, headDim) it replaces (headDim is then qk_rope_head_dim, as HF sets it).
   */
  mla?: MlaConfig | null;
  /** Dtype the checkpoint declares (`torch_dtype` / `dtype`). */
  dtype: CheckpointDtype;
  bosTokenId: number | null;
  /** EOS ids from config.json, merged with generation_config.json when present. */
  eosTokenIds: number[];
  /**
   * Sliding-window attention span in tokens when the model uses it (Mistral v0.1
   * `sliding_window`; Qwen2/Qwen3 only with `use_sliding_window`), else null. The engine attends
   * over the full context, so it is exact only while sequences stay within the window
   * (models/registry.ts checks `maxModelLen` against it). Optional for hand-built configs.
   */
  slidingWindow?: number | null;
}

type Json = Record<string, unknown>;

function num(cfg: Json, key: string, fallback?: number): number {
  const v = cfg[key];
  if (v === undefined || v === null) {
    if (fallback !== undefined) return fallback;
    throw new ModelConfigError(`config.json is missing "${key}"`);
  }
  if (typeof v !== "number" || !Number.isFinite(v))
    throw new ModelConfigError(`config.json "${key}" must be a number`);
  return v;
}

/** A positive integer field (layer counts, sizes). */
function posInt(cfg: Json, key: string, fallback?: number): number {
  const v = num(cfg, key, fallback);
  if (!Number.isInteger(v) || v < 1)
    throw new ModelConfigError(`config.json "${key}" must be a positive integer, got ${v}`);
  return v;
}

function ids(v: unknown): number[] {
  if (typeof v === "number") return [v];
  if (Array.isArray(v)) return v.filter((x): x is number => typeof x === "number");
  return [];
}

/** Default `rope_theta` of HF's LlamaConfig when a file gives none. */
const DEFAULT_ROPE_THETA = 10000;

/** Fields each RoPE type reads (transformers/modeling_rope_utils.py `_validate_*_parameters`). */
const ROPE_REQUIRED_FIELDS: Record<RopeConfig["type"], readonly string[]> = {
  default: [],
  linear: ["factor"],
  llama3: ["factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"],
  yarn: ["factor", "original_max_position_embeddings"],
};

function parseRope(cfg: Json, maxPos: number): RopeConfig {
  // Newer files: rope_parameters {rope_theta, rope_type, factor, ...}; older: top-level
  // rope_theta + rope_scaling {rope_type | type, factor, ...} (null when unscaled).
  const params = (cfg.rope_parameters ?? cfg.rope_scaling ?? {}) as Json;
  if (typeof params !== "object" || Array.isArray(params)) {
    throw new ModelConfigError('config.json "rope_parameters" / "rope_scaling" must be an object');
  }
  const topTheta = typeof cfg.rope_theta === "number" ? cfg.rope_theta : DEFAULT_ROPE_THETA;
  const theta = num(params, "rope_theta", topTheta);
  const type = String(params.rope_type ?? params.type ?? "default");
  if (type !== "default" && type !== "linear" && type !== "llama3" && type !== "yarn") {
    throw new ModelConfigError(
      `RoPE scaling type "${type}" is not supported (supported: default, linear, llama3, yarn)`,
    );
  }
  // Scaling types need their own fields: a silently defaulted factor would give wrong angles.
  for (const key of ROPE_REQUIRED_FIELDS[type]) {
    if (params[key] === undefined || params[key] === null) {
      throw new ModelConfigError(`RoPE scaling type "${type}" needs "${key}" in config.json`);
    }
  }
  return {
    type,
    theta,
    factor: num(params, "factor", 1),
    lowFreqFactor: num(params, "low_freq_factor", 1),
    highFreqFactor: num(params, "high_freq_factor", 4),
    originalMaxPositionEmbeddings: num(params, "original_max_position_embeddings", maxPos),
    ...(type === "yarn" ? { yarn: parseYarn(params) } : {}),
  };
}

/**
 * The longest context the model supports (vLLM ModelConfig's `derived_max_model_len`):
 * `original_max_position_embeddings * factor` under YaRN, whose rope_scaling states the
 * extended length that way (Qwen3's 128K setting: 32768 x 4 = 131072, while its
 * max_position_embeddings stays 40960); `max_position_embeddings` otherwise. vLLM also
 * multiplies by `factor` for linear and dynamic scaling; hisparse keeps max_position_embeddings
 * for linear, as HF's files of linear-scaled models already state the scaled length.
 */
export function derivedMaxModelLen(config: Pick<ModelConfig, "maxPositionEmbeddings" | "rope">): number {
  const r = config.rope;
  if (r.type !== "yarn") return config.maxPositionEmbeddings;
  return Math.floor(r.originalMaxPositionEmbeddings * r.factor);
}

/** What derivedMaxModelLen read, for error messages ("max_position_embeddings" or the YaRN product). */
export function derivedMaxModelLenSource(config: Pick<ModelConfig, "rope">): string {
  return config.rope.type === "yarn"
    ? "YaRN length (original_max_position_embeddings x factor)"
    : "max_position_embeddings";
}

/** YaRN's optional keys with HF's defaults (`beta_fast or 32`, `beta_slow or 1`, truncate true). */
function parseYarn(params: Json): YarnParams {
  const truncate = params.truncate ?? true;
  if (typeof truncate !== "boolean")
    throw new ModelConfigError(
      `config.json RoPE "truncate" must be true or false, got ${JSON.stringify(truncate)}`,
    );
  return {
    betaFast: num(params, "beta_fast", 32) || 32,
    betaSlow: num(params, "beta_slow", 1) || 1,
    mscale: num(params, "mscale", 0),
    mscaleAllDim: num(params, "mscale_all_dim", 0),
    attentionFactor: params.attention_factor == null ? null : num(params, "attention_factor"),
    truncate,
  };
}

function parseDtype(cfg: Json): CheckpointDtype {
  const d = (cfg.torch_dtype ?? cfg.dtype ?? "float32") as string;
  if (d === "float32" || d === "bfloat16" || d === "float16") return d;
  throw new ModelConfigError(
    `checkpoint dtype "${d}" is not supported (supported: float32, bfloat16, float16)`,
  );
}

/**
 * Parses an HF config object.
 * @throws ModelConfigError naming the unsupported architecture, dtype, RoPE type or missing field.
 */
export function parseModelConfig(cfg: Json, generationConfig: Json | null = null): ModelConfig {
  const archs = cfg.architectures;
  const architecture = Array.isArray(archs) ? archs[0] : undefined;
  if (typeof architecture !== "string")
    throw new ModelConfigError('config.json has no "architectures" entry');
  if (Object.hasOwn(PENDING_ARCHITECTURES, architecture))
    throw new ModelConfigError(PENDING_ARCHITECTURES[architecture]!);
  if (!Object.hasOwn(SUPPORTED_ARCHITECTURES, architecture)) {
    const known = Object.keys(SUPPORTED_ARCHITECTURES).join(", ");
    throw new ModelConfigError(`architecture ${architecture} is not supported (supported: ${known})`);
  }
  const arch = architecture as keyof typeof SUPPORTED_ARCHITECTURES;
  const family = SUPPORTED_ARCHITECTURES[arch];
  const traits = FAMILY_TRAITS[family];
  if (cfg.hidden_act !== undefined && cfg.hidden_act !== "silu") {
    throw new ModelConfigError(`activation "${String(cfg.hidden_act)}" is not supported (supported: silu)`);
  }
  const hiddenSize = posInt(cfg, "hidden_size");
  const numAttentionHeads = posInt(cfg, "num_attention_heads");
  const headDim = num(cfg, "head_dim", hiddenSize / numAttentionHeads);
  const numKeyValueHeads = posInt(cfg, "num_key_value_heads", numAttentionHeads);
  if (!Number.isInteger(headDim) || headDim % 2 !== 0 || numAttentionHeads % numKeyValueHeads !== 0) {
    throw new ModelConfigError(
      `head layout is not supported: ${numAttentionHeads} heads, ${numKeyValueHeads} kv heads, head_dim ${headDim}`,
    );
  }
  const eos = [...ids(cfg.eos_token_id), ...ids(generationConfig?.eos_token_id)];
  const bos = cfg.bos_token_id;
  const maxPositionEmbeddings = posInt(cfg, "max_position_embeddings", 2048);
  const numHiddenLayers = posInt(cfg, "num_hidden_layers");
  const rope = parseRope(cfg, maxPositionEmbeddings);
  const mla =
    traits.mla === undefined
      ? null
      : parseMlaConfig(cfg, traits.mla, numHiddenLayers, {
          type: rope.type,
          factor: rope.factor,
          mscaleAllDim: rope.yarn?.mscaleAllDim,
        });
  // MLA rotates only the rope part of each head (HF sets head_dim = qk_rope_head_dim).
  const ropeHeadDim = mla === null ? headDim : mla.qkRopeHeadDim;
  return {
    architecture: arch,
    family,
    hiddenSize,
    intermediateSize: posInt(cfg, "intermediate_size"),
    numHiddenLayers,
    numAttentionHeads,
    numKeyValueHeads,
    headDim: ropeHeadDim,
    vocabSize: posInt(cfg, "vocab_size"),
    rmsNormEps: num(cfg, "rms_norm_eps", 1e-6),
    maxPositionEmbeddings,
    tieWordEmbeddings: cfg.tie_word_embeddings === true,
    attentionBias: traits.qkvBias(cfg),
    oProjBias: traits.oProjBias(cfg),
    mlpBias: traits.mlpBias(cfg),
    qkNorm: traits.qkNorm(cfg),
    rope,
    rotaryDim: parseRotaryDim(cfg, ropeHeadDim, traits.partialRotaryFactor),
    moe: traits.moe === null ? null : parseMoeConfig(cfg, traits.moe, numHiddenLayers),
    mla,
    dtype: parseDtype(cfg),
    bosTokenId: typeof bos === "number" ? bos : null,
    eosTokenIds: [...new Set(eos)],
    slidingWindow: parseSlidingWindow(cfg, traits),
  };
}

/**
 * Reads and parses `<dir>/config.json` (and `generation_config.json` when present).
 * @throws ModelConfigError when the directory or file is missing, not JSON, or unsupported.
 */
export function loadModelConfig(modelDir: string): ModelConfig {
  const path = join(modelDir, "config.json");
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    throw new ModelConfigError(`no config.json in model directory ${modelDir}`);
  }
  let cfg: Json;
  try {
    cfg = JSON.parse(text) as Json;
  } catch (e) {
    throw new ModelConfigError(`${path} is not valid JSON (${(e as Error).message})`);
  }
  if (cfg === null || typeof cfg !== "object" || Array.isArray(cfg)) {
    throw new ModelConfigError(`${path} must hold a JSON object`);
  }
  let gen: Json | null = null;
  try {
    gen = JSON.parse(readFileSync(join(modelDir, "generation_config.json"), "utf8")) as Json;
  } catch {
    gen = null;
  }
  return parseModelConfig(cfg, gen);
}
