/**
 * Loading MoE checkpoints (models/moe_mlp.ts loadExperts through loadModel): the per-expert
 * tensors `save_pretrained` writes and the packed `experts.gate_up_proj` / `down_proj` form of
 * transformers 5.x give the same packed weights bit for bit; a missing expert, a misshapen
 * expert, a misshapen packed tensor and a backend without MoE ops are one-sentence errors;
 * `--load-format dummy` lists every tensor of the MoE families and counts every expert.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import type { BackendMoeOps, HostTensorData } from "../../../src/backends/backend.js";
import { loadModelConfig, ModelConfigError, parseModelConfig } from "../../../src/config/model_config.js";
import { countParameters } from "../../../src/config/parameter_count.js";
import { DummyWeights, llamaWeightSpecs } from "../../../src/models/dummy.js";
import { loadModel } from "../../../src/models/registry.js";
import { WeightLoadError } from "../../../src/models/weights.js";
import { writeMoeCheckpoint } from "../../helpers/moe_checkpoint.js";
import { TINY_GLM4_MOE_CONFIG, TINY_QWEN3_MOE_CONFIG } from "../../helpers/tiny_model.js";
import { HostBackend } from "./helpers.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const tmp = mkdtempSync(join(tmpdir(), "hisparse-moe-load-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** A loader-test backend that declares MoE ops (loading never calls them). */
class MoeHostBackend extends HostBackend {
  readonly moe = {} as BackendMoeOps;
}

const load = (dir: string, backend = new MoeHostBackend()) =>
  loadModel({ modelDir: dir, backend, loadFormat: "auto", seed: 0, maxModelLen: 64 });

/** The weights uploaded by loading `dir`, by shape key "AxBxC" in upload order. */
function uploads(dir: string): HostTensorData[] {
  const b = new MoeHostBackend();
  load(dir, b);
  return b.weights.map((w) => ({ data: w.data as Uint16Array, dtype: "bf16", shape: [...w.shape] }));
}

/** Stacks per-expert tensors into the packed form, in place. */
function pack(t: Map<string, HostTensorData>, l: number, E: number): void {
  const p = `model.layers.${l}.mlp.experts`;
  const cat = (names: string[], shape: number[]): HostTensorData => {
    const parts = names.map((n) => t.get(n)!);
    const data = new Uint16Array(parts.reduce((a, x) => a + x.data.length, 0));
    let off = 0;
    for (const x of parts) {
      data.set(x.data as Uint16Array, off);
      off += x.data.length;
    }
    for (const n of names) t.delete(n);
    return { data, dtype: "bf16", shape };
  };
  const [I, H] = t.get(`${p}.0.gate_proj.weight`)!.shape as [number, number];
  const gateUp = Array.from({ length: E }, (_, e) => [
    `${p}.${e}.gate_proj.weight`,
    `${p}.${e}.up_proj.weight`,
  ]);
  t.set(`${p}.gate_up_proj`, cat(gateUp.flat(), [E, 2 * I, H]));
  t.set(
    `${p}.down_proj`,
    cat(
      Array.from({ length: E }, (_, e) => `${p}.${e}.down_proj.weight`),
      [E, H, I],
    ),
  );
}

