/**
 * Weight loading on the GPU (GPU machine only; `node --test dist/test/native/weight_load.test.js`):
 * 1. dummy weights generated on the device (native/kernels/dummy_init.cu) equal the TypeScript
 *    rule's (src/backends/weight_fill.ts, the CPU backend's values) bit for bit: every weight of
 *    ref-small's shape (bf16 and f32 dummy dtypes), elements at odd offsets and counters above
 *    2^32 through the raw launcher, and spot ranges of the Llama-3.1-8B embedding (525M elements);
 * 2. ref-small streamed from safetensors (pinned buffer ring, reader threads, default and tiny
 *    buffers) equals the CPU backend's load of the same checkpoint, every weight, bit for bit;
 * 3. a shard cut short after opening fails with one sentence naming it.
 */
import assert from "node:assert/strict";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import type { Backend, Tensor } from "../../src/backends/backend.js";
import { CpuBackend } from "../../src/backends/cpu/cpu_backend.js";
import { type DevicePtr, DTYPE_CODE, NULL_PTR, offsetPtr } from "../../src/backends/cuda/addon.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import { f32ToBf16Bits } from "../../src/backends/cuda/half.js";
import type { CudaTensor } from "../../src/backends/cuda/tensor.js";
import { generateFill, WEIGHT_FILL_TABLE_SIZE } from "../../src/backends/weight_fill.js";
import { loadModelConfig } from "../../src/config/model_config.js";
import { DummyWeights } from "../../src/models/dummy.js";
import { loadModel } from "../../src/models/registry.js";
import { SafetensorsCheckpoint } from "../../src/models/safetensors.js";
import { WeightLoader } from "../../src/models/weight_loader.js";
import { WeightLoadError } from "../../src/models/weights.js";
import { gpuSkip, makeBackend, Rng } from "./helpers.js";

