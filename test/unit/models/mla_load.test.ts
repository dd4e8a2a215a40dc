/**
 * Loading MLA / DSA checkpoints: one sentence for a missing or misshapen tensor (an indexer
 * weight, kv_b_proj), for a backend without MLA ops, and the dummy weight list of each family
 * names exactly the tensors a transformers 5.17 checkpoint holds (packed experts aside).
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import type { Backend, HostTensorData } from "../../../src/backends/backend.js";
import { CpuBackend } from "../../../src/backends/cpu/index.js";
import { loadModelConfig } from "../../../src/config/model_config.js";
import { llamaWeightSpecs } from "../../../src/models/dummy.js";
import { DeepseekV3ForCausalLM } from "../../../src/models/llama.js";
import { SafetensorsCheckpoint } from "../../../src/models/safetensors.js";
import type { WeightSource } from "../../../src/models/weights.js";
import { type RefModel, refModelDir } from "../../helpers/reference.js";

const backend = new CpuBackend({ numThreads: 1 });
after(() => backend.dispose());

/** `src` with some tensors hidden or reshaped. */
function edited(src: WeightSource, hide: string[], reshape: Record<string, number[]> = {}): WeightSource {
  return {
    names: src.names.filter((n) => !hide.includes(n)),
    has: (n) => !hide.includes(n) && src.has(n),
    get: (n): HostTensorData => {
      const t = src.get(n);
      return reshape[n] === undefined ? t : { ...t, shape: reshape[n]! };
    },
    close: () => src.close(),
  };
}

/** The error message of loading `dir` through `wrap` on `b`. */
function loadError(dir: string, wrap: (s: WeightSource) => WeightSource, b: Backend = backend): string {
  const cfg = loadModelConfig(dir);
  const src = wrap(SafetensorsCheckpoint.open(dir));
  try {
    DeepseekV3ForCausalLM.load(cfg, src, b, 64).dispose();
  } catch (e) {
    return (e as Error).message;
  } finally {
    src.close();
  }
  assert.fail("expected the load to fail");
}

const glm = refModelDir("tiny-glm5-dsa");
describe("MLA checkpoints: errors are one sentence naming the tensor", {
  skip: glm === null && "tiny-glm5-dsa not found",
}, () => {
  it("a missing indexer weight", () => {
    const name = "model.layers.2.self_attn.indexer.wq_b.weight";
    assert.equal(
      loadError(glm!, (s) => edited(s, [name])),
      `checkpoint has no tensor ${name}`,
    );
  });
  it("a kv_b_proj of the wrong shape", () => {
    const name = "model.layers.1.self_attn.kv_b_proj.weight";
    assert.equal(
      loadError(glm!, (s) => edited(s, [], { [name]: [128, 128] })),
      `tensor ${name} has shape [128,128], expected [256,64]`,
    );
  });
  it("a backend without MLA ops", () => {
    const noMla = new Proxy(backend, { get: (t, p) => (p === "mla" ? undefined : Reflect.get(t, p)) });
    assert.equal(
      loadError(glm!, (s) => s, noMla),
      "the cpu backend cannot run multi-head latent attention (GlmMoeDsaForCausalLM) yet; use --device cpu",
    );
  });
});

describe("MLA dummy weight lists match the checkpoints", () => {
  for (const name of ["tiny-deepseek-v3", "tiny-deepseek-v32", "tiny-glm5-dsa"] as RefModel[]) {
    const dir = refModelDir(name);
    it(name, { skip: dir === null && `${name} not found` }, () => {
      const cfg = loadModelConfig(dir!);
      const src = SafetensorsCheckpoint.open(dir!);
      // The checkpoints store experts one by one; the dummy list packs them (moe_mlp.ts).
      const perExpert = /\.experts\.\d+\./;
      const ckpt = src.names.filter((n) => !perExpert.test(n)).sort();
      src.close();
      const dummy = llamaWeightSpecs(cfg)
        .map((s) => s.name)
        .filter((n) => !/\.experts\.(gate_up|down)_proj$/.test(n))
        .sort();
      assert.deepEqual(dummy, ckpt);
    });
  }
});
