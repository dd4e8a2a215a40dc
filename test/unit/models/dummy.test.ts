import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { CpuBackend } from "../../../src/backends/cpu/cpu_backend.js";
import { bf16ToF32 } from "../../../src/backends/cpu/dtype.js";
import { generateFill } from "../../../src/backends/weight_fill.js";
import { loadModelConfig, parseModelConfig } from "../../../src/config/model_config.js";
import {
  DummyWeights,
  dummyFillKeys,
  f32ToBf16Bits,
  f32ToF16Bits,
  fnv1a32,
  inverseNormalCdf,
  llamaWeightSpecs,
} from "../../../src/models/dummy.js";
import { WeightLoader } from "../../../src/models/weight_loader.js";
import { WeightLoadError } from "../../../src/models/weights.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const refSmall = loadModelConfig(join(ROOT, "models/ref-small"));
const numel = (shape: number[]) => shape.reduce((a, b) => a * b, 1);

/** A tiny config of a given family for shape checks. */
function tiny(arch: string, extra: Record<string, unknown> = {}) {
  return parseModelConfig({
    architectures: [arch],
    hidden_size: 32,
    intermediate_size: 48,
    num_hidden_layers: 1,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 16,
    vocab_size: 50,
    ...extra,
  });
}

describe("llamaWeightSpecs: names and shapes per family", () => {
  it("counts the published parameter totals of the benchmark configs", () => {
    // Published sizes: Llama 3.1 8B 8.03B, Qwen2.5 7B 7.62B, Qwen3 8B 8.19B, Mistral 7B v0.3 7.25B.
    const totals: Record<string, [number, number]> = {
      "llama-3.1-8b": [291, 8030261248],
      "qwen2.5-7b": [339, 7615616512],
      "qwen3-8b": [399, 8190735360],
      "mistral-7b": [291, 7248023552],
    };
    for (const [name, [tensors, params]] of Object.entries(totals)) {
      const specs = llamaWeightSpecs(loadModelConfig(join(ROOT, "configs", name)));
      assert.equal(specs.length, tensors, name);
      assert.equal(
        specs.reduce((a, s) => a + numel(s.shape), 0),
        params,
        name,
      );
    }
  });

  it("Llama: tied embeddings drop lm_head; untied keep it", () => {
    const tied = llamaWeightSpecs(tiny("LlamaForCausalLM", { tie_word_embeddings: true })).map((s) => s.name);
    assert.equal(tied.includes("lm_head.weight"), false);
    const untied = llamaWeightSpecs(tiny("LlamaForCausalLM"));
    assert.deepEqual(untied.at(-1), { name: "lm_head.weight", shape: [50, 32], kind: "matrix" });
  });

  it("Qwen2: q/k/v biases only; Qwen3: per-head q/k norms; Llama mlp_bias adds MLP biases", () => {
    const qwen2 = llamaWeightSpecs(tiny("Qwen2ForCausalLM")).filter((s) => s.kind === "bias");
    assert.deepEqual(qwen2, [
      { name: "model.layers.0.self_attn.q_proj.bias", shape: [64], kind: "bias" },
      { name: "model.layers.0.self_attn.k_proj.bias", shape: [32], kind: "bias" },
      { name: "model.layers.0.self_attn.v_proj.bias", shape: [32], kind: "bias" },
    ]);
    const qwen3 = llamaWeightSpecs(tiny("Qwen3ForCausalLM")).filter((s) => s.name.includes("_norm."));
    assert.deepEqual(qwen3, [
      { name: "model.layers.0.self_attn.q_norm.weight", shape: [16], kind: "norm" },
      { name: "model.layers.0.self_attn.k_norm.weight", shape: [16], kind: "norm" },
    ]);
    const mlp = llamaWeightSpecs(tiny("LlamaForCausalLM", { mlp_bias: true, attention_bias: true }))
      .filter((s) => s.kind === "bias")
      .map((s) => `${s.name.replace("model.layers.0.", "")}[${s.shape}]`);
    assert.deepEqual(mlp, [
      "self_attn.q_proj.bias[64]",
      "self_attn.k_proj.bias[32]",
      "self_attn.v_proj.bias[32]",
      "self_attn.o_proj.bias[32]",
      "mlp.gate_proj.bias[48]",
      "mlp.up_proj.bias[48]",
      "mlp.down_proj.bias[32]",
    ]);
  });
});

