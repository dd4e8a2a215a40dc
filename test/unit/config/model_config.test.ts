import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { loadModelConfig, ModelConfigError, parseModelConfig } from "../../../src/config/model_config.js";
import { modelKVCacheGroups } from "../../../src/core/kv/kv_cache_interface.js";
import { bytesPerToken } from "../../../src/core/kv/kv_memory.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const tmp = mkdtempSync(join(tmpdir(), "hisparse-config-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** A small valid Llama config; tests override fields. */
function llama(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ["LlamaForCausalLM"],
    hidden_size: 64,
    intermediate_size: 128,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    vocab_size: 100,
    max_position_embeddings: 256,
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

describe("parseModelConfig: shapes and families", () => {
  it("reads ref-small (newer rope_parameters form, tied embeddings, generation_config eos)", () => {
    const c = loadModelConfig(join(ROOT, "models/ref-small"));
    assert.deepEqual(c, {
      architecture: "LlamaForCausalLM",
      family: "llama",
      hiddenSize: 256,
      intermediateSize: 768,
      numHiddenLayers: 4,
      numAttentionHeads: 4,
      numKeyValueHeads: 2,
      headDim: 64,
      vocabSize: 16384,
      rmsNormEps: 1e-5,
      maxPositionEmbeddings: 16384,
      tieWordEmbeddings: true,
      attentionBias: false,
      oProjBias: false,
      mlpBias: false,
      qkNorm: false,
      rope: {
        type: "default",
        theta: 100000,
        factor: 1,
        lowFreqFactor: 1,
        highFreqFactor: 4,
        originalMaxPositionEmbeddings: 16384,
      },
      rotaryDim: 64,
      moe: null,
      mla: null,
      dtype: "bfloat16",
      bosTokenId: 0,
      eosTokenIds: [0],
      slidingWindow: null,
    });
  });

  it("reads Llama 3.1 8B: older rope_theta + rope_scaling with llama3 scaling", () => {
    const c = loadModelConfig(join(ROOT, "configs/llama-3.1-8b"));
    assert.equal(c.family, "llama");
    assert.deepEqual(
      [
        c.hiddenSize,
        c.intermediateSize,
        c.numHiddenLayers,
        c.numAttentionHeads,
        c.numKeyValueHeads,
        c.headDim,
      ],
      [4096, 14336, 32, 32, 8, 128],
    );
    assert.deepEqual(c.rope, {
      type: "llama3",
      theta: 500000,
      factor: 8,
      lowFreqFactor: 1,
      highFreqFactor: 4,
      originalMaxPositionEmbeddings: 8192,
    });
    assert.equal(c.maxPositionEmbeddings, 131072);
    assert.equal(c.vocabSize, 128256);
    assert.equal(c.tieWordEmbeddings, false);
    assert.deepEqual(c.eosTokenIds, [128001]);
    // 2 (K,V) × 32 layers × 8 kv heads × 128 × 2 bytes = 128 KiB per token.
    assert.equal(bytesPerToken(modelKVCacheGroups(c, { elementBytes: 2 })), 131072);
  });

  it("gives the same RoPE for the newer rope_parameters form of llama3 scaling", () => {
    const c = parseModelConfig(
      llama({
        rope_parameters: {
          rope_type: "llama3",
          rope_theta: 500000,
          factor: 8,
          low_freq_factor: 1,
          high_freq_factor: 4,
          original_max_position_embeddings: 8192,
        },
      }),
    );
    assert.deepEqual(c.rope, loadModelConfig(join(ROOT, "configs/llama-3.1-8b")).rope);
  });

  it("reads top-level rope_theta with rope_scaling null, the old 'type' key, and the theta default", () => {
    assert.deepEqual(parseModelConfig(llama({ rope_theta: 1e6, rope_scaling: null })).rope, {
      type: "default",
      theta: 1e6,
      factor: 1,
      lowFreqFactor: 1,
      highFreqFactor: 4,
      originalMaxPositionEmbeddings: 256,
    });
    const linear = parseModelConfig(
      llama({ rope_theta: 5000, rope_scaling: { type: "linear", factor: 2 } }),
    ).rope;
    assert.equal(linear.type, "linear");
    assert.equal(linear.theta, 5000);
    assert.equal(linear.factor, 2);
    assert.equal(parseModelConfig(llama()).rope.theta, 10000);
  });

  it("Qwen2.5 7B: q/k/v bias without o_proj bias; declared but unused sliding window", () => {
    const c = loadModelConfig(join(ROOT, "configs/qwen2.5-7b"));
    assert.equal(c.family, "qwen2");
    assert.equal(c.attentionBias, true);
    assert.equal(c.oProjBias, false);
    assert.equal(c.qkNorm, false);
    assert.equal(c.headDim, 128); // 3584 / 28, no head_dim field
    assert.equal(c.slidingWindow, null);
    assert.equal(c.rope.theta, 1e6);
    assert.equal(c.rmsNormEps, 1e-6);
  });

  it("Qwen3 8B: q/k norm and an explicit head_dim", () => {
    const c = loadModelConfig(join(ROOT, "configs/qwen3-8b"));
    assert.equal(c.family, "qwen3");
    assert.equal(c.qkNorm, true);
    assert.equal(c.headDim, 128);
    assert.equal(c.attentionBias, false);
    assert.equal(c.oProjBias, false);
    assert.equal(c.maxPositionEmbeddings, 40960);
    assert.equal(c.numHiddenLayers, 36);
  });

  it("Qwen3 with attention_bias sets both q/k/v and o_proj biases", () => {
    const c = parseModelConfig(llama({ architectures: ["Qwen3ForCausalLM"], attention_bias: true }));
    assert.deepEqual([c.attentionBias, c.oProjBias, c.qkNorm], [true, true, true]);
  });

  it("Mistral: v0.3 has no sliding window; a v0.1-style sliding_window is reported", () => {
    const v3 = loadModelConfig(join(ROOT, "configs/mistral-7b"));
    assert.equal(v3.family, "mistral");
    assert.equal(v3.slidingWindow, null);
    assert.equal(v3.vocabSize, 32768);
    const v1 = parseModelConfig(llama({ architectures: ["MistralForCausalLM"], sliding_window: 4096 }));
    assert.equal(v1.slidingWindow, 4096);
    const qwenOn = parseModelConfig(
      llama({ architectures: ["Qwen2ForCausalLM"], sliding_window: 4096, use_sliding_window: true }),
    );
    assert.equal(qwenOn.slidingWindow, 4096);
  });

  it("merges eos ids of config.json and generation_config.json without duplicates", () => {
    const c = parseModelConfig(llama({ eos_token_id: 7 }), { eos_token_id: [9, 7, 8] });
    assert.deepEqual(c.eosTokenIds, [7, 9, 8]);
  });
});

describe("parseModelConfig: errors are one sentence naming the problem", () => {
  it("unsupported architecture, also for inherited object keys", () => {
    assert.equal(
      errorOf(() => parseModelConfig(llama({ architectures: ["GPT2LMHeadModel"] }))),
      "architecture GPT2LMHeadModel is not supported (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, Glm4MoeForCausalLM, DeepseekV3ForCausalLM, DeepseekV32ForCausalLM, GlmMoeDsaForCausalLM)",
    );
    assert.match(
      errorOf(() => parseModelConfig(llama({ architectures: ["toString"] }))),
      /architecture toString/,
    );
    assert.equal(
      errorOf(() => parseModelConfig(llama({ architectures: [] }))),
      'config.json has no "architectures" entry',
    );
  });

  it("unsupported dtype", () => {
    assert.equal(
      errorOf(() => parseModelConfig(llama({ torch_dtype: "float8_e4m3fn" }))),
      'checkpoint dtype "float8_e4m3fn" is not supported (supported: float32, bfloat16, float16)',
    );
  });

  it("unsupported RoPE type and missing llama3 fields", () => {
    assert.equal(
      errorOf(() => parseModelConfig(llama({ rope_scaling: { rope_type: "dynamic", factor: 4 } }))),
      'RoPE scaling type "dynamic" is not supported (supported: default, linear, llama3, yarn)',
    );
    assert.equal(
      errorOf(() => parseModelConfig(llama({ rope_scaling: { rope_type: "llama3", factor: 8 } }))),
      'RoPE scaling type "llama3" needs "low_freq_factor" in config.json',
    );
    assert.equal(
      errorOf(() => parseModelConfig(llama({ rope_scaling: { type: "linear" } }))),
      'RoPE scaling type "linear" needs "factor" in config.json',
    );
  });

  it("missing or malformed sizes, activation and head layout", () => {
    const noHidden = llama();
    delete noHidden.hidden_size;
    assert.equal(
      errorOf(() => parseModelConfig(noHidden)),
      'config.json is missing "hidden_size"',
    );
    assert.equal(
      errorOf(() => parseModelConfig(llama({ num_hidden_layers: 2.5 }))),
      'config.json "num_hidden_layers" must be a positive integer, got 2.5',
    );
    assert.equal(
      errorOf(() => parseModelConfig(llama({ hidden_act: "gelu" }))),
      'activation "gelu" is not supported (supported: silu)',
    );
    assert.equal(
      errorOf(() => parseModelConfig(llama({ num_key_value_heads: 3 }))),
      "head layout is not supported: 4 heads, 3 kv heads, head_dim 16",
    );
  });

  it("loadModelConfig: missing directory and corrupt JSON", () => {
    const missing = join(tmp, "nope");
    assert.equal(
      errorOf(() => loadModelConfig(missing)),
      `no config.json in model directory ${missing}`,
    );
    writeFileSync(join(tmp, "config.json"), '{"architectures": ["LlamaForCausalLM"],');
    assert.match(
      errorOf(() => loadModelConfig(tmp)),
      new RegExp(`^${join(tmp, "config.json").replaceAll("/", "\\/")} is not valid JSON \\(`),
    );
    writeFileSync(join(tmp, "config.json"), "[1, 2]");
    assert.equal(
      errorOf(() => loadModelConfig(tmp)),
      `${join(tmp, "config.json")} must hold a JSON object`,
    );
  });
});
