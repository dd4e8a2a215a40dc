import { ModelConfigError } from "./model_config_error.js";

/**
 * Mixture-of-experts settings of an HF `config.json`, read per family with HF transformers 5.17's
 * semantics and defaults (models/qwen3_moe/configuration_qwen3_moe.py,
 * models/glm4_moe/configuration_glm4_moe.py, models/deepseek_v3/configuration_deepseek_v3.py).
 * A missing key that fixes a tensor shape, or a contradiction between keys, is a
 * `ModelConfigError` of one sentence naming the key.
 */

/**
 * How a MoE layer's router turns its logits into experts and weights (the `Backend.moe.route`
 * contract, backends/backend.ts). Two rules cover the supported families:
 * - softmax top-k (Qwen3-MoE, `Qwen3MoeTopKRouter`): p = softmax(logits); the k largest p;
 *   optionally renormalised to sum 1;
 * - DeepSeek-V3's "noaux_tc" (also GLM-4.5 `Glm4MoeTopkRouter`): s = sigmoid(logits); selection
 *   scores s + e_score_correction_bias; experts limited to the `topkGroup` best of `numGroups`
 *   groups (a group's score is the sum of its two best selection scores); weights are the
 *   selected s (without the bias), renormalised when `renormalize`, times `routedScalingFactor`.
 */
export interface MoeRoutingRule {
  scoring: "softmax" | "sigmoid";
  /** Experts per token (`num_experts_per_tok`). */
  topK: number;
  /** Divide the k weights by their sum (`norm_topk_prob`). */
  renormalize: boolean;
  /** Expert groups (`n_group`); 1 = no group limit. Divides the number of experts. */
  numGroups: number;
  /** Groups a token may pick experts from (`topk_group`); <= numGroups. */
  topkGroup: number;
  /** Factor on the final weights (`routed_scaling_factor`; 1 for Qwen3-MoE). */
  routedScalingFactor: number;
  /** Whether the router has `e_score_correction_bias` [numExperts] (noaux_tc). */
  correctionBias: boolean;
}

/** The MoE part of a ModelConfig. */
export interface MoeConfig {
  /** Routed experts per MoE layer (`num_experts` / `num_local_experts` / `n_routed_experts`). */
  numExperts: number;
  /** Intermediate size of one routed expert (`moe_intermediate_size`). */
  moeIntermediateSize: number;
  /**
   * Shared experts (`n_shared_experts`, 0 for Qwen3-MoE): one dense SiLU MLP of intermediate
   * size `moeIntermediateSize * numSharedExperts`, added to every token's routed output.
   */
  numSharedExperts: number;
  /** Layer indices whose MLP is the MoE block, ascending; the others use the dense MLP. */
  moeLayers: number[];
  routing: MoeRoutingRule;
}

/** The MLP kind of one decoder layer. */
export type MlpKind = "dense" | "moe";

/** Families whose config has MoE keys; see {@link parseMoeConfig}. */
export type MoeFamily = "qwen3_moe" | "glm4_moe" | "deepseek_v3" | "deepseek_v32" | "glm_moe_dsa";

/**
 * HF's class defaults of the optional noaux_tc keys (Glm4MoeConfig, DeepseekV3Config,
 * DeepseekV32Config, GlmMoeDsaConfig in transformers 5.17), used when a config.json leaves one out.
 */
const NOAUX_DEFAULTS = {
  glm4_moe: { firstKDense: 1, nGroup: 1, topkGroup: 1, scaling: 1.0 },
  deepseek_v3: { firstKDense: 3, nGroup: 8, topkGroup: 4, scaling: 2.5 },
  deepseek_v32: { firstKDense: 3, nGroup: 8, topkGroup: 4, scaling: 2.5 },
  glm_moe_dsa: { firstKDense: 3, nGroup: 1, topkGroup: 1, scaling: 2.5 },
} as const;

type Json = Record<string, unknown>;

/** A non-negative integer key, or `fallback` when absent; `required` keys throw when absent. */
function int(cfg: Json, key: string, opts: { fallback?: number; min: number }): number {
  const v = cfg[key];
  if (v === undefined || v === null) {
    if (opts.fallback !== undefined) return opts.fallback;
    throw new ModelConfigError(`config.json is missing "${key}", which a mixture-of-experts model needs`);
  }
  if (typeof v !== "number" || !Number.isInteger(v) || v < opts.min) {
    throw new ModelConfigError(
      `config.json "${key}" must be an integer >= ${opts.min}, got ${JSON.stringify(v)}`,
    );
  }
  return v;
}

function bool(cfg: Json, key: string, fallback: boolean): boolean {
  const v = cfg[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== "boolean")
    throw new ModelConfigError(`config.json "${key}" must be true or false, got ${JSON.stringify(v)}`);
  return v;
}