describe("DummyWeights: seeded, lazy, reproducible values", () => {
  it("pins the first values of seed 0 (bf16, f16, f32) so any change to the generator is caught", () => {
    const bf = new DummyWeights(refSmall, { seed: 0 }).get("model.embed_tokens.weight");
    assert.equal(bf.dtype, "bf16");
    assert.deepEqual(bf.shape, [16384, 256]);
    assert.deepEqual(Array.from(bf.data.subarray(0, 4)), [48021, 15686, 48262, 48313]);
    const f16 = new DummyWeights(refSmall, { seed: 0, dtype: "f16" }).get("model.embed_tokens.weight");
    assert.deepEqual(Array.from(f16.data.subarray(0, 4)), [40101, 10802, 42029, 42437]);
    const f32 = new DummyWeights(refSmall, { seed: 0, dtype: "f32" }).get(
      "model.layers.3.mlp.down_proj.weight",
    );
    assert.deepEqual(Array.from(f32.data.subarray(0, 2)), [-0.014158602803945541, 0.009657171554863453]);
    const big = new DummyWeights(refSmall, { seed: 1234567890123 }).get("model.embed_tokens.weight");
    assert.deepEqual(Array.from(big.data.subarray(0, 4)), [15187, 48212, 48372, 15551]);
    assert.deepEqual(dummyFillKeys(0, "model.embed_tokens.weight"), [2932583643, 1310801304]);
    assert.deepEqual(dummyFillKeys(-1, "x"), [4003101797, 1032040604]);
  });

  it("locate() hands out the rule get() computes: a backend that runs it gets the same bits", () => {
    const w = new DummyWeights(refSmall, { seed: 5 });
    for (const name of ["model.embed_tokens.weight", "model.layers.1.input_layernorm.weight"]) {
      const loc = w.locate(name);
      assert.ok(loc !== undefined && loc.kind === "generated");
      const host = w.get(name);
      assert.deepEqual(loc.shape, host.shape);
      const again = new Uint16Array(host.data.length);
      generateFill(loc.fill, 0, again.length, again);
      assert.deepEqual(again, host.data);
    }
    assert.equal(w.locate("lm_head.weight"), undefined); // tied: no such tensor
  });

  it("a fused weight's row ranges equal its parts (q/k/v, gate/up through WeightLoader on the CPU backend)", () => {
    const w = new DummyWeights(refSmall, { seed: 11 });
    const be = new CpuBackend({ numThreads: 1 });
    const loader = new WeightLoader(w, be);
    const p = "model.layers.2";
    const parts = ["q", "k", "v"].map((x) => `${p}.self_attn.${x}_proj.weight`);
    const shapes = parts.map((n) => w.get(n).shape);
    const qkv = loader.uploadCat(parts, shapes);
    const gateUp = loader.uploadCat(
      [`${p}.mlp.gate_proj.weight`, `${p}.mlp.up_proj.weight`],
      [
        [768, 256],
        [768, 256],
      ],
    );
    loader.finish();
    const expect = (names: string[]) =>
      Float32Array.from(names.flatMap((n) => Array.from(bf16ToF32(w.get(n).data as Uint16Array))));
    assert.deepEqual(be.toHost(qkv), expect(parts));
    assert.deepEqual(be.toHost(gateUp), expect([`${p}.mlp.gate_proj.weight`, `${p}.mlp.up_proj.weight`]));
    be.dispose();
  });

  it("neighbouring elements and different tensors are uncorrelated", () => {
    const w = new DummyWeights(refSmall, { seed: 0, dtype: "f32" });
    const a = w.get("model.embed_tokens.weight").data; // 4,194,304 values
    const b = w.get("model.layers.0.mlp.gate_proj.weight").data; // 196,608 values
    const corr = (x: ArrayLike<number>, y: ArrayLike<number>, n: number, lag = 0) => {
      let sxy = 0;
      let sxx = 0;
      let syy = 0;
      for (let i = 0; i < n; i++) {
        sxy += x[i]! * y[i + lag]!;
        sxx += x[i]! * x[i]!;
        syy += y[i + lag]! * y[i + lag]!;
      }
      return sxy / Math.sqrt(sxx * syy);
    };
    // Standard error of a correlation over n samples is 1/sqrt(n): 0.0005 and 0.0023 here.
    for (const lag of [1, 2, 256]) assert.ok(Math.abs(corr(a, a, a.length - lag, lag)) < 0.003, `lag ${lag}`);
    assert.ok(Math.abs(corr(a, b, b.length)) < 0.012, "embed vs gate_proj");
  });

  it("any subset is reproducible: values depend only on (seed, name), not on call order", () => {
    const a = new DummyWeights(refSmall, { seed: 7 });
    const b = new DummyWeights(refSmall, { seed: 7 });
    const name = "model.layers.2.self_attn.v_proj.weight";
    const first = a.get(name).data;
    for (const n of b.names) if (n !== name) b.get(n);
    assert.deepEqual(b.get(name).data, first);
    assert.deepEqual(a.get(name).data, first); // a second call regenerates the same values
    assert.notDeepEqual(new DummyWeights(refSmall, { seed: 8 }).get(name).data, first);
    assert.notDeepEqual(
      a.get("model.layers.2.self_attn.k_proj.weight").data.subarray(0, 64),
      first.subarray(0, 64),
    );
  });

  it("matrices are normal(0, 0.02), norms are exactly 1.0, biases normal(0, 0.01)", () => {
    const w = new DummyWeights(refSmall, { seed: 0, dtype: "f32" });
    const emb = w.get("model.embed_tokens.weight").data; // 4,194,304 values
    let sum = 0;
    let sq = 0;
    let beyond2Sigma = 0;
    for (const v of emb) {
      sum += v;
      sq += v * v;
      if (Math.abs(v) > 0.04) beyond2Sigma++;
    }
    const mean = sum / emb.length;
    const std = Math.sqrt(sq / emb.length - mean * mean);
    assert.ok(Math.abs(mean) < 2e-5, `mean ${mean}`);
    assert.ok(Math.abs(std - 0.02) < 0.02 * 0.002, `std ${std}`);
    // P(|z| > 2) = 4.55%.
    assert.ok(Math.abs(beyond2Sigma / emb.length - 0.0455) < 0.0005, `tail ${beyond2Sigma / emb.length}`);
    assert.ok(w.get("model.norm.weight").data.every((v) => v === 1));
    const bfNorm = new DummyWeights(refSmall, { seed: 0 }).get("model.layers.0.input_layernorm.weight").data;
    assert.ok(bfNorm.every((v) => v === 0x3f80)); // bf16 1.0
    const qwen = new DummyWeights(
      tiny("Qwen2ForCausalLM", { hidden_size: 4096, num_attention_heads: 32, head_dim: 128 }),
      {
        seed: 0,
        dtype: "f32",
      },
    );
    const bias = qwen.get("model.layers.0.self_attn.q_proj.bias").data;
    assert.equal(bias.length, 4096);
    const biasStd = Math.sqrt(Array.from(bias).reduce((a, v) => a + v * v, 0) / bias.length);
    assert.ok(Math.abs(biasStd - 0.01) < 0.0005, `bias std ${biasStd}`);
  });

  it("rejects unknown names and non-integer seeds", () => {
    const w = new DummyWeights(refSmall, { seed: 0 });
    assert.equal(w.has("lm_head.weight"), false); // tied
    assert.throws(
      () => w.get("lm_head.weight"),
      (e: unknown) => e instanceof WeightLoadError,
    );
    assert.throws(
      () => new DummyWeights(refSmall, { seed: 0.5 }),
      (e: unknown) =>
        e instanceof WeightLoadError && e.message === "dummy weights need an integer seed, got 0.5",
    );
  });
});

