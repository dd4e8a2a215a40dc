/**
 * YaRN RoPE on the GQA path (Llama family, Qwen3, Qwen3-MoE): configs/qwen3-30b-a3b-128k (Qwen's
 * published 128K setting) parses to YaRN with HF's defaults, its inverse frequencies and cos/sin
 * multiplier match a direct float64 transcription of HF transformers 5.17
 * `_compute_yarn_parameters` (modeling_rope_utils.py) within fp32 rounding, the max model length
 * is derived as vLLM derives it (original_max_position_embeddings x factor), and an unsupported
 * rope type still fails with one sentence. HF itself is compared on the GPU machine
 * (scripts/gpu/yarn_parity.py).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import {
  derivedMaxModelLen,
  loadModelConfig,
  ModelConfigError,
  parseModelConfig,
  type RopeConfig,
} from "../../../src/config/model_config.js";
import { resolveMaxModelLen } from "../../../src/models/registry.js";
import { buildCosSinCache, computeInvFreq, ropeAttentionFactor } from "../../../src/models/rope.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const DIR_128K = join(ROOT, "configs/qwen3-30b-a3b-128k");

/**
 * HF 5.17 `_compute_yarn_parameters` written out in float64: [dim / 2] inverse frequencies and
 * the attention factor, for the keys a GQA model's rope_scaling carries.
 */
function hfYarn(
  dim: number,
  base: number,
  factor: number,
  origMax: number,
  betaFast = 32,
  betaSlow = 1,
): { inv: number[]; attention: number } {
  const corr = (rot: number) => (dim * Math.log(origMax / (rot * 2 * Math.PI))) / (2 * Math.log(base));
  const low = Math.max(Math.floor(corr(betaFast)), 0);
  let high = Math.min(Math.ceil(corr(betaSlow)), dim - 1);
  if (low === high) high += 0.001;
  const inv: number[] = [];
  for (let i = 0; i < dim / 2; i++) {
    const posFreq = base ** ((2 * i) / dim);
    const extraFactor = 1 - Math.min(1, Math.max(0, (i - low) / (high - low)));
    inv.push((1 / (factor * posFreq)) * (1 - extraFactor) + (1 / posFreq) * extraFactor);
  }
  return { inv, attention: factor <= 1 ? 1 : 0.1 * Math.log(factor) + 1 };
}

function closeRel(a: number, b: number, rel: number, what: string): void {
  assert.ok(Math.abs(a - b) <= rel * Math.abs(b), `${what}: ${a} vs ${b}`);
}

