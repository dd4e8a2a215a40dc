import { ModelConfigError } from "./model_config_error.js";

/**
 * Multi-head latent attention (MLA) and DeepSeek sparse attention (DSA) settings of an HF
 * `config.json`, read with HF transformers 5.17's semantics (models/deepseek_v3,
 * models/deepseek_v32, models/glm_moe_dsa: configuration_*.py and modeling_*.py). A missing key
 * that fixes a tensor shape, a malformed value, or keys that contradict each other are a
 * `ModelConfigError` of one sentence naming the key.
 *
 * The math these settings select (modeling_deepseek_v3.py DeepseekV3Attention,
 * modeling_deepseek_v32.py DeepseekV32Indexer, modular_glm_moe_dsa.py GlmMoeDsaIndexer), per
 * token with x the input_layernorm output:
 *   q      = q_b_proj(rmsNorm_{1e-6}(q_a_proj(x)))   (q_proj(x) when q_lora_rank is null)
 *            per head [qk_nope_head_dim | qk_rope_head_dim]; RoPE on the rope part
 *   c, kpe = kv_a_proj_with_mqa(x) split [kv_lora_rank | qk_rope_head_dim]
 *   latent = [rmsNorm_{1e-6}(c) * kv_a_layernorm, RoPE(kpe)]     (the cached row)
 *   k_nope, v = kv_b_proj(latent[:kv_lora_rank]) per head [qk_nope_head_dim | v_head_dim]
 *   attention over the latent rows, scale {@link MlaConfig.softmaxScale}; o_proj.
 * DSA (DeepSeek-V3.2, GLM-5): the indexer scores every causal position (HF masks the future
 * with -inf before its topk), each query keeps its index_topk best (all of them while fewer
 * exist), and the attention mask is causal AND selected, in prefill as in decode; a "shared"
 * layer (GLM-5 `indexer_types`) reuses the selection of the nearest full layer before it.
 * RoPE of the attention is interleaved (pairs (2i, 2i+1)) in all three families as 5.17 runs
 * them (DeepSeek-V3 `rope_interleave`, true by default; DeepSeek-V3.2 and GLM-5 always); the
 * indexer's is half-split (NeoX) in DeepSeek-V3.2 and interleaved in GLM-5. Both were checked
 * against the transformers 5.17 fixtures of ../shared/fixtures (the other layouts miss by > 1e-2).
 */

/** Whether a DSA layer runs its own indexer ("full") or reuses the previous full layer's top-k. */
export type IndexerType = "full" | "shared";

/** The DSA lightning indexer (DeepseekV32Indexer / GlmMoeDsaIndexer). */
export interface DsaIndexerConfig {
  /** Tokens each query attends to (`index_topk`); all of them when the context is shorter. */
  topk: number;
  /** Width of the indexer's query heads and of its single key (`index_head_dim`). */
  headDim: number;
  /** Query heads of the indexer (`index_n_heads`). */
  numHeads: number;
  /**
   * RoPE layout of the first qk_rope_head_dim dims of the indexer's q and k: interleaved pairs
   * (GLM-5) or half-split NeoX pairs (DeepSeek-V3.2).
   */
  ropeInterleave: boolean;
  /**
   * Per decoder layer (`indexer_types`, GLM-5; all "full" for DeepSeek-V3.2): a "shared" layer
   * has no indexer weights and attends to the top-k of the nearest full layer before it.
   */
  layerTypes: readonly IndexerType[];
}

/** The MLA part of a ModelConfig. */
export interface MlaConfig {
  /** Rank of the query LoRA (`q_lora_rank`); null: one q_proj [Hq * qkHeadDim, H] instead. */
  qLoraRank: number | null;
  /** Rank of the compressed KV, the non-rotary part of the cached latent row (`kv_lora_rank`). */
  kvLoraRank: number;
  /** Per-head query/key dims without RoPE (`qk_nope_head_dim`). */
  qkNopeHeadDim: number;
  /** Per-head query/key dims with RoPE, shared by all heads on the key side (`qk_rope_head_dim`). */
  qkRopeHeadDim: number;
  /** Per-head value dims (`v_head_dim`). */
  vHeadDim: number;
  /** RoPE layout of the attention's rope part: interleaved pairs (true) or half-split (false). */
  ropeInterleave: boolean;
  /**
   * Softmax scale of the attention: (qk_nope_head_dim + qk_rope_head_dim)^-0.5, times mscale^2
   * with mscale = 0.1 * mscale_all_dim * ln(factor) + 1 for YaRN with `mscale_all_dim` and
   * factor > 1 (HF yarn_get_mscale; DeepSeek-V3's attention-scale correction).
   */
  softmaxScale: number;
  /** The DSA indexer (DeepSeek-V3.2, GLM-5), or null for plain MLA (DeepSeek-V3). */
  indexer: DsaIndexerConfig | null;
}

