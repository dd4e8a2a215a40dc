import assert from "node:assert/strict";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { loadModelConfig, ModelConfigError } from "../../../src/config/model_config.js";
import { DecoderForCausalLM } from "../../../src/models/decoder.js";
import { DummyWeights } from "../../../src/models/dummy.js";
import { DeepseekV3ForCausalLM, LlamaForCausalLM } from "../../../src/models/llama.js";
import {
  loadModel,
  MODEL_REGISTRY,
  packageRoot,
  resolveMaxModelLen,
  resolveModelDir,
} from "../../../src/models/registry.js";
import { SafetensorsCheckpoint } from "../../../src/models/safetensors.js";
import { WeightLoadError } from "../../../src/models/weights.js";
import { HostBackend, type HostTensor } from "./helpers.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url)).replace(/\/$/, "");
const REF = join(ROOT, "models/ref-small");
const tmp = mkdtempSync(join(tmpdir(), "hisparse-reg-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

function errorOf(fn: () => unknown, cls: typeof ModelConfigError | typeof WeightLoadError): string {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${e}`);
    return e.message;
  }
  assert.fail(`expected a ${cls.name}`);
}

/** A folder with only ref-small's config.json (a config-only model, as in configs/). */
function configOnlyDir(name: string, edit: (c: Record<string, unknown>) => void = () => {}): string {
  const dir = join(tmp, name);
  mkdirSync(dir);
  const cfg = JSON.parse(readFileSync(join(REF, "config.json"), "utf8")) as Record<string, unknown>;
  edit(cfg);
  writeFileSync(join(dir, "config.json"), JSON.stringify(cfg));
  return dir;
}

describe("loadModel", () => {
  it("loads ref-small from safetensors: fused q/k/v rows are the checkpoint's q, k, v bits; progress counts bytes", () => {
    const backend = new HostBackend();
    const progress: [number, number][] = [];
    const loaded = loadModel({
      modelDir: REF,
      backend,
      loadFormat: "auto",
      seed: 0,
      maxModelLen: 2048,
      onProgress: (done, total) => progress.push([done, total]),
    });
    assert.ok(loaded.model instanceof DecoderForCausalLM);
    assert.equal(loaded.modelDir, REF);
    assert.equal(loaded.maxModelLen, 2048);
    assert.equal(loaded.model.maxPositions, 2048);
    assert.equal(loaded.config.numHiddenLayers, 4);
    // Allocation order per layer: input_layernorm, qkv, o_proj, post_attention_layernorm, gate_up,
    // down. embed + 4 × 6 + norm (tied: no lm_head).
    assert.equal(backend.weights.length, 1 + 4 * 6 + 1);
    const qkv = backend.weights[2]!;
    assert.deepEqual(qkv.shape, [(4 + 2 * 2) * 64, 256]);
    const ckpt = SafetensorsCheckpoint.open(REF);
    const parts = ["q", "k", "v"].map((x) => ckpt.get(`model.layers.0.self_attn.${x}_proj.weight`).data);
    ckpt.close();
    assert.deepEqual(qkv.data, new Uint16Array([...parts[0]!, ...parts[1]!, ...parts[2]!]));
    const gateUp = backend.weights[5]!;
    assert.deepEqual(gateUp.shape, [2 * 768, 256]);
    // One report per HF tensor (38, every tensor of the checkpoint), in bytes: 14,684,672 in all.
    assert.equal(progress.length, 38);
    assert.deepEqual(progress.at(-1), [14684672, 14684672]);
    assert.deepEqual(progress[0], [8388608, 14684672]); // embed_tokens, 16384 x 256 bf16
    for (let i = 1; i < progress.length; i++) assert.ok(progress[i]![0] > progress[i - 1]![0]);
  });

  it("defaults to the bundled ref-small and its max_position_embeddings", () => {
    const loaded = loadModel({
      backend: new HostBackend(),
      loadFormat: "safetensors",
      seed: 0,
      maxModelLen: 64,
    });
    assert.equal(loaded.modelDir, join(ROOT, "models", "ref-small"));
    assert.equal(resolveMaxModelLen(loaded.config, undefined), 16384);
  });

  it("dummy weights for a config-only folder use the config's dtype and seed", () => {
    const dir = configOnlyDir("dummy");
    const backend = new HostBackend();
    const loaded = loadModel({ modelDir: dir, backend, loadFormat: "dummy", seed: 3, maxModelLen: 128 });
    assert.equal(loaded.config.vocabSize, 16384);
    const emb = backend.weights[0] as HostTensor;
    assert.equal(emb.dtype, "bf16");
    assert.deepEqual(
      emb.data,
      new DummyWeights(loaded.config, { seed: 3 }).get("model.embed_tokens.weight").data,
    );
  });

  it("auto without weights, and .bin-only folders, say what to do", () => {
    const dir = configOnlyDir("noweights");
    assert.equal(
      errorOf(
        () =>
          loadModel({
            modelDir: dir,
            backend: new HostBackend(),
            loadFormat: "auto",
            seed: 0,
            maxModelLen: 16,
          }),
        WeightLoadError,
      ),
      `model directory ${dir} has no model.safetensors or model.safetensors.index.json (use --load-format dummy to run without weights)`,
    );
    writeFileSync(join(dir, "pytorch_model.bin"), "");
    assert.equal(
      errorOf(
        () =>
          loadModel({
            modelDir: dir,
            backend: new HostBackend(),
            loadFormat: "auto",
            seed: 0,
            maxModelLen: 16,
          }),
        WeightLoadError,
      ),
      `model directory ${dir} has only PyTorch .bin weights (pytorch_model.bin); convert them to safetensors or use --load-format dummy`,
    );
  });

  it("rejects a max model length beyond max_position_embeddings or a sliding window", () => {
    assert.equal(
      errorOf(
        () =>
          loadModel({
            modelDir: REF,
            backend: new HostBackend(),
            loadFormat: "auto",
            seed: 0,
            maxModelLen: 16385,
          }),
        ModelConfigError,
      ),
      "--max-model-len 16385 exceeds the model's max_position_embeddings (16384)",
    );
    const swa = configOnlyDir("swa", (c) => {
      c.architectures = ["MistralForCausalLM"];
      c.sliding_window = 4096;
    });
    assert.equal(
      errorOf(
        () =>
          loadModel({
            modelDir: swa,
            backend: new HostBackend(),
            loadFormat: "dummy",
            seed: 0,
            maxModelLen: 8192,
          }),
        ModelConfigError,
      ),
      "the model uses sliding-window attention over 4096 tokens, which hisparse does not implement, so --max-model-len must be <= 4096 (got 8192)",
    );
    assert.equal(
      errorOf(() => resolveMaxModelLen(loadModelConfig(REF), 0), ModelConfigError),
      "--max-model-len must be a positive integer, got 0",
    );
  });

  it("dispatches the GQA architectures to LlamaForCausalLM and the MLA ones to DeepseekV3ForCausalLM", () => {
    const mla = ["DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "GlmMoeDsaForCausalLM"];
    assert.deepEqual(Object.keys(MODEL_REGISTRY).sort(), [
      ...mla.slice(0, 2),
      "Glm4MoeForCausalLM",
      mla[2],
      "LlamaForCausalLM",
      "MistralForCausalLM",
      "Qwen2ForCausalLM",
      "Qwen3ForCausalLM",
      "Qwen3MoeForCausalLM",
    ]);
    for (const [arch, cls] of Object.entries(MODEL_REGISTRY))
      assert.equal(cls, mla.includes(arch) ? DeepseekV3ForCausalLM : LlamaForCausalLM, arch);
  });
});

describe("resolveModelDir", () => {
  it("finds the package root and the bundled model", () => {
    assert.equal(packageRoot(), ROOT);
    assert.equal(resolveModelDir(undefined), join(ROOT, "models", "ref-small"));
    assert.ok(existsSync(join(resolveModelDir(undefined), "config.json")));
  });

  it("takes paths as given (absolute or relative), then bundled names", () => {
    assert.equal(resolveModelDir(REF), REF);
    const dir = join(tmp, "plain");
    mkdirSync(dir);
    copyFileSync(join(REF, "config.json"), join(dir, "config.json"));
    assert.equal(resolveModelDir(dir), dir);
    assert.equal(resolveModelDir("llama-3.1-8b"), join(ROOT, "configs", "llama-3.1-8b"));
    assert.equal(resolveModelDir("ref-small"), join(ROOT, "models", "ref-small"));
  });

  it("errors on a missing path or a file", () => {
    const missing = join(tmp, "no-such-model");
    assert.equal(
      errorOf(() => resolveModelDir(missing), ModelConfigError),
      `model path ${missing} does not exist`,
    );
    const file = join(REF, "config.json");
    assert.equal(
      errorOf(() => resolveModelDir(file), ModelConfigError),
      `model path ${file} is not a directory`,
    );
  });
});