describe("MoE checkpoints", () => {
  it("per-expert and packed expert tensors load to the same packed weights, bit for bit", () => {
    const perExpert = writeMoeCheckpoint(join(tmp, "per-expert"), TINY_GLM4_MOE_CONFIG, { seed: 5 });
    const packed = writeMoeCheckpoint(join(tmp, "packed"), TINY_GLM4_MOE_CONFIG, {
      seed: 5,
      edit: (t) => {
        pack(t, 1, 8);
        pack(t, 2, 8);
      },
    });
    const a = uploads(perExpert);
    const b = uploads(packed);
    assert.deepEqual(
      a.map((t) => t.shape),
      b.map((t) => t.shape),
    );
    for (const [i, t] of a.entries()) assert.deepEqual(t.data, b[i]!.data, `upload ${i} [${t.shape}]`);
    // The packed expert weights: [E, 2I, H] and [E, H, I] per MoE layer.
    assert.ok(a.some((t) => t.shape.join("x") === "8x64x64"));
    assert.ok(a.some((t) => t.shape.join("x") === "8x64x32"));
  });

  it("a missing expert, a misshapen expert or a misshapen packed tensor: WeightLoadError naming the tensor", () => {
    const missing = writeMoeCheckpoint(join(tmp, "missing"), TINY_QWEN3_MOE_CONFIG, {
      edit: (t) => t.delete("model.layers.2.mlp.experts.5.up_proj.weight"),
    });
    assert.throws(() => load(missing), {
      name: "WeightLoadError",
      message: "checkpoint has no tensor model.layers.2.mlp.experts.5.up_proj.weight",
    });
    const misshapen = writeMoeCheckpoint(join(tmp, "misshapen"), TINY_QWEN3_MOE_CONFIG, {
      edit: (t) => {
        const name = "model.layers.0.mlp.experts.3.down_proj.weight";
        t.set(name, { data: new Uint16Array(64 * 33), dtype: "bf16", shape: [64, 33] });
      },
    });
    assert.throws(() => load(misshapen), {
      name: "WeightLoadError",
      message: "tensor model.layers.0.mlp.experts.3.down_proj.weight has shape [64,33], expected [64,32]",
    });
    const packedBad = writeMoeCheckpoint(join(tmp, "packed-bad"), TINY_QWEN3_MOE_CONFIG, {
      edit: (t) => {
        pack(t, 0, 8);
        t.set("model.layers.0.mlp.experts.gate_up_proj", {
          data: new Uint16Array(7 * 64 * 64),
          dtype: "bf16",
          shape: [7, 64, 64],
        });
      },
    });
    assert.throws(() => load(packedBad), {
      name: "WeightLoadError",
      message: "tensor model.layers.0.mlp.experts.gate_up_proj has shape [7,64,64], expected [8,64,64]",
    });
    assert.throws(
      () => load(missing),
      (e) => e instanceof WeightLoadError,
    );
  });

  it("a backend without MoE ops refuses MoE models before uploading anything", () => {
    const dir = writeMoeCheckpoint(join(tmp, "nomoe"), TINY_QWEN3_MOE_CONFIG);
    const plain = new HostBackend();
    assert.throws(
      () => load(dir, plain as MoeHostBackend),
      (e) =>
        e instanceof ModelConfigError &&
        e.message ===
          "the cpu backend cannot run mixture-of-experts models (Qwen3MoeForCausalLM) yet; use --device cpu",
    );
    assert.equal(plain.weights.length, 0);
  });
});

describe("dummy weights of MoE families", () => {
  it("Qwen3-30B-A3B: every expert is listed (packed), and the specs add up to countParameters", () => {
    const c = loadModelConfig(join(ROOT, "configs/qwen3-30b-a3b"));
    const specs = llamaWeightSpecs(c);
    const numel = specs.reduce((a, s) => a + s.shape.reduce((x, y) => x * y, 1), 0);
    assert.equal(numel, countParameters(c));
    const l0 = specs.filter((s) => s.name.startsWith("model.layers.0.mlp."));
    assert.deepEqual(
      l0.map((s) => [s.name, s.shape, s.kind]),
      [
        ["model.layers.0.mlp.gate.weight", [128, 2048], "matrix"],
        ["model.layers.0.mlp.experts.gate_up_proj", [128, 1536, 2048], "matrix"],
        ["model.layers.0.mlp.experts.down_proj", [128, 2048, 768], "matrix"],
      ],
    );
  });

  it("GLM-style: a dense first layer, router bias, shared experts; the model loads from dummy weights", () => {
    const c = parseModelConfig(TINY_GLM4_MOE_CONFIG);
    const names = llamaWeightSpecs(c).map((s) => s.name);
    assert.ok(names.includes("model.layers.0.mlp.gate_proj.weight"));
    assert.ok(!names.includes("model.layers.0.mlp.gate.weight"));
    for (const n of [
      "model.layers.1.mlp.gate.e_score_correction_bias",
      "model.layers.1.mlp.shared_experts.down_proj.weight",
      "model.layers.2.mlp.experts.gate_up_proj",
      "model.layers.1.self_attn.q_proj.bias",
      "model.layers.1.self_attn.q_norm.weight",
    ])
      assert.ok(names.includes(n), n);
    assert.ok(!names.includes("model.layers.1.self_attn.o_proj.bias"));
    const specs = llamaWeightSpecs(c);
    assert.equal(
      specs.reduce((a, s) => a + s.shape.reduce((x, y) => x * y, 1), 0),
      countParameters(c),
    );
    const dummy = new DummyWeights(c, { seed: 1, dtype: "f32" });
    assert.deepEqual(dummy.get("model.layers.1.mlp.gate.e_score_correction_bias").shape, [8]);
  });
});