function positive(cfg: Json, key: string, fallback: number): number {
  const v = cfg[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== "number" || !Number.isFinite(v) || v <= 0)
    throw new ModelConfigError(`config.json "${key}" must be a positive number, got ${JSON.stringify(v)}`);
  return v;
}

/**
 * One value under two names (e.g. transformers 5 saves `num_local_experts` where older files
 * have `num_experts`): either may be given; both must then agree.
 */
function aliased(cfg: Json, keys: [string, string]): number {
  const [a, b] = keys;
  const has = (k: string) => cfg[k] !== undefined && cfg[k] !== null;
  if (has(a) && has(b) && cfg[a] !== cfg[b]) {
    throw new ModelConfigError(
      `config.json "${a}" (${JSON.stringify(cfg[a])}) and "${b}" (${JSON.stringify(cfg[b])}) contradict each other`,
    );
  }
  return int(cfg, has(a) ? a : has(b) ? b : a, { min: 1 });
}

/**
 * Refuses DeepSeek-V3-style keys whose other values select a routing rule hisparse does not
 * implement (the original checkpoints carry them; HF's class ignores them).
 */
function checkNoauxKeys(cfg: Json): void {
  const expect: Record<string, unknown> = {
    topk_method: "noaux_tc",
    scoring_func: "sigmoid",
    moe_layer_freq: 1,
  };
  for (const [key, want] of Object.entries(expect)) {
    const v = cfg[key];
    if (v !== undefined && v !== null && v !== want) {
      throw new ModelConfigError(
        `config.json "${key}" ${JSON.stringify(v)} is not supported (supported: ${JSON.stringify(want)})`,
      );
    }
  }
}

/** Qwen3-MoE: HF Qwen3MoeDecoderLayer's rule for which layers are sparse. */
function qwen3MoeLayers(cfg: Json, numLayers: number): number[] {
  const step = int(cfg, "decoder_sparse_step", { fallback: 1, min: 1 });
  const only = cfg.mlp_only_layers ?? [];
  if (!Array.isArray(only) || !only.every((l) => Number.isInteger(l) && l >= 0 && l < numLayers)) {
    throw new ModelConfigError(
      `config.json "mlp_only_layers" must list layer indices in [0, ${numLayers}), got ${JSON.stringify(only)}`,
    );
  }
  const dense = new Set(only as number[]);
  const out: number[] = [];
  for (let l = 0; l < numLayers; l++) if (!dense.has(l) && (l + 1) % step === 0) out.push(l);
  return out;
}

/** GLM-4.5 / DeepSeek-V3: layers from `first_k_dense_replace` on are MoE. */
function firstKDenseLayers(cfg: Json, numLayers: number, fallback: number): number[] {
  const k = int(cfg, "first_k_dense_replace", { fallback, min: 0 });
  if (k > numLayers) {
    throw new ModelConfigError(
      `config.json "first_k_dense_replace" (${k}) exceeds "num_hidden_layers" (${numLayers})`,
    );
  }
  return Array.from({ length: numLayers - k }, (_, i) => k + i);
}

/**
 * DeepSeek-V3.2 / GLM-5 `mlp_layer_types` ("dense" | "sparse" per layer), which HF derives from
 * `first_k_dense_replace` when absent: null when absent, else the MoE ("sparse") layers.
 * @throws ModelConfigError for a malformed list, or one that contradicts `first_k_dense_replace`.
 */
function mlpLayerTypes(cfg: Json, numLayers: number): number[] | null {
  const v = cfg.mlp_layer_types;
  if (v === undefined || v === null) return null;
  if (!Array.isArray(v) || v.length !== numLayers || !v.every((t) => t === "dense" || t === "sparse"))
    throw new ModelConfigError(
      `config.json "mlp_layer_types" must list "dense" or "sparse" for each of the ${numLayers} layers, got ${JSON.stringify(v)}`,
    );
  const k = cfg.first_k_dense_replace;
  if (typeof k === "number" && v.some((t, l) => (t === "dense") !== l < k))
    throw new ModelConfigError(
      `config.json "mlp_layer_types" ${JSON.stringify(v)} contradicts "first_k_dense_replace" (${k})`,
    );
  return v.flatMap((t, l) => (t === "sparse" ? [l] : []));
}

/**
 * Checks the routing rule against the expert count.
 * @throws ModelConfigError naming the key when the rule cannot select `topK` experts.
 */