/** Families with MLA attention. */
export type MlaFamily = "deepseek_v3" | "deepseek_v32" | "glm_moe_dsa";

type Json = Record<string, unknown>;

/** HF's only attention layer type of the DSA families (`layer_types`). */
const DSA_LAYER_TYPE = "deepseek_sparse_attention";

const given = (cfg: Json, key: string): boolean => cfg[key] !== undefined && cfg[key] !== null;

/** A required positive integer key of an MLA model. */
function dim(cfg: Json, key: string, what: string): number {
  const v = cfg[key];
  if (v === undefined || v === null)
    throw new ModelConfigError(`config.json is missing "${key}", which ${what} needs`);
  if (typeof v !== "number" || !Number.isInteger(v) || v < 1)
    throw new ModelConfigError(`config.json "${key}" must be a positive integer, got ${JSON.stringify(v)}`);
  return v;
}

/** `q_lora_rank`: must be present; a positive integer or null (no q-LoRA). */
function qLoraRankOf(cfg: Json, family: MlaFamily): number | null {
  if (cfg.q_lora_rank === undefined)
    throw new ModelConfigError(
      'config.json is missing "q_lora_rank" (null when the model has no query LoRA), which multi-head latent attention needs',
    );
  if (cfg.q_lora_rank === null) {
    if (family !== "deepseek_v3")
      throw new ModelConfigError(
        `config.json "q_lora_rank" is null, but the DSA indexer of ${family} reads its query from the q-LoRA output`,
      );
    return null;
  }
  return dim(cfg, "q_lora_rank", "multi-head latent attention");
}

/** Per-layer `indexer_types` (GLM-5); absent: every layer full. */
function indexerTypes(cfg: Json, numLayers: number): IndexerType[] {
  const v = cfg.indexer_types;
  if (v === undefined || v === null) return Array.from({ length: numLayers }, () => "full");
  if (!Array.isArray(v) || v.length !== numLayers || !v.every((t) => t === "full" || t === "shared"))
    throw new ModelConfigError(
      `config.json "indexer_types" must list "full" or "shared" for each of the ${numLayers} layers, got ${JSON.stringify(v)}`,
    );
  if (v[0] === "shared")
    throw new ModelConfigError(
      'config.json "indexer_types" starts with "shared", but a shared layer reuses the top-k of a full layer before it',
    );
  return v as IndexerType[];
}

/**
 * `layer_types` of the DSA families: absent, or every layer "deepseek_sparse_attention".
 * @throws ModelConfigError for another attention type or a wrong length.
 */
function checkLayerTypes(cfg: Json, numLayers: number): void {
  const v = cfg.layer_types;
  if (v === undefined || v === null) return;
  if (!Array.isArray(v) || v.length !== numLayers || !v.every((t) => t === DSA_LAYER_TYPE))
    throw new ModelConfigError(
      `config.json "layer_types" must be "${DSA_LAYER_TYPE}" for each of the ${numLayers} layers, got ${JSON.stringify(v)}`,
    );
}

/** The DSA indexer keys of DeepSeek-V3.2 and GLM-5. */
function parseIndexer(cfg: Json, family: MlaFamily, numLayers: number, ropeDim: number): DsaIndexerConfig {
  const what = "the DSA lightning indexer";
  const headDim = dim(cfg, "index_head_dim", what);
  if (headDim < ropeDim)
    throw new ModelConfigError(
      `config.json "index_head_dim" (${headDim}) is smaller than "qk_rope_head_dim" (${ropeDim}), the indexer's rotary part`,
    );
  checkLayerTypes(cfg, numLayers);
  if (family === "deepseek_v32" && given(cfg, "indexer_types"))
    throw new ModelConfigError(
      'config.json "indexer_types" is a GLM-5 key; DeepSeek-V3.2 runs the indexer on every layer',
    );
  return {
    topk: dim(cfg, "index_topk", what),
    headDim,
    numHeads: dim(cfg, "index_n_heads", what),
    ropeInterleave: family === "glm_moe_dsa",
    layerTypes: indexerTypes(cfg, numLayers),
  };
}

/** HF yarn_get_mscale: 0.1 * mscale * ln(scale) + 1 for scale > 1, else 1. */
export function yarnGetMscale(scale: number, mscale: number): number {
  return scale <= 1 ? 1 : 0.1 * mscale * Math.log(scale) + 1;
}

/** The RoPE settings the softmax scale depends on (model_config.ts RopeConfig has them). */
export interface MlaRopeScaling {
  type: string;
  factor: number;
  /** YaRN `mscale_all_dim` (0 or absent: no correction). */
  mscaleAllDim?: number;
}