function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "package.json")) || !existsSync(join(dir, "models"))) dir = dirname(dir);
  return dir;
}
const root = repoRoot();
const REF = join(root, "models", "ref-small");
const skip = gpuSkip();
const tmp = mkdtempSync(join(tmpdir(), "hisparse-wl-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** Records every weight a backend allocates, in order. */
function recordWeights(be: Backend): Tensor[] {
  const out: Tensor[] = [];
  const alloc = be.allocateWeight.bind(be);
  be.allocateWeight = (shape) => {
    const t = alloc(shape);
    out.push(t);
    return t;
  };
  return out;
}

/** bf16 bits of a device bf16 tensor (raw copy, no widening). */
function deviceBits(be: CudaBackend, t: Tensor, offset = 0, count = -1): Uint16Array {
  const ct = t as CudaTensor;
  const n = count < 0 ? ct.numel - offset : count;
  const out = new Uint16Array(n);
  be.downloadBytes(out, offsetPtr(ct.ptr, offset * 2));
  return out;
}

/** bf16 bits of a CPU f32 weight (exact when it holds bf16 values; else rounded to nearest even). */
function cpuBits(cpu: CpuBackend, t: Tensor): Uint16Array {
  return Uint16Array.from(cpu.toHost(t) as Float32Array, f32ToBf16Bits);
}

function assertBits(got: Uint16Array, want: Uint16Array, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++)
    if (got[i] !== want[i])
      assert.fail(`${what}: element ${i} is 0x${got[i]!.toString(16)}, expected 0x${want[i]!.toString(16)}`);
}

describe("dummy weights generated on the GPU equal the TypeScript rule", { skip }, () => {
  for (const dtype of ["bfloat16", "float32"] as const) {
    it(`every weight of ref-small's shape (${dtype} dummy dtype), CPU backend vs CUDA`, () => {
      const config = { ...loadModelConfig(REF), dtype };
      const gpu = makeBackend();
      const cpu = new CpuBackend({ numThreads: 1 });
      const gw = recordWeights(gpu);
      const cw = recordWeights(cpu);
      const source = new DummyWeights(config, { seed: 1234, dtype: dtype === "float32" ? "f32" : "bf16" });
      for (const be of [gpu, cpu]) {
        const loader = new WeightLoader(source, be);
        for (const n of source.names) loader.upload(n, source.locate(n)!.shape);
        // and a fused q/k/v, each part generated into its row range
        const qkv = ["q", "k", "v"].map((x) => `model.layers.2.self_attn.${x}_proj.weight`);
        loader.uploadCat(
          qkv,
          qkv.map((n) => source.locate(n)!.shape),
        );
        loader.finish();
      }
      gpu.synchronize();
      assert.equal(gw.length, source.names.length + 1);
      for (let i = 0; i < gw.length; i++)
        assertBits(deviceBits(gpu, gw[i]!), cpuBits(cpu, cw[i]!), `weight ${i}`);
      cpu.dispose();
      gpu.dispose();
    });
  }

  it("the raw launcher: odd offsets and counts, counters above 2^32, f32 elements, constants", () => {
    const gpu = makeBackend();
    const a = gpu.addon;
    const table = Uint16Array.from({ length: WEIGHT_FILL_TABLE_SIZE }, (_, k) => (k * 40503) & 0xffff);
    // the table's 16-bit patterns, copied to the device as they are
    const bits16 = gpu.allocateWeight([WEIGHT_FILL_TABLE_SIZE]) as CudaTensor;
    gpu.uploadBytes(bits16.ptr, table);
    const fill = { kind: "table" as const, dtype: "bf16" as const, table, key0: 0x9e3779b9, key1: 7 };
    const out = gpu.allocateWeight([5000]) as CudaTensor;
    for (const [first, count, offset] of [
      [0, 4999, 1],
      [3, 17, 0],
      [2 ** 33 - 5, 1000, 3],
      [2 ** 40 + 1, 9, 8],
    ] as const) {
      gpu.addon.memsetAsync(out.ptr, 0xab, out.bytes, gpu.stream);
      a.fillWeight(
        gpu.stream,
        offsetPtr(out.ptr, offset * 2),
        DTYPE_CODE.bf16,
        count,
        first,
        bits16.ptr,
        0,
        fill.key0,
        fill.key1,
      );
      const want = new Uint16Array(count);
      generateFill(fill, first, count, want);
      assertBits(deviceBits(gpu, out, offset, count), want, `first ${first} count ${count} offset ${offset}`);
      if (offset > 0)
        assert.equal(deviceBits(gpu, out, offset - 1, 1)[0], 0xabab, "element before the range");
    }
    a.fillWeight(gpu.stream, offsetPtr(out.ptr, 2), DTYPE_CODE.bf16, 33, 0, NULL_PTR, 0x3f80, 0, 0);
    assert.ok(deviceBits(gpu, out, 1, 33).every((b) => b === 0x3f80));
    // f32 elements: a table of 32-bit patterns
    const t32 = Float32Array.from({ length: WEIGHT_FILL_TABLE_SIZE }, (_, k) => k / 8 - 3);
    const o32 = gpu.upload(new Float32Array(1001), [1001], "f32") as CudaTensor;
    a.fillWeight(gpu.stream, offsetPtr(o32.ptr, 4), DTYPE_CODE.f32, 1000, 5, uploadF32(gpu, t32), 0, 1, 2);
    const want32 = new Float32Array(1000);
    generateFill({ kind: "table", dtype: "f32", table: t32, key0: 1, key1: 2 }, 5, 1000, want32);
    assert.deepEqual((gpu.toHost(o32) as Float32Array).subarray(1), want32);
    gpu.dispose();
  });

  it("spot ranges of the Llama-3.1-8B embedding [128256, 4096] (generated in ~1 ms) equal the rule", () => {
    const config = loadModelConfig(join(root, "configs", "llama-3.1-8b"));
    const source = new DummyWeights(config, { seed: 0 });
    const gpu = makeBackend();
    const loader = new WeightLoader(source, gpu);
    const name = "model.embed_tokens.weight";
    const emb = loader.upload(name, [config.vocabSize, config.hiddenSize]);
    loader.finish();
    const loc = source.locate(name)!;
    assert.equal(loc.kind, "generated");
    const numel = config.vocabSize * config.hiddenSize;
    const rng = new Rng(3);
    const starts = [0, 1, numel - 4096, ...Array.from({ length: 64 }, () => rng.int(0, numel - 4096))];
    for (const s of starts) {
      const want = new Uint16Array(4096);
      if (loc.kind === "generated") generateFill(loc.fill, s, 4096, want);
      assertBits(deviceBits(gpu, emb, s, 4096), want, `elements [${s}, +4096)`);
    }
    gpu.dispose();
  });
});

/** A device copy of an f32 table (kept until the backend is disposed). */
function uploadF32(gpu: CudaBackend, t: Float32Array): DevicePtr {
  return (gpu.upload(t, [t.length], "f32") as CudaTensor).ptr;
}

describe("safetensors streamed to the GPU equal the CPU backend's load", { skip }, () => {
  for (const [label, weightStreaming] of [
    ["default ring (8 buffers of at most 32 MiB, 8 threads)", undefined],
    ["3 buffers of 64 KiB, 2 threads (about 230 reads)", { buffers: 3, bufferBytes: 64 * 1024, threads: 2 }],
  ] as const) {
    it(`ref-small, every weight bit for bit: ${label}`, () => {
      const gpu = makeBackend(weightStreaming === undefined ? {} : { weightStreaming });
      const cpu = new CpuBackend({ numThreads: 1 });
      const gw = recordWeights(gpu);
      const cw = recordWeights(cpu);
      let last = 0;
      loadModel({
        modelDir: REF,
        backend: gpu,
        loadFormat: "safetensors",
        seed: 0,
        maxModelLen: 64,
        onProgress: (d) => {
          last = d;
        },
      });
      loadModel({ modelDir: REF, backend: cpu, loadFormat: "safetensors", seed: 0, maxModelLen: 64 });
      assert.equal(last, 14684672);
      assert.equal(gw.length, cw.length);
      for (let i = 0; i < gw.length; i++)
        assertBits(deviceBits(gpu, gw[i]!), cpuBits(cpu, cw[i]!), `weight ${i}`);
      cpu.dispose();
      gpu.dispose();
    });
  }

  it("a shard cut short after it was opened: one sentence naming the file", () => {
    const dir = join(tmp, "cut");
    mkdirSync(dir);
    for (const f of [
      "config.json",
      "model.safetensors.index.json",
      "model-00001-of-00002.safetensors",
      "model-00002-of-00002.safetensors",
    ])
      copyFileSync(join(REF, f), join(dir, f));
    const shard = join(dir, "model-00002-of-00002.safetensors");
    const gpu = makeBackend();
    const ckpt = SafetensorsCheckpoint.open(dir); // validates every size
    truncateSync(shard, 4096); // ... then the file shrinks before the reads
    const loader = new WeightLoader(ckpt, gpu);
    for (const n of ckpt.names) loader.upload(n, ckpt.entry(n)!.shape);
    let message = "";
    try {
      loader.finish();
    } catch (e) {
      assert.ok(e instanceof WeightLoadError, `expected WeightLoadError, got ${e}`);
      message = e.message;
    }
    ckpt.close();
    assert.match(
      message,
      /^could not load the checkpoint: .*model-00002-of-00002\.safetensors: the file ended \d+ bytes into a read of \d+ bytes at offset \d+ \(truncated file\?\)$/,
    );
    gpu.dispose();
  });
});