describe("numeric helpers", () => {
  it("f32ToF16Bits and f32ToBf16Bits round to nearest even like numpy (incl. subnormals, overflow)", () => {
    const xs = [0.02, 1.0, 3.8e-7, 65519, 65520, -3e-8, 6.1e-5, -0.0, 1e-3, 2.98e-8, 5.96e-8, 8.9e-8];
    // numpy: np.array(xs, np.float32).astype(np.float16).view(np.uint16)
    assert.deepEqual(xs.map(f32ToF16Bits), [9503, 15360, 6, 31743, 31744, 32769, 1023, 32768, 5145, 0, 1, 1]);
    // (u + 0x7fff + ((u >> 16) & 1)) >> 16 over the fp32 bits
    assert.deepEqual(
      xs.map(f32ToBf16Bits),
      [15524, 16256, 13516, 18304, 18304, 45825, 14464, 32768, 14979, 13056, 13184, 13247],
    );
    assert.equal(f32ToF16Bits(Number.NaN), 0x7e00);
    assert.equal(f32ToBf16Bits(Number.NaN), 0x7fc0);
  });

  it("inverseNormalCdf matches scipy.stats.norm.ppf to 1e-8", () => {
    const cases: [number, number][] = [
      [0.975, 1.959963984540054],
      [0.001, -3.090232306167813],
      [0.5, 0],
      [0.5 / 65536, -4.324919040826045],
    ];
    for (const [p, x] of cases) assert.ok(Math.abs(inverseNormalCdf(p) - x) < 1e-8, `p=${p}`);
  });

  it("fnv1a32 of known strings", () => {
    assert.equal(fnv1a32(""), 0x811c9dc5);
    assert.equal(fnv1a32("a"), 0xe40c292c);
  });
});
