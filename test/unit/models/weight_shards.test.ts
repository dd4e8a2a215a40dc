/**
 * Tensor-parallel shards in WeightLoader (models/weight_loader.ts WeightShard): a rank's rows
 * (dim 0, column-parallel weights and vocab-parallel tables) or columns (dim 1, row-parallel
 * weights) of an HF tensor hold exactly that slice of the whole tensor, whichever way the values
 * travel: generated on the backend (a fill's elements from `first`), read from a safetensors file,
 * or uploaded from host data; fused parts (q/k/v) each take their own shard.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { CpuBackend } from "../../../src/backends/cpu/cpu_backend.js";
import { parseModelConfig } from "../../../src/config/model_config.js";
import { DummyWeights } from "../../../src/models/dummy.js";
import { SafetensorsCheckpoint } from "../../../src/models/safetensors.js";
import { WeightLoader, type WeightShard, widenToF32 } from "../../../src/models/weight_loader.js";
import type { WeightSource } from "../../../src/models/weights.js";
import { type RawTensor, writeSafetensors } from "./helpers.js";

const config = parseModelConfig({
  architectures: ["LlamaForCausalLM"],
  hidden_size: 32,
  intermediate_size: 48,
  num_hidden_layers: 1,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 8,
  vocab_size: 50,
  max_position_embeddings: 64,
  torch_dtype: "bfloat16",
});
const dummy = new DummyWeights(config, { seed: 3 });
const tmp = mkdtempSync(join(tmpdir(), "hisparse-shards-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** The three routes: generated (locate), file (safetensors), host data only (no locate). */
function sources(): Record<string, WeightSource> {
  const tensors: Record<string, RawTensor> = {};
  for (const n of dummy.names) {
    const t = dummy.get(n);
    tensors[n] = { dtype: "BF16", shape: t.shape, bytes: new Uint8Array(t.data.buffer) };
  }
  writeFileSync(join(tmp, "config.json"), "{}");
  writeSafetensors(join(tmp, "model.safetensors"), tensors);
  const hostOnly: WeightSource = {
    names: dummy.names,
    has: (n) => dummy.has(n),
    get: (n) => dummy.get(n),
    close: () => {},
  };
  return { generated: dummy, file: SafetensorsCheckpoint.open(tmp), host: hostOnly };
}

/** The slice of the whole tensor `name` [rows, cols] a shard holds, as f32. */
function expected(name: string, s: WeightShard): Float32Array {
  const full = widenToF32(dummy.get(name));
  const [rows, cols] = [dummy.get(name).shape[0]!, dummy.get(name).shape[1] ?? 1];
  if (s.dim === 0) return full.slice(s.start * cols, (s.start + s.count) * cols);
  const out = new Float32Array(rows * s.count);
  for (let r = 0; r < rows; r++)
    out.set(full.subarray(r * cols + s.start, r * cols + s.start + s.count), r * s.count);
  return out;
}

describe("WeightLoader shards", () => {
  for (const [route, source] of Object.entries(sources())) {
    it(`${route}: rows of q/k/v parts, columns of o_proj, rows of a bias-free table, each the exact slice`, () => {
      const b = new CpuBackend({ numThreads: 1 });
      const loader = new WeightLoader(source, b);
      const a = "model.layers.0.self_attn";
      const qkvShards: WeightShard[] = [
        { dim: 0, start: 16, count: 16 }, // query heads 2-3 of rank 1 (D = 8)
        { dim: 0, start: 8, count: 8 }, // KV head 1
        { dim: 0, start: 8, count: 8 },
      ];
      const qkv = loader.uploadCat(
        ["q", "k", "v"].map((x) => `${a}.${x}_proj.weight`),
        [
          [32, 32],
          [16, 32],
          [16, 32],
        ],
        undefined,
        qkvShards,
      );
      const o = loader.upload(`${a}.o_proj.weight`, [32, 32], { dim: 1, start: 16, count: 16 });
      const embed = loader.upload("model.embed_tokens.weight", [50, 32], { dim: 0, start: 25, count: 25 });
      assert.deepEqual(qkv.shape, [32, 32]);
      assert.deepEqual(o.shape, [32, 16]);
      loader.finish();
      const want = new Float32Array(32 * 32);
      want.set(expected(`${a}.q_proj.weight`, qkvShards[0]!), 0);
      want.set(expected(`${a}.k_proj.weight`, qkvShards[1]!), 16 * 32);
      want.set(expected(`${a}.v_proj.weight`, qkvShards[2]!), 24 * 32);
      assert.deepEqual(b.toHost(qkv), want);
      assert.deepEqual(b.toHost(o), expected(`${a}.o_proj.weight`, { dim: 1, start: 16, count: 16 }));
      assert.deepEqual(
        b.toHost(embed),
        expected("model.embed_tokens.weight", { dim: 0, start: 25, count: 25 }),
      );
      b.dispose();
    });
  }

  it("a shard that leaves its tensor is a programming error", () => {
    const loader = new WeightLoader(dummy, new CpuBackend({ numThreads: 1 }));
    assert.throws(
      () => loader.upload("model.norm.weight", [32], { dim: 0, start: 24, count: 16 }),
      /shard \[24, \+16\) leaves dim 0 of \[32\]/,
    );
  });
});
