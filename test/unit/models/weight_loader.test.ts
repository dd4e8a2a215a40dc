/**
 * WeightLoader (models/weight_loader.ts): the model declares weights and gets tensors at once,
 * finish() fills them (generated, streamed or uploaded), progress in bytes; and the bad inputs of
 * a checkpoint, each one sentence: a tensor of the wrong shape, a missing tensor, a shard cut
 * short after it was opened.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import type { HostTensorData, Tensor } from "../../../src/backends/backend.js";
import { CpuBackend } from "../../../src/backends/cpu/cpu_backend.js";
import { formatLoadProgress } from "../../../src/cli/progress.js";
import { parseModelConfig } from "../../../src/config/model_config.js";
import { DummyWeights } from "../../../src/models/dummy.js";
import { loadModel } from "../../../src/models/registry.js";
import { SafetensorsCheckpoint } from "../../../src/models/safetensors.js";
import { WeightLoader } from "../../../src/models/weight_loader.js";
import { WeightLoadError, type WeightSource } from "../../../src/models/weights.js";
import { HostBackend, type RawTensor, writeSafetensors } from "./helpers.js";

const tmp = mkdtempSync(join(tmpdir(), "hisparse-wl-"));
after(() => rmSync(tmp, { recursive: true, force: true }));
let dirs = 0;

const rawConfig = {
  architectures: ["LlamaForCausalLM"],
  hidden_size: 32,
  intermediate_size: 48,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 8,
  vocab_size: 50,
  max_position_embeddings: 64,
  tie_word_embeddings: true,
  torch_dtype: "bfloat16",
};
const config = parseModelConfig(rawConfig);

/**
 * A model folder with config.json and a model.safetensors of the dummy weights of `config`;
 * `edit` may change or drop tensors before writing.
 */
function checkpointDir(edit: (t: Record<string, RawTensor>) => void = () => {}): string {
  const dir = join(tmp, `m${dirs++}`);
  mkdirSync(dir);
  writeFileSync(join(dir, "config.json"), JSON.stringify(rawConfig));
  const w = new DummyWeights(config, { seed: 9 });
  const tensors: Record<string, RawTensor> = {};
  for (const n of w.names) {
    const t = w.get(n);
    tensors[n] = { dtype: "BF16", shape: t.shape, bytes: new Uint8Array(t.data.buffer) };
  }
  edit(tensors);
  writeSafetensors(join(dir, "model.safetensors"), tensors);
  return dir;
}

function loadError(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof WeightLoadError, `expected WeightLoadError, got ${e}`);
    return e.message;
  }
  assert.fail("expected a WeightLoadError");
}

const load = (modelDir: string) =>
  loadModel({
    modelDir,
    backend: new CpuBackend({ numThreads: 1 }),
    loadFormat: "safetensors",
    seed: 0,
    maxModelLen: 64,
  });

