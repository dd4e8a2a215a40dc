import { readFileSync } from "node:fs";
import { join } from "node:path";

/** Model families the engine runs (all share the Llama decoder; see models/llama.ts). */
export const SUPPORTED_ARCHITECTURES = {
  LlamaForCausalLM: "llama",
  MistralForCausalLM: "mistral",
  Qwen2ForCausalLM: "qwen2",
  Qwen3ForCausalLM: "qwen3",
} as const;
export type ModelFamily = (typeof SUPPORTED_ARCHITECTURES)[keyof typeof SUPPORTED_ARCHITECTURES];

/** Storage dtypes of checkpoints that the loader reads. */
export type CheckpointDtype = "float32" | "bfloat16" | "float16";

/**
 * Rotary position embedding settings, from `rope_parameters` (newer HF files) or top-level
 * `rope_theta` + `rope_scaling` (older files). Types: "default", "linear", "llama3"
 * (transformers/modeling_rope_utils.py).
 */
export interface RopeConfig {
  type: "default" | "linear" | "llama3";
  theta: number;
  /** Scaling factor (linear, llama3). */
  factor: number;
  /** llama3 only. */
  lowFreqFactor: number;
  highFreqFactor: number;
  originalMaxPositionEmbeddings: number;
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
  /** Qwen3: RMSNorm over each q and k head before RoPE. */
  qkNorm: boolean;
  rope: RopeConfig;
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

/** Error for a model directory the engine cannot use; the message is one sentence for the user. */
export class ModelConfigError extends Error {
  override name = "ModelConfigError";
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
  if (type !== "default" && type !== "linear" && type !== "llama3") {
    throw new ModelConfigError(
      `RoPE scaling type "${type}" is not supported (supported: default, linear, llama3)`,
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
  };
}

/**
 * Sliding window in tokens, or null when full attention is used. HF semantics: Mistral uses
 * `sliding_window` when set; Qwen2/Qwen3 only when `use_sliding_window` is true.
 */
function parseSlidingWindow(cfg: Json, family: ModelFamily): number | null {
  if ((family === "qwen2" || family === "qwen3") && cfg.use_sliding_window !== true) return null;
  if (family === "llama") return null;
  const w = cfg.sliding_window;
  if (w === undefined || w === null) return null;
  return posInt(cfg, "sliding_window");
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
  if (!Object.hasOwn(SUPPORTED_ARCHITECTURES, architecture)) {
    const known = Object.keys(SUPPORTED_ARCHITECTURES).join(", ");
    throw new ModelConfigError(`architecture ${architecture} is not supported (supported: ${known})`);
  }
  const arch = architecture as keyof typeof SUPPORTED_ARCHITECTURES;
  const family = SUPPORTED_ARCHITECTURES[arch];
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
  const llamaBias = family !== "mistral" && cfg.attention_bias === true;
  const eos = [...ids(cfg.eos_token_id), ...ids(generationConfig?.eos_token_id)];
  const bos = cfg.bos_token_id;
  const maxPositionEmbeddings = posInt(cfg, "max_position_embeddings", 2048);
  return {
    architecture: arch,
    family,
    hiddenSize,
    intermediateSize: posInt(cfg, "intermediate_size"),
    numHiddenLayers: posInt(cfg, "num_hidden_layers"),
    numAttentionHeads,
    numKeyValueHeads,
    headDim,
    vocabSize: posInt(cfg, "vocab_size"),
    rmsNormEps: num(cfg, "rms_norm_eps", 1e-6),
    maxPositionEmbeddings,
    tieWordEmbeddings: cfg.tie_word_embeddings === true,
    attentionBias: family === "qwen2" || llamaBias,
    oProjBias: family !== "qwen2" && llamaBias,
    mlpBias: family === "llama" && cfg.mlp_bias === true,
    qkNorm: family === "qwen3",
    rope: parseRope(cfg, maxPositionEmbeddings),
    dtype: parseDtype(cfg),
    bosTokenId: typeof bos === "number" ? bos : null,
    eosTokenIds: [...new Set(eos)],
    slidingWindow: parseSlidingWindow(cfg, family),
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

/** Bytes of KV cache per token across all layers: 2 (K,V) × layers × kvHeads × headDim × dtypeBytes. */
export function kvBytesPerToken(cfg: ModelConfig, dtypeBytes: number): number {
  return 2 * cfg.numHiddenLayers * cfg.numKeyValueHeads * cfg.headDim * dtypeBytes;
}

/** Parameter count of a Llama-family config (weights only; tied lm_head counted once). */
export function countParameters(c: ModelConfig): number {
  const H = c.hiddenSize;
  const D = c.headDim;
  const attn = H * c.numAttentionHeads * D * 2 + H * c.numKeyValueHeads * D * 2;
  const attnBias = c.attentionBias ? (c.numAttentionHeads + 2 * c.numKeyValueHeads) * D : 0;
  const mlp = 3 * H * c.intermediateSize;
  const norms = 2 * H + (c.qkNorm ? 2 * D : 0);
  const perLayer = attn + attnBias + mlp + norms;
  const embed = c.vocabSize * H;
  return c.numHiddenLayers * perLayer + embed + H + (c.tieWordEmbeddings ? 0 : embed);
}
