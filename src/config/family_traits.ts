import type { ModelFamily } from "./architectures.js";
import type { MlaFamily } from "./mla_config.js";
import { ModelConfigError } from "./model_config_error.js";
import type { MoeFamily } from "./moe_config.js";

type Json = Record<string, unknown>;

/** How one family reads the parts of config.json where the families differ (HF semantics). */
export interface FamilyTraits {
  /** q/k/v projection biases. */
  qkvBias(cfg: Json): boolean;
  oProjBias(cfg: Json): boolean;
  mlpBias(cfg: Json): boolean;
  qkNorm(cfg: Json): boolean;
  /**
   * Where a sliding window comes from: `sliding_window` when set (Mistral), only with
   * `use_sliding_window` (Qwen2/Qwen3), or never (Llama, GLM).
   */
  slidingWindow: "sliding_window" | "use_sliding_window" | "none";
  /** `partial_rotary_factor` when config.json gives none (HF's class default). */
  partialRotaryFactor: number;
  /** The MoE reader of config/moe_config.ts, or null for dense families. */
  moe: MoeFamily | null;
  /** The MLA reader of config/mla_config.ts; absent for GQA families. */
  mla?: MlaFamily;
  /**
   * Why the family cannot be split over tensor-parallel ranks yet (config/parallel_config.ts);
   * absent when its layers follow the Megatron layout of dense GQA models.
   */
  tensorParallel?: string;
}

/** The MoE families' refusal: expert sharding (tensor or expert parallel) is not implemented yet. */
const MOE_TP_REFUSAL =
  "tensor parallelism of mixture-of-experts layers is not implemented yet (run this model with --tensor-parallel-size 1)";

const never = (): boolean => false;
const always = (): boolean => true;
const attentionBias = (cfg: Json): boolean => cfg.attention_bias === true;

/**
 * Per family (HF modeling_llama, _mistral, _qwen2, _qwen3, _qwen3_moe, _glm4_moe): Llama's
 * `attention_bias` sets q/k/v and o_proj biases, Qwen2 always has q/k/v biases and no o_proj
 * bias, Qwen3 / Qwen3-MoE have q/k norm, GLM-4.5 has `attention_bias` on q/k/v only, optional
 * q/k norm (`use_qk_norm`) and half-head rotary by default.
 */
export const FAMILY_TRAITS: Record<ModelFamily, FamilyTraits> = {
  llama: {
    qkvBias: attentionBias,
    oProjBias: attentionBias,
    mlpBias: (cfg) => cfg.mlp_bias === true,
    qkNorm: never,
    slidingWindow: "none",
    partialRotaryFactor: 1,
    moe: null,
  },
  mistral: {
    qkvBias: never,
    oProjBias: never,
    mlpBias: never,
    qkNorm: never,
    slidingWindow: "sliding_window",
    partialRotaryFactor: 1,
    moe: null,
  },
  qwen2: {
    qkvBias: always,
    oProjBias: never,
    mlpBias: never,
    qkNorm: never,
    slidingWindow: "use_sliding_window",
    partialRotaryFactor: 1,
    moe: null,
  },
  qwen3: {
    qkvBias: attentionBias,
    oProjBias: attentionBias,
    mlpBias: never,
    qkNorm: always,
    slidingWindow: "use_sliding_window",
    partialRotaryFactor: 1,
    moe: null,
  },
  qwen3_moe: {
    qkvBias: attentionBias,
    oProjBias: attentionBias,
    mlpBias: never,
    qkNorm: always,
    slidingWindow: "use_sliding_window",
    partialRotaryFactor: 1,
    moe: "qwen3_moe",
    tensorParallel: MOE_TP_REFUSAL,
  },
  glm4_moe: {
    qkvBias: attentionBias,
    oProjBias: never,
    mlpBias: never,
    qkNorm: (cfg) => cfg.use_qk_norm === true,
    slidingWindow: "none",
    partialRotaryFactor: 0.5,
    moe: "glm4_moe",
    tensorParallel: MOE_TP_REFUSAL,
  },
  deepseek_v3: mlaTraits("deepseek_v3"),
  deepseek_v32: mlaTraits("deepseek_v32"),
  glm_moe_dsa: mlaTraits("glm_moe_dsa"),
};

/**
 * The MLA families (HF modeling_deepseek_v3, _deepseek_v32, _glm_moe_dsa): `attention_bias`
 * on q_a_proj, kv_a_proj_with_mqa and o_proj, no q/k norm (their attention is
 * config/mla_config.ts), no sliding window, full rotary over the rope part, DeepSeek's noaux_tc MoE.
 */
function mlaTraits(family: MlaFamily): FamilyTraits {
  return {
    qkvBias: attentionBias,
    oProjBias: attentionBias,
    mlpBias: (cfg) => cfg.mlp_bias === true,
    qkNorm: never,
    slidingWindow: "none",
    partialRotaryFactor: 1,
    moe: family,
    mla: family,
    tensorParallel:
      "tensor parallelism of multi-head latent attention (and its MoE layers) is not implemented yet (run this model with --tensor-parallel-size 1)",
  };
}

/** Sliding window in tokens, or null when full attention is used (FamilyTraits.slidingWindow). */
export function parseSlidingWindow(cfg: Json, traits: FamilyTraits): number | null {
  if (traits.slidingWindow === "none") return null;
  if (traits.slidingWindow === "use_sliding_window" && cfg.use_sliding_window !== true) return null;
  const w = cfg.sliding_window;
  if (w === undefined || w === null) return null;
  if (typeof w !== "number" || !Number.isInteger(w) || w < 1)
    throw new ModelConfigError(
      `config.json "sliding_window" must be a positive integer, got ${JSON.stringify(w)}`,
    );
  return w;
}

/**
 * Rotated dims per head: int(headDim * partial_rotary_factor), the factor from
 * `rope_parameters` (newer files) or the top level (older), else the family default.
 * @throws ModelConfigError when the two places disagree or the result is not an even count >= 2.
 */
export function parseRotaryDim(cfg: Json, headDim: number, fallback: number): number {
  const params = (cfg.rope_parameters ?? cfg.rope_scaling ?? {}) as Json;
  const [inRope, top] = [params.partial_rotary_factor, cfg.partial_rotary_factor];
  const given = (v: unknown) => v !== undefined && v !== null;
  if (given(inRope) && given(top) && inRope !== top) {
    throw new ModelConfigError(
      `config.json "partial_rotary_factor" (${JSON.stringify(top)}) contradicts rope_parameters' (${JSON.stringify(inRope)})`,
    );
  }
  const f = given(inRope) ? inRope : given(top) ? top : fallback;
  if (typeof f !== "number" || !(f > 0 && f <= 1))
    throw new ModelConfigError(
      `config.json "partial_rotary_factor" must be in (0, 1], got ${JSON.stringify(f)}`,
    );
  const dim = Math.floor(headDim * f);
  if (dim < 2 || dim % 2 !== 0) {
    throw new ModelConfigError(
      `partial_rotary_factor ${f} of head_dim ${headDim} rotates ${dim} dims; an even number >= 2 is needed`,
    );
  }
  return dim;
}
