/**
 * MLA / DSA configs (config/mla_config.ts through parseModelConfig): the tiny transformers 5.17
 * configs of ../shared/models (DeepSeek-V3, V3.2, GLM-5 keys), the full-size GLM-5 and
 * DeepSeek-V3.2 class defaults (configs/), YaRN's attention-scale factor, the KV geometry of the
 * latent and indexer groups, parameter counts, and one-sentence errors for a missing,
 * malformed or contradictory key.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { indexerSourceLayer, mlaKvCacheGeometry } from "../../../src/config/mla_config.js";
import {
  loadModelConfig,
  ModelConfigError,
  mlpKindOf,
  parseModelConfig,
} from "../../../src/config/model_config.js";
import { countActiveParameters, countParameters } from "../../../src/config/parameter_count.js";
import { modelKVCacheGroups } from "../../../src/core/kv/kv_cache_interface.js";
import { bytesPerToken } from "../../../src/core/kv/kv_memory.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));

/** The tiny-glm5-dsa config.json of ../shared/models (transformers 5.17 keys). */
function glm5(extra: Record<string, unknown> = {}): Record<string, unknown> {
  const L = 4;
  return {
    architectures: ["GlmMoeDsaForCausalLM"],
    attention_bias: false,
    first_k_dense_replace: 1,
    head_dim: 16,
    hidden_act: "silu",
    hidden_size: 128,
    index_head_dim: 32,
    index_n_heads: 4,
    index_topk: 32,
    indexer_types: Array(L).fill("full"),
    intermediate_size: 256,
    kv_lora_rank: 64,
    layer_types: Array(L).fill("deepseek_sparse_attention"),
    max_position_embeddings: 4096,
    mlp_layer_types: ["dense", "sparse", "sparse", "sparse"],
    moe_intermediate_size: 64,
    n_group: 1,
    n_routed_experts: 8,
    n_shared_experts: 1,
    norm_topk_prob: true,
    num_attention_heads: 4,
    num_experts_per_tok: 2,
    num_hidden_layers: L,
    num_key_value_heads: 4,
    q_lora_rank: 96,
    qk_head_dim: 48,
    qk_nope_head_dim: 32,
    qk_rope_head_dim: 16,
    rms_norm_eps: 1e-5,
    rope_parameters: { rope_theta: 10000.0, rope_type: "default" },
    routed_scaling_factor: 2.5,
    tie_word_embeddings: false,
    topk_group: 1,
    v_head_dim: 32,
    vocab_size: 16384,
    ...extra,
  };
}

/** DeepSeek-V3 keys (no indexer): the GLM-5 config without its DSA keys. */
function dsv3(extra: Record<string, unknown> = {}): Record<string, unknown> {
  const { index_head_dim, index_n_heads, index_topk, indexer_types, layer_types, mlp_layer_types, ...rest } =
    glm5();
  return { ...rest, architectures: ["DeepseekV3ForCausalLM"], rope_interleave: true, ...extra };
}

function errorOf(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof ModelConfigError, `expected a ModelConfigError, got ${e}`);
    return e.message;
  }
  assert.fail("expected an error");
}

describe("MLA configs", () => {
  it("GLM-5 (tiny): MLA dims, interleaved RoPE in attention and indexer, indexer keys, MoE layers", () => {
    const c = parseModelConfig(glm5());
    assert.equal(c.family, "glm_moe_dsa");
    assert.equal(c.headDim, 16, "head_dim is qk_rope_head_dim, as HF sets it");
    assert.deepEqual(c.mla, {
      qLoraRank: 96,
      kvLoraRank: 64,
      qkNopeHeadDim: 32,
      qkRopeHeadDim: 16,
      vHeadDim: 32,
      ropeInterleave: true,
      softmaxScale: 48 ** -0.5,
      indexer: {
        topk: 32,
        headDim: 32,
        numHeads: 4,
        ropeInterleave: true,
        layerTypes: Array(4).fill("full"),
      },
    });
    assert.deepEqual(c.moe?.moeLayers, [1, 2, 3]);
    assert.equal(mlpKindOf(c.moe, 0), "dense");
  });

  it("DeepSeek-V3.2: half-split indexer RoPE, every layer full; DeepSeek-V3: no indexer, rope_interleave read", () => {
    const v32 = parseModelConfig({
      ...glm5({ indexer_types: undefined }),
      architectures: ["DeepseekV32ForCausalLM"],
    });
    assert.equal(v32.mla?.indexer?.ropeInterleave, false);
    assert.equal(v32.mla?.ropeInterleave, true);
    assert.deepEqual(v32.mla?.indexer?.layerTypes, Array(4).fill("full"));
    const v3 = parseModelConfig(dsv3());
    assert.equal(v3.mla?.indexer, null);
    assert.equal(parseModelConfig(dsv3({ rope_interleave: false })).mla?.ropeInterleave, false);
    const noLora = parseModelConfig(dsv3({ q_lora_rank: null }));
    assert.equal(noLora.mla?.qLoraRank, null);
  });

  it("YaRN: DeepSeek-V3's rope_scaling gives the mscale^2 softmax correction and a unit cos/sin factor", () => {
    const yarn = {
      type: "yarn",
      factor: 40,
      original_max_position_embeddings: 4096,
      beta_fast: 32,
      beta_slow: 1,
      mscale: 1.0,
      mscale_all_dim: 1.0,
    };
    const c = parseModelConfig(dsv3({ rope_parameters: undefined, rope_scaling: yarn, rope_theta: 10000 }));
    const m = 0.1 * Math.log(40) + 1;
    assert.ok(Math.abs(c.mla!.softmaxScale - 48 ** -0.5 * m * m) < 1e-15);
    assert.equal(c.rope.type, "yarn");
    assert.deepEqual(c.rope.yarn, {
      betaFast: 32,
      betaSlow: 1,
      mscale: 1,
      mscaleAllDim: 1,
      attentionFactor: null,
      truncate: true,
    });
  });

  it("shared indexer layers use the nearest full layer before them", () => {
    const c = parseModelConfig(glm5({ indexer_types: ["full", "shared", "shared", "full"] }));
    const ix = c.mla!.indexer!;
    assert.deepEqual(
      [0, 1, 2, 3].map((l) => indexerSourceLayer(ix, l)),
      [0, 0, 0, 3],
    );
    const g = mlaKvCacheGeometry(c.mla!, 4);
    assert.deepEqual(g.indexer?.layers, [0, 3], "only full layers keep indexer keys");
    assert.equal(bytesPerToken(modelKVCacheGroups(c, { elementBytes: 2 })), 4 * 80 * 2 + 2 * 32 * 2);
  });

  it("GLM-5 and DeepSeek-V3.2 full-size configs: KV geometry and parameter counts", () => {
    const glm = loadModelConfig(join(ROOT, "configs/glm-5"));
    const g = mlaKvCacheGeometry(glm.mla!, glm.numHiddenLayers);
    assert.deepEqual([g.latent.rowElements, g.latent.layers.length], [576, 78]);
    assert.deepEqual([g.indexer!.rowElements, g.indexer!.layers.length], [128, 78]);
    assert.equal(bytesPerToken(modelKVCacheGroups(glm, { elementBytes: 2 })), 78 * 1152 + 78 * 256);
    // GLM-5: 744 B parameters, ~40 B active (zai-org/GLM-5 model card); here without the MTP layer.
    assert.equal(Math.round(countParameters(glm) / 1e9), 744);
    assert.equal(Math.round(countActiveParameters(glm) / 1e9), 42);
    const ds = loadModelConfig(join(ROOT, "configs/deepseek-v3.2"));
    assert.equal(bytesPerToken(modelKVCacheGroups(ds, { elementBytes: 2 })), 61 * 1152 + 61 * 256);
    // DeepSeek-V3.2: 671 B main-model parameters (685 B with the 14 B MTP module).
    assert.equal(Math.round(countParameters(ds) / 1e9), 672);
    assert.equal(ds.mla?.indexer?.numHeads, 64);
    assert.deepEqual(ds.moe?.routing.numGroups, 8);
  });
});

