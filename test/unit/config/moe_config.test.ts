/**
 * Mixture-of-experts configs (config/moe_config.ts through parseModelConfig): Qwen3-30B-A3B's
 * published config (configs/qwen3-30b-a3b), the tiny transformers 5.17 configs of
 * ../shared/models (num_local_experts, rope_parameters.partial_rotary_factor), GLM-4.5 and
 * DeepSeek-V3 router keys, the per-layer MLP kinds, parameter counts, and one-sentence errors
 * for a missing, contradictory or unsupported key.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import {
  loadModelConfig,
  ModelConfigError,
  mlpKindOf,
  parseModelConfig,
} from "../../../src/config/model_config.js";
import { parseMoeConfig } from "../../../src/config/moe_config.js";
import { countActiveParameters, countParameters } from "../../../src/config/parameter_count.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));

/** The tiny-qwen3-moe config.json of ../shared/models (transformers 5.17 keys). */
function qwen3Moe(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ["Qwen3MoeForCausalLM"],
    decoder_sparse_step: 1,
    head_dim: 32,
    hidden_act: "silu",
    hidden_size: 128,
    intermediate_size: 256,
    max_position_embeddings: 4096,
    mlp_only_layers: [],
    moe_intermediate_size: 64,
    norm_topk_prob: true,
    num_attention_heads: 4,
    num_experts_per_tok: 2,
    num_hidden_layers: 4,
    num_key_value_heads: 2,
    num_local_experts: 8,
    rms_norm_eps: 1e-5,
    rope_parameters: { rope_theta: 10000.0, rope_type: "default" },
    tie_word_embeddings: false,
    use_sliding_window: false,
    vocab_size: 16384,
    ...extra,
  };
}

/** The tiny-glm4-moe config.json of ../shared/models. */
function glm4Moe(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ["Glm4MoeForCausalLM"],
    attention_bias: true,
    first_k_dense_replace: 1,
    head_dim: 32,
    hidden_act: "silu",
    hidden_size: 128,
    intermediate_size: 256,
    max_position_embeddings: 4096,
    moe_intermediate_size: 64,
    n_group: 1,
    n_routed_experts: 8,
    n_shared_experts: 1,
    norm_topk_prob: true,
    num_attention_heads: 4,
    num_experts_per_tok: 2,
    num_hidden_layers: 4,
    num_key_value_heads: 2,
    partial_rotary_factor: 0.5,
    rms_norm_eps: 1e-5,
    rope_parameters: { partial_rotary_factor: 0.5, rope_theta: 10000.0, rope_type: "default" },
    routed_scaling_factor: 1.0,
    tie_word_embeddings: false,
    topk_group: 1,
    use_qk_norm: true,
    vocab_size: 16384,
    ...extra,
  };
}

function errorOf(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof ModelConfigError, `expected ModelConfigError, got ${e}`);
    return e.message;
  }
  assert.fail("expected a ModelConfigError");
}

describe("MoE configs", () => {
  it("Qwen3-30B-A3B: 128 experts, top-8 renormalised softmax, every layer MoE; 30.5 B parameters, 3.3 B active", () => {
    const c = loadModelConfig(join(ROOT, "configs/qwen3-30b-a3b"));
    assert.equal(c.family, "qwen3_moe");
    assert.equal(c.qkNorm, true);
    assert.equal(c.rotaryDim, 128);
    assert.deepEqual(c.moe, {
      numExperts: 128,
      moeIntermediateSize: 768,
      numSharedExperts: 0,
      moeLayers: Array.from({ length: 48 }, (_, l) => l),
      routing: {
        scoring: "softmax",
        topK: 8,
        renormalize: true,
        numGroups: 1,
        topkGroup: 1,
        routedScalingFactor: 1,
        correctionBias: false,
      },
    });
    // Qwen's model card: 30.5 B in total, 3.3 B activated.
    assert.equal(countParameters(c), 30_532_122_624);
    assert.equal(countActiveParameters(c), 3_353_032_704);
  });

  it("tiny-qwen3-moe (transformers 5 num_local_experts); mlp_only_layers and decoder_sparse_step pick dense layers", () => {
    const c = parseModelConfig(qwen3Moe());
    assert.equal(c.moe!.numExperts, 8);
    assert.deepEqual(c.moe!.moeLayers, [0, 1, 2, 3]);
    const mixed = parseModelConfig(qwen3Moe({ mlp_only_layers: [0], decoder_sparse_step: 2 }));
    // HF: MoE iff l not in mlp_only_layers and (l + 1) % step == 0.
    assert.deepEqual(mixed.moe!.moeLayers, [1, 3]);
    assert.deepEqual(
      [0, 1, 2, 3].map((l) => mlpKindOf(mixed.moe, l)),
      ["dense", "moe", "dense", "moe"],
    );
    assert.equal(parseModelConfig(qwen3Moe({ norm_topk_prob: undefined })).moe!.routing.renormalize, false);
  });

  it("tiny-glm4-moe: partial rotary, q/k norm, q/k/v bias without o_proj bias, a dense first layer, noaux_tc routing, a shared expert", () => {
    const c = parseModelConfig(glm4Moe());
    assert.equal(c.family, "glm4_moe");
    assert.deepEqual([c.rotaryDim, c.qkNorm, c.attentionBias, c.oProjBias], [16, true, true, false]);
    assert.deepEqual(c.moe!.moeLayers, [1, 2, 3]);
    assert.equal(c.moe!.numSharedExperts, 1);
    assert.deepEqual(c.moe!.routing, {
      scoring: "sigmoid",
      topK: 2,
      renormalize: true,
      numGroups: 1,
      topkGroup: 1,
      routedScalingFactor: 1,
      correctionBias: true,
    });
    // GLM defaults: half-head rotary, no q/k norm.
    const bare = parseModelConfig(
      glm4Moe({ partial_rotary_factor: undefined, rope_parameters: undefined, use_qk_norm: undefined }),
    );
    assert.deepEqual([bare.rotaryDim, bare.qkNorm], [16, false]);
    const counted = countParameters(c);
    assert.ok(counted > countActiveParameters(c));
  });

  it("DeepSeek-V3: a GQA config under its name is refused naming the MLA key; its router keys read as noaux_tc with HF's defaults", () => {
    assert.equal(
      errorOf(() => parseModelConfig({ ...glm4Moe(), architectures: ["DeepseekV3ForCausalLM"] })),
      'config.json is missing "q_lora_rank" (null when the model has no query LoRA), which multi-head latent attention needs',
    );
    const ds = parseMoeConfig(
      {
        n_routed_experts: 256,
        num_experts_per_tok: 8,
        moe_intermediate_size: 2048,
        topk_method: "noaux_tc",
        scoring_func: "sigmoid",
      },
      "deepseek_v3",
      61,
    );
    assert.deepEqual(ds.routing, {
      scoring: "sigmoid",
      topK: 8,
      renormalize: true,
      numGroups: 8,
      topkGroup: 4,
      routedScalingFactor: 2.5,
      correctionBias: true,
    });
    assert.deepEqual([ds.moeLayers[0], ds.moeLayers.length, ds.numSharedExperts], [3, 58, 1]);
  });
});