describe("YaRN RoPE for GQA models", () => {
  it("reads Qwen3-30B-A3B's published 128K setting with HF's defaults", () => {
    const c = loadModelConfig(DIR_128K);
    assert.equal(c.family, "qwen3_moe");
    assert.equal(c.maxPositionEmbeddings, 40960);
    assert.deepEqual(
      { ...c.rope },
      {
        type: "yarn",
        theta: 1000000,
        factor: 4,
        lowFreqFactor: 1,
        highFreqFactor: 4,
        originalMaxPositionEmbeddings: 32768,
        yarn: {
          betaFast: 32,
          betaSlow: 1,
          mscale: 0,
          mscaleAllDim: 0,
          attentionFactor: null,
          truncate: true,
        },
      },
    );
  });

  it("matches HF's inv_freq blend and attention factor (Qwen3 128K, Llama-style 64-dim heads)", () => {
    const c = loadModelConfig(DIR_128K);
    const cases: Array<[RopeConfig, number]> = [
      [c.rope, c.headDim],
      [{ ...c.rope, theta: 10000, factor: 8, originalMaxPositionEmbeddings: 4096 }, 64],
      [{ ...c.rope, factor: 2, yarn: { ...c.rope.yarn!, betaFast: 16, betaSlow: 2 } }, c.headDim],
    ];
    for (const [rope, dim] of cases) {
      const y = rope.yarn!;
      const want = hfYarn(
        dim,
        rope.theta,
        rope.factor,
        rope.originalMaxPositionEmbeddings,
        y.betaFast,
        y.betaSlow,
      );
      const got = computeInvFreq(rope, dim);
      assert.equal(got.length, dim / 2);
      for (let i = 0; i < dim / 2; i++)
        closeRel(got[i]!, want.inv[i]!, 2e-6, `inv_freq[${i}] (factor ${rope.factor})`);
      closeRel(ropeAttentionFactor(rope), want.attention, 1e-12, "attention factor");
    }
    // The blend does something: the fastest dims keep their frequency, the slowest are / factor.
    const inv = computeInvFreq(c.rope, 128);
    const plain = computeInvFreq({ ...c.rope, type: "default" }, 128);
    assert.equal(inv[0], plain[0]);
    closeRel(inv[63]!, plain[63]! / 4, 1e-6, "slowest dim");
    closeRel(ropeAttentionFactor(c.rope), 0.1 * Math.log(4) + 1, 1e-15, "mscale(4)");
  });

  it("multiplies the cos/sin table by the attention factor at long positions", () => {
    const c = loadModelConfig(DIR_128K);
    const inv = computeInvFreq(c.rope, 128);
    const s = ropeAttentionFactor(c.rope);
    const table = buildCosSinCache(inv, 131072, s);
    for (const p of [0, 1, 40960, 131071]) {
      for (const i of [0, 17, 40, 63]) {
        const angle = Math.fround(p * inv[i]!);
        closeRel(table[p * 128 + i]!, Math.cos(angle) * s, 1e-6, `cos p=${p} i=${i}`);
        assert.ok(Math.abs(table[p * 128 + 64 + i]! - Math.sin(angle) * s) <= 1e-6, `sin p=${p} i=${i}`);
      }
    }
  });

  it("derives max_model_len as vLLM does: original_max_position_embeddings x factor", () => {
    const c = loadModelConfig(DIR_128K);
    assert.equal(derivedMaxModelLen(c), 131072);
    assert.equal(resolveMaxModelLen(c, undefined), 131072);
    assert.equal(resolveMaxModelLen(c, 100000), 100000);
    assert.throws(
      () => resolveMaxModelLen(c, 131073),
      new ModelConfigError(
        "--max-model-len 131073 exceeds the model's YaRN length (original_max_position_embeddings x factor) (131072)",
      ),
    );
    const plain = loadModelConfig(join(ROOT, "configs/qwen3-30b-a3b"));
    assert.equal(derivedMaxModelLen(plain), 40960);
    assert.equal(resolveMaxModelLen(plain, undefined), 40960);
  });

  it("still refuses an unsupported rope type with one sentence", () => {
    const c = loadModelConfig(DIR_128K);
    const raw = {
      architectures: ["Qwen3MoeForCausalLM"],
      hidden_size: 64,
      intermediate_size: 128,
      moe_intermediate_size: 32,
      num_experts: 4,
      num_experts_per_tok: 2,
      num_hidden_layers: 1,
      num_attention_heads: 2,
      num_key_value_heads: 1,
      head_dim: 32,
      vocab_size: 100,
      max_position_embeddings: 40960,
      rope_theta: c.rope.theta,
      rope_scaling: { rope_type: "longrope", factor: 4, original_max_position_embeddings: 32768 },
    };
    assert.throws(
      () => parseModelConfig(raw),
      new ModelConfigError(
        'RoPE scaling type "longrope" is not supported (supported: default, linear, llama3, yarn)',
      ),
    );
    assert.throws(
      () => parseModelConfig({ ...raw, rope_scaling: { rope_type: "yarn", factor: 4 } }),
      new ModelConfigError(
        'RoPE scaling type "yarn" needs "original_max_position_embeddings" in config.json',
      ),
    );
  });
});