describe("MLA configs: errors are one sentence naming the key", () => {
  const cases: [string, Record<string, unknown>, string][] = [
    [
      "missing kv_lora_rank",
      glm5({ kv_lora_rank: undefined }),
      'config.json is missing "kv_lora_rank", which multi-head latent attention needs',
    ],
    [
      "missing q_lora_rank",
      dsv3({ q_lora_rank: undefined }),
      'config.json is missing "q_lora_rank" (null when the model has no query LoRA), which multi-head latent attention needs',
    ],
    [
      "null q_lora_rank with an indexer",
      glm5({ q_lora_rank: null }),
      'config.json "q_lora_rank" is null, but the DSA indexer of glm_moe_dsa reads its query from the q-LoRA output',
    ],
    [
      "missing index_topk",
      glm5({ index_topk: undefined }),
      'config.json is missing "index_topk", which the DSA lightning indexer needs',
    ],
    [
      "odd rope dim",
      glm5({ qk_rope_head_dim: 15 }),
      'config.json "qk_rope_head_dim" must be even (RoPE rotates pairs), got 15',
    ],
    [
      "indexer narrower than its rope part",
      glm5({ index_head_dim: 8 }),
      'config.json "index_head_dim" (8) is smaller than "qk_rope_head_dim" (16), the indexer\'s rotary part',
    ],
    [
      "indexer_types of the wrong length",
      glm5({ indexer_types: ["full", "shared"] }),
      'config.json "indexer_types" must list "full" or "shared" for each of the 4 layers, got ["full","shared"]',
    ],
    [
      "indexer_types starting with shared",
      glm5({ indexer_types: ["shared", "full", "full", "full"] }),
      'config.json "indexer_types" starts with "shared", but a shared layer reuses the top-k of a full layer before it',
    ],
    [
      "indexer_types on DeepSeek-V3.2",
      { ...glm5(), architectures: ["DeepseekV32ForCausalLM"] },
      'config.json "indexer_types" is a GLM-5 key; DeepSeek-V3.2 runs the indexer on every layer',
    ],
    [
      "another attention layer type",
      glm5({ layer_types: ["full_attention", "full_attention", "full_attention", "full_attention"] }),
      'config.json "layer_types" must be "deepseek_sparse_attention" for each of the 4 layers, got ["full_attention","full_attention","full_attention","full_attention"]',
    ],
    [
      "mlp_layer_types against first_k_dense_replace",
      glm5({ first_k_dense_replace: 2 }),
      'config.json "mlp_layer_types" ["dense","sparse","sparse","sparse"] contradicts "first_k_dense_replace" (2)',
    ],
    [
      "rope_interleave not a boolean",
      dsv3({ rope_interleave: "yes" }),
      'config.json "rope_interleave" must be true or false, got "yes"',
    ],
    [
      "yarn without its pretrained length",
      dsv3({ rope_parameters: { rope_type: "yarn", rope_theta: 10000, factor: 40 } }),
      'RoPE scaling type "yarn" needs "original_max_position_embeddings" in config.json',
    ],
  ];
  for (const [what, cfg, message] of cases) {
    it(what, () =>
      assert.equal(
        errorOf(() => parseModelConfig(cfg)),
        message,
      ),
    );
  }
});
