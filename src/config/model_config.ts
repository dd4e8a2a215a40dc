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
  if (typeof v !== "number" || !Number.isFinite(v)) throw new ModelConfigError(`config.json "${key}" must be a number`);
  return v;
}

function ids(v: unknown): number[] {
  if (typeof v === "number") return [v];
  if (Array.isArray(v)) return v.filter((x): x is number => typeof x === "number");
  return [];
}

function parseRope(cfg: Json): RopeConfig {
  // Newer files: rope_parameters {rope_theta, rope_type, factor, ...}; older: rope_theta + rope_scaling.
  const params = (cfg.rope_parameters ?? cfg.rope_scaling ?? {}) as Json;
  const theta = num(params, "rope_theta", typeof cfg.rope_theta === "number" ? cfg.rope_theta : 10000);
  const rawType = (params.rope_type ?? params.type ?? "default") as string;
  const type = rawType;
  if (type !== "default" && type !== "linear" && type !== "llama3") {
    throw new ModelConfigError(`RoPE scaling type "${rawType}" is not supported (supported: default, linear, llama3)`);
  }
  const maxPos = num(cfg, "max_position_embeddings", 2048);
  return {
    type,
    theta,
    factor: num(params, "factor", 1),
    lowFreqFactor: num(params, "low_freq_factor", 1),
    highFreqFactor: num(params, "high_freq_factor", 4),
    originalMaxPositionEmbeddings: num(params, "original_max_position_embeddings", maxPos),
  };
}

function parseDtype(cfg: Json): CheckpointDtype {
  const d = (cfg.torch_dtype ?? cfg.dtype ?? "float32") as string;
  if (d === "float32" || d === "bfloat16" || d === "float16") return d;
  throw new ModelConfigError(`checkpoint dtype "${d}" is not supported (supported: float32, bfloat16, float16)`);
}

/**
 * Parses an HF config object.
 * @throws ModelConfigError naming the unsupported architecture, dtype, RoPE type or missing field.
 */
export function parseModelConfig(cfg: Json, generationConfig: Json | null = null): ModelConfig {
  const archs = cfg.architectures;
  const architecture = Array.isArray(archs) ? archs[0] : undefined;
  if (typeof architecture !== "string") throw new ModelConfigError('config.json has no "architectures" entry');
  if (!(architecture in SUPPORTED_ARCHITECTURES)) {
    const known = Object.keys(SUPPORTED_ARCHITECTURES).join(", ");
    throw new ModelConfigError(`architecture ${architecture} is not supported (supported: ${known})`);
  }
  const arch = architecture as keyof typeof SUPPORTED_ARCHITECTURES;
  const family = SUPPORTED_ARCHITECTURES[arch];
  if (cfg.hidden_act !== undefined && cfg.hidden_act !== "silu") {
    throw new ModelConfigError(`activation "${String(cfg.hidden_act)}" is not supported (supported: silu)`);
  }
  const hiddenSize = num(cfg, "hidden_size");
  const numAttentionHeads = num(cfg, "num_attention_heads");
  const headDim = num(cfg, "head_dim", hiddenSize / numAttentionHeads);
  const numKeyValueHeads = num(cfg, "num_key_value_heads", numAttentionHeads);
  if (!Number.isInteger(headDim) || numAttentionHeads % numKeyValueHeads !== 0) {
    throw new ModelConfigError(
      `head layout is not supported: ${numAttentionHeads} heads, ${numKeyValueHeads} kv heads, head_dim ${headDim}`,
    );
  }
  const llamaBias = cfg.attention_bias === true;
  const eos = [...ids(cfg.eos_token_id), ...ids(generationConfig?.eos_token_id)];
  const bos = cfg.bos_token_id;
  return {
    architecture: arch,
    family,
    hiddenSize,
    intermediateSize: num(cfg, "intermediate_size"),
    numHiddenLayers: num(cfg, "num_hidden_layers"),
    numAttentionHeads,
    numKeyValueHeads,
    headDim,
    vocabSize: num(cfg, "vocab_size"),
    rmsNormEps: num(cfg, "rms_norm_eps", 1e-6),
    maxPositionEmbeddings: num(cfg, "max_position_embeddings", 2048),
    tieWordEmbeddings: cfg.tie_word_embeddings === true,
    attentionBias: family === "qwen2" || llamaBias,
    oProjBias: family !== "qwen2" && llamaBias,
    mlpBias: cfg.mlp_bias === true,
    qkNorm: family === "qwen3",
    rope: parseRope(cfg),
    dtype: parseDtype(cfg),
    bosTokenId: typeof bos === "number" ? bos : null,
    eosTokenIds: [...new Set(eos)],
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