describe("WeightLoader", () => {
  it("step by step: declare (tensors at once, nothing written), finish (filled, progress in bytes)", () => {
    const source = new DummyWeights(config, { seed: 1 });
    const be = new HostBackend();
    const progress: [number, number][] = [];
    const loader = new WeightLoader(source, be, (d, t) => progress.push([d, t]));
    // step 1: a fused gate/up of layer 0 ([2 x 48, 32]) and a norm; nothing is written yet
    const gateUp = loader.uploadCat(
      ["model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"],
      [
        [48, 32],
        [48, 32],
      ],
    );
    const norm = loader.upload("model.norm.weight", [32]);
    assert.deepEqual(gateUp.shape, [96, 32]);
    assert.equal(loader.totalBytes, 2 * (2 * 48 * 32) + 2 * 32);
    assert.equal((gateUp as unknown as { data: Uint16Array }).data.length, 0, "not written before finish");
    // step 2: finish writes the parts in order, one report each
    loader.finish();
    assert.deepEqual(progress, [
      [3072, 6208],
      [6144, 6208],
      [6208, 6208],
    ]);
    const data = (gateUp as unknown as { data: Uint16Array }).data;
    assert.deepEqual(data.subarray(0, 48 * 32), source.get("model.layers.0.mlp.gate_proj.weight").data);
    assert.deepEqual(data.subarray(48 * 32), source.get("model.layers.0.mlp.up_proj.weight").data);
    assert.ok((norm as unknown as { data: Uint16Array }).data.every((b) => b === 0x3f80));
  });

  it("a source without locate() is read at declaration and written at finish", () => {
    const inner = new DummyWeights(config, { seed: 2 });
    let reads = 0;
    const plain: WeightSource = {
      names: inner.names,
      has: (n) => inner.has(n),
      get: (n): HostTensorData => {
        reads++;
        return inner.get(n);
      },
      close: () => {},
    };
    const cpu = new CpuBackend({ numThreads: 1 });
    const loader = new WeightLoader(plain, cpu);
    const t = loader.upload("model.embed_tokens.weight", [50, 32]);
    assert.equal(reads, 1);
    loader.finish();
    const want = new WeightLoader(inner, cpu);
    const u = want.upload("model.embed_tokens.weight", [50, 32]);
    want.finish();
    assert.deepEqual(cpu.toHost(t), cpu.toHost(u));
    cpu.dispose();
  });

  it("parts that differ beyond dim 0 are a programming error of the model", () => {
    const loader = new WeightLoader(new DummyWeights(config, { seed: 0 }), new HostBackend());
    assert.throws(
      () =>
        loader.uploadCat(
          ["model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.down_proj.weight"],
          [
            [48, 32],
            [32, 48],
          ],
        ),
      /parts \[48,32\] and \[32,48\] differ beyond dim 0/,
    );
  });
});

describe("bad checkpoints fail at load with one sentence", () => {
  it("the good one: its weights equal the dummy load it was written from, every element", () => {
    const dir = checkpointDir();
    const got: Float32Array[][] = [];
    for (const loadFormat of ["safetensors", "dummy"] as const) {
      const backend = new CpuBackend({ numThreads: 1 });
      const tensors: Tensor[] = [];
      const alloc = backend.allocateWeight.bind(backend);
      backend.allocateWeight = (shape) => {
        const t = alloc(shape);
        tensors.push(t);
        return t;
      };
      loadModel({ modelDir: dir, backend, loadFormat, seed: 9, maxModelLen: 64 });
      got.push(tensors.map((t) => backend.toHost(t) as Float32Array));
      backend.dispose();
    }
    assert.equal(got[0]!.length, 1 + 2 * 6 + 1);
    assert.deepEqual(got[0], got[1]);
  });

  it("a tensor of the wrong shape", () => {
    const dir = checkpointDir((t) => {
      t["model.layers.1.self_attn.k_proj.weight"]!.shape = [8, 32]; // 16 rows expected
      t["model.layers.1.self_attn.k_proj.weight"]!.bytes = new Uint8Array(8 * 32 * 2);
    });
    assert.equal(
      loadError(() => load(dir)),
      "tensor model.layers.1.self_attn.k_proj.weight has shape [8,32], expected [16,32]",
    );
  });

  it("a missing tensor", () => {
    const dir = checkpointDir((t) => {
      delete t["model.layers.0.mlp.up_proj.weight"];
    });
    assert.equal(
      loadError(() => load(dir)),
      "checkpoint has no tensor model.layers.0.mlp.up_proj.weight",
    );
  });

  it("a file cut short after it was opened (CPU path: get() per tensor)", () => {
    const dir = checkpointDir();
    const ckpt = SafetensorsCheckpoint.open(dir);
    truncateSync(join(dir, "model.safetensors"), 5000);
    const loader = new WeightLoader(ckpt, new CpuBackend({ numThreads: 1 }));
    for (const n of ckpt.names) loader.upload(n, ckpt.entry(n)!.shape);
    assert.match(
      loadError(() => loader.finish()),
      /model\.safetensors ended while reading model\.\S+ \(truncated file\)$/,
    );
    ckpt.close();
  });
});

describe("load progress line", () => {
  it("GB done / total and the rate", () => {
    assert.equal(formatLoadProgress(7.21e9, 16.06e9, 5.34e9, 1), "7.21/16.06 GB, 5.34 GB/s");
    assert.equal(formatLoadProgress(0, 16.06e9, 0, 0), "0.00/16.06 GB");
  });
});