/**
 * Reads the MLA (and, for DeepSeek-V3.2 / GLM-5, DSA indexer) keys of a config of `family`.
 * Required: `q_lora_rank` (null allowed for DeepSeek-V3 only), `kv_lora_rank`,
 * `qk_nope_head_dim`, `qk_rope_head_dim` (even), `v_head_dim`; for the DSA families
 * `index_topk`, `index_head_dim` (>= qk_rope_head_dim), `index_n_heads`. Optional:
 * `rope_interleave` (DeepSeek-V3 only, default true), `indexer_types` (GLM-5), `layer_types`.
 * `head_dim` and `qk_head_dim` are derived keys HF recomputes (head_dim = qk_rope_head_dim), so
 * their values are ignored, as HF does.
 * @throws ModelConfigError for a missing, malformed or contradictory key.
 */
export function parseMlaConfig(
  cfg: Json,
  family: MlaFamily,
  numLayers: number,
  rope: MlaRopeScaling,
): MlaConfig {
  const what = "multi-head latent attention";
  const qLoraRank = qLoraRankOf(cfg, family);
  const kvLoraRank = dim(cfg, "kv_lora_rank", what);
  const qkNopeHeadDim = dim(cfg, "qk_nope_head_dim", what);
  const qkRopeHeadDim = dim(cfg, "qk_rope_head_dim", what);
  if (qkRopeHeadDim % 2 !== 0)
    throw new ModelConfigError(
      `config.json "qk_rope_head_dim" must be even (RoPE rotates pairs), got ${qkRopeHeadDim}`,
    );
  const vHeadDim = dim(cfg, "v_head_dim", what);
  let ropeInterleave = true;
  if (family === "deepseek_v3" && given(cfg, "rope_interleave")) {
    if (typeof cfg.rope_interleave !== "boolean")
      throw new ModelConfigError(
        `config.json "rope_interleave" must be true or false, got ${JSON.stringify(cfg.rope_interleave)}`,
      );
    ropeInterleave = cfg.rope_interleave;
  }
  let softmaxScale = (qkNopeHeadDim + qkRopeHeadDim) ** -0.5;
  if (rope.type !== "default" && rope.mscaleAllDim) {
    const m = yarnGetMscale(rope.factor, rope.mscaleAllDim);
    softmaxScale *= m * m;
  }
  const indexer = family === "deepseek_v3" ? null : parseIndexer(cfg, family, numLayers, qkRopeHeadDim);
  return {
    qLoraRank,
    kvLoraRank,
    qkNopeHeadDim,
    qkRopeHeadDim,
    vHeadDim,
    ropeInterleave,
    softmaxScale,
    indexer,
  };
}

/** Full layer whose top-k a layer uses: itself when "full", else the nearest full layer before it. */
export function indexerSourceLayer(indexer: DsaIndexerConfig, l: number): number {
  let s = l;
  while (s > 0 && indexer.layerTypes[s] === "shared") s--;
  return s;
}

/** One paged KV group of an MLA model: its row and its layers (bytes: core/kv modelKVCacheGroups). */
export interface MlaKvGroup {
  /** Elements of one token's row in one layer. */
  rowElements: number;
  /** Decoder layers that hold this group, ascending. */
  layers: number[];
}

/** The KV layout of an MLA model: the latent group and, for DSA models, the indexer group. */
export interface MlaKvGeometry {
  /**
   * One latent row per token and layer: kv_lora_rank (after kv_a_layernorm) then
   * qk_rope_head_dim (after RoPE); every layer; the same on every tensor-parallel rank.
   * Device tensor per layer: [numBlocks, blockSize, kvLoraRank + qkRopeHeadDim].
   */
  latent: MlaKvGroup;
  /**
   * One indexer key row (index_head_dim, after its LayerNorm and RoPE) per token and "full"
   * layer; null for plain MLA. Device tensor per full layer: [numBlocks, blockSize, indexHeadDim].
   * Both groups are indexed by the same block ids (one block table per request).
   */
  indexer: MlaKvGroup | null;
}

/**
 * The KV layout of an MLA model: which rows each layer stores. Bytes are not computed here: the
 * one KV memory formula (core/kv/kv_cache_interface.ts modelKVCacheGroups, kv_memory.ts) turns
 * this layout into MLAAttentionSpec / IndexerKeySpec groups for a dtype. Pure.
 * Example, GLM-5 (configs/glm-5): latent 576 elements × 78 layers; indexer 128 elements × 78 full
 * layers (109,824 B per token in bf16).
 */
export function mlaKvCacheGeometry(mla: MlaConfig, numLayers: number): MlaKvGeometry {
  const all = Array.from({ length: numLayers }, (_, l) => l);
  const latent = { rowElements: mla.kvLoraRank + mla.qkRopeHeadDim, layers: all };
  const ix = mla.indexer;
  if (ix === null) return { latent, indexer: null };
  return {
    latent,
    indexer: { rowElements: ix.headDim, layers: all.filter((l) => ix.layerTypes[l] === "full") },
  };
}