describe("MoE configs: errors are one sentence naming the key", () => {
  const cases: [string, Record<string, unknown>, string][] = [
    [
      "missing top-k",
      qwen3Moe({ num_experts_per_tok: undefined }),
      'config.json is missing "num_experts_per_tok", which a mixture-of-experts model needs',
    ],
    [
      "missing expert size",
      glm4Moe({ moe_intermediate_size: undefined }),
      'config.json is missing "moe_intermediate_size", which a mixture-of-experts model needs',
    ],
    [
      "missing expert count",
      qwen3Moe({ num_local_experts: undefined }),
      'config.json is missing "num_experts", which a mixture-of-experts model needs',
    ],
    [
      "contradictory expert counts",
      qwen3Moe({ num_experts: 16 }),
      'config.json "num_experts" (16) and "num_local_experts" (8) contradict each other',
    ],
    [
      "top-k above the experts",
      qwen3Moe({ num_experts_per_tok: 9 }),
      'config.json "num_experts_per_tok" (9) exceeds the number of experts (8)',
    ],
    [
      "n_group not dividing",
      glm4Moe({ n_group: 3 }),
      'config.json "n_group" (3) does not divide the 8 experts',
    ],
    [
      "topk_group above n_group",
      glm4Moe({ n_group: 2, topk_group: 4 }),
      'config.json "topk_group" (4) exceeds "n_group" (2)',
    ],
    [
      "groups too small for k",
      glm4Moe({ n_group: 4, topk_group: 1, num_experts_per_tok: 3 }),
      'config.json "num_experts_per_tok" (3) exceeds the 2 experts of "topk_group" (1) groups',
    ],
    [
      "unknown topk_method",
      glm4Moe({ topk_method: "group_limited_greedy" }),
      'config.json "topk_method" "group_limited_greedy" is not supported (supported: "noaux_tc")',
    ],
    [
      "softmax scoring on a noaux_tc family",
      glm4Moe({ scoring_func: "softmax" }),
      'config.json "scoring_func" "softmax" is not supported (supported: "sigmoid")',
    ],
    [
      "mlp_only_layers out of range",
      qwen3Moe({ mlp_only_layers: [4] }),
      'config.json "mlp_only_layers" must list layer indices in [0, 4), got [4]',
    ],
    [
      "first_k_dense_replace beyond the layers",
      glm4Moe({ first_k_dense_replace: 5 }),
      'config.json "first_k_dense_replace" (5) exceeds "num_hidden_layers" (4)',
    ],
    [
      "norm_topk_prob not a boolean",
      qwen3Moe({ norm_topk_prob: "yes" }),
      'config.json "norm_topk_prob" must be true or false, got "yes"',
    ],
    [
      "contradictory partial rotary",
      glm4Moe({ partial_rotary_factor: 0.25 }),
      'config.json "partial_rotary_factor" (0.25) contradicts rope_parameters\' (0.5)',
    ],
    [
      "partial rotary of an odd dim count",
      glm4Moe({ head_dim: 6, partial_rotary_factor: undefined, rope_parameters: undefined }),
      "partial_rotary_factor 0.5 of head_dim 6 rotates 3 dims; an even number >= 2 is needed",
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