function checkRouting(r: MoeRoutingRule, numExperts: number): void {
  if (r.topK > numExperts) {
    throw new ModelConfigError(
      `config.json "num_experts_per_tok" (${r.topK}) exceeds the number of experts (${numExperts})`,
    );
  }
  if (numExperts % r.numGroups !== 0) {
    throw new ModelConfigError(
      `config.json "n_group" (${r.numGroups}) does not divide the ${numExperts} experts`,
    );
  }
  if (r.topkGroup > r.numGroups) {
    throw new ModelConfigError(
      `config.json "topk_group" (${r.topkGroup}) exceeds "n_group" (${r.numGroups})`,
    );
  }
  const perGroup = numExperts / r.numGroups;
  if (r.numGroups > 1 && perGroup < 2) {
    throw new ModelConfigError(
      `config.json "n_group" (${r.numGroups}) leaves fewer than 2 experts per group, which group scoring needs`,
    );
  }
  if (r.topK > r.topkGroup * perGroup) {
    throw new ModelConfigError(
      `config.json "num_experts_per_tok" (${r.topK}) exceeds the ${r.topkGroup * perGroup} experts of "topk_group" (${r.topkGroup}) groups`,
    );
  }
}

/**
 * Reads the MoE keys of a config of `family` with `numLayers` decoder layers.
 * - qwen3_moe: `num_experts` (or `num_local_experts`), `num_experts_per_tok`,
 *   `moe_intermediate_size` required; `decoder_sparse_step` (1), `mlp_only_layers` ([]),
 *   `norm_topk_prob` (false) as HF's defaults; softmax routing, no shared expert.
 * - glm4_moe / deepseek_v3: `n_routed_experts` (or `num_local_experts`), `num_experts_per_tok`,
 *   `moe_intermediate_size` required; `n_shared_experts` (1), `norm_topk_prob` (true) and
 *   `first_k_dense_replace`, `n_group`, `topk_group`, `routed_scaling_factor` defaulted as HF's
 *   classes do (GLM 1, 1, 1, 1.0; DeepSeek-V3 3, 8, 4, 2.5); noaux_tc routing with the
 *   correction bias. `topk_method`, `scoring_func`, `moe_layer_freq` must be absent or
 *   "noaux_tc", "sigmoid", 1.
 * - deepseek_v32 / glm_moe_dsa: as deepseek_v3 (defaults 3, 8, 4, 2.5 and 3, 1, 1, 2.5), and
 *   `mlp_layer_types` ("dense" / "sparse" per layer), when given, names the MoE layers.
 * @throws ModelConfigError for a missing, malformed, unsupported or contradictory key.
 */
export function parseMoeConfig(cfg: Json, family: MoeFamily, numLayers: number): MoeConfig {
  if (family === "qwen3_moe") {
    const numExperts = aliased(cfg, ["num_experts", "num_local_experts"]);
    const routing: MoeRoutingRule = {
      scoring: "softmax",
      topK: int(cfg, "num_experts_per_tok", { min: 1 }),
      renormalize: bool(cfg, "norm_topk_prob", false),
      numGroups: 1,
      topkGroup: 1,
      routedScalingFactor: 1,
      correctionBias: false,
    };
    checkRouting(routing, numExperts);
    return {
      numExperts,
      moeIntermediateSize: int(cfg, "moe_intermediate_size", { min: 1 }),
      numSharedExperts: 0,
      moeLayers: qwen3MoeLayers(cfg, numLayers),
      routing,
    };
  }
  checkNoauxKeys(cfg);
  const d = NOAUX_DEFAULTS[family];
  const numExperts = aliased(cfg, ["n_routed_experts", "num_local_experts"]);
  const routing: MoeRoutingRule = {
    scoring: "sigmoid",
    topK: int(cfg, "num_experts_per_tok", { min: 1 }),
    renormalize: bool(cfg, "norm_topk_prob", true),
    numGroups: int(cfg, "n_group", { fallback: d.nGroup, min: 1 }),
    topkGroup: int(cfg, "topk_group", { fallback: d.topkGroup, min: 1 }),
    routedScalingFactor: positive(cfg, "routed_scaling_factor", d.scaling),
    correctionBias: true,
  };
  checkRouting(routing, numExperts);
  return {
    numExperts,
    moeIntermediateSize: int(cfg, "moe_intermediate_size", { min: 1 }),
    numSharedExperts: int(cfg, "n_shared_experts", { fallback: 1, min: 0 }),
    moeLayers: mlpLayerTypes(cfg, numLayers) ?? firstKDenseLayers(cfg, numLayers, d.firstKDense),
    routing,
  };
}

/** The MLP kind of layer `l` (dense when the model has no MoE config). */
export function mlpKindOf(moe: MoeConfig | null | undefined, l: number): MlpKind {
  return moe?.moeLayers.includes(l) === true ? "moe" : "dense";
}
