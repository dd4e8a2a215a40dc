/**
 * `--calculate-kv-scales` (vLLM calc_kv_scales) on the CPU backend: the first batch a layer caches
 * fixes k_scale = amax|k| / 200 and v_scale = amax|v| / 100 (PAD tokens not counted), the cache
 * then stores e4m3(x * (1 / scale)) * scale, later batches keep the scales (a larger key
 * saturates at 448 * k_scale), and the flag is refused without `--kv-cache-dtype fp8`.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { Command } from "commander";
import type { QkvLayout } from "../../../../src/backends/backend.js";
import { CpuBackend } from "../../../../src/backends/cpu/index.js";
import { e4m3ToFloat, floatToE4m3 } from "../../../../src/backends/fp8.js";
import { addEngineFlags, engineArgsFromOptions } from "../../../../src/cli/engine_flags.js";
import { validateEngineArgs } from "../../../../src/config/engine_args.js";
import {
  K_SCALE_CONSTANT,
  kvScalesFromAmax,
  LayerKvScales,
  V_SCALE_CONSTANT,
} from "../../../../src/core/kv/kv_cache_scales.js";

const backend = new CpuBackend({ numThreads: 1 });
after(() => backend.dispose());

describe("kv cache scales from amax (vLLM's constants)", () => {
  it("k: amax / 200, v: amax / 100, rounded to f32; amax 0 or NaN keeps 1.0", () => {
    assert.equal(K_SCALE_CONSTANT, 200);
    assert.equal(V_SCALE_CONSTANT, 100);
    assert.deepEqual(kvScalesFromAmax(8, 3), { kScale: Math.fround(0.04), vScale: Math.fround(0.03) });
    assert.deepEqual(kvScalesFromAmax(0, Number.NaN), { kScale: 1, vScale: 1 });
  });
  it("a layer calibrates once; without --calculate-kv-scales it never does", () => {
    const s = new LayerKvScales(true);
    assert.deepEqual([s.kScale, s.vScale, s.pending], [1, 1, true]);
    s.calibrate(8, 3);
    s.calibrate(400, 300); // a later batch changes nothing
    assert.deepEqual([s.kScale, s.vScale, s.pending], [Math.fround(0.04), Math.fround(0.03), false]);
    const off = new LayerKvScales(false);
    off.calibrate(8, 3);
    assert.deepEqual([off.kScale, off.vScale, off.pending], [1, 1, false]);
  });
});

describe("CPU fp8 cache with --calculate-kv-scales", () => {
  // One query head, one KV head of 4 dims, one block of 4 slots: a row is [q(4), k(4), v(4)].
  const layout: QkvLayout = { numHeads: 1, numKvHeads: 1, headDim: 4 };
  const blockSize = 4;
  const alloc = (calculateScales: boolean) =>
    backend.allocateKvCache({
      numLayers: 1,
      numBlocks: 1,
      blockSize,
      numKvHeads: 1,
      headDim: 4,
      dtype: "fp8",
      calculateScales,
    })[0]!;
  const write = (kv: ReturnType<typeof alloc>, rows: number[][], slots: number[]) =>
    backend.reshapeAndCache(
      backend.stage(Float32Array.from(rows.flat()), [rows.length, 12], "f32"),
      layout,
      kv,
      backend.stage(Int32Array.from(slots), [slots.length], "i32"),
      blockSize,
    );
  /** What the cache reads back for x at `scale`: e4m3(x * f32(1 / scale)) * scale. */
  const read = (x: number, scale: number) =>
    Math.fround(e4m3ToFloat(floatToE4m3(Math.fround(x) * Math.fround(1 / scale))) * scale);
  // [numBlocks=1, 2, blockSize, 1, 4]: K rows at slot s from s * 4, V rows from 16 + s * 4.
  const kRow = (c: Float32Array, s: number) => Array.from(c.subarray(s * 4, s * 4 + 4));
  const vRow = (c: Float32Array, s: number) => Array.from(c.subarray(16 + s * 4, 16 + s * 4 + 4));

  it("step 1: an all-PAD batch leaves the scales pending; step 2: the first real batch sets them", () => {
    const kv = alloc(true);
    write(kv, [[9, 9, 9, 9, 50, 50, 50, 50, 50, 50, 50, 50]], [-1]);
    assert.equal(backend.kvCacheScales(kv)!.pending, true);
    // Token 0 (slot 0) and token 2 (slot 1) count; token 1 is PAD, its |k| = 40 and |v| = 30 do not.
    const rows = [
      [100, 0, 0, 0, 1, -8, 0.5, 2, 0.25, 3, -1, 0],
      [0, 0, 0, 0, 40, 0, 0, 0, 30, 0, 0, 0],
      [0, 100, 0, 0, 0.01, 7, -6, 0, -2.5, 0, 0.001, 1],
    ];
    write(kv, rows, [0, -1, 1]);
    const s = backend.kvCacheScales(kv)!;
    assert.deepEqual([s.kScale, s.vScale, s.pending], [Math.fround(8 / 200), Math.fround(3 / 100), false]);
    const c = Float32Array.from(backend.toHost(kv));
    assert.deepEqual(
      kRow(c, 0),
      [1, -8, 0.5, 2].map((x) => read(x, s.kScale)),
    );
    assert.deepEqual(
      vRow(c, 0),
      [0.25, 3, -1, 0].map((x) => read(x, s.vScale)),
    );
    assert.deepEqual(
      kRow(c, 1),
      [0.01, 7, -6, 0].map((x) => read(x, s.kScale)),
    );
    backend.resetWorkspace();
  });

  it("step 3: a later batch keeps the scales; a key past 448 * k_scale saturates", () => {
    const kv = alloc(true);
    write(kv, [[0, 0, 0, 0, 8, 0, 0, 0, 3, 0, 0, 0]], [0]);
    write(kv, [[0, 0, 0, 0, 100, -1, 0, 0, 20, 0, 0, 0]], [2]);
    const s = backend.kvCacheScales(kv)!;
    assert.deepEqual([s.kScale, s.vScale], [Math.fround(0.04), Math.fround(0.03)]);
    const c = Float32Array.from(backend.toHost(kv));
    // 100 / 0.04 = 2500 > 448: stored 448, read 448 * 0.04; 20 / 0.03 = 667 > 448 likewise.
    assert.equal(kRow(c, 2)[0], Math.fround(448 * s.kScale));
    assert.equal(vRow(c, 2)[0], Math.fround(448 * s.vScale));
    assert.equal(kRow(c, 2)[1], read(-1, s.kScale));
    backend.resetWorkspace();
  });

  it("without the flag an fp8 cache keeps 1.0; an f32 cache has no scales", () => {
    const kv = alloc(false);
    write(kv, [[0, 0, 0, 0, 8, 0, 0, 0, 3, 0, 0, 0]], [0]);
    const s = backend.kvCacheScales(kv)!;
    assert.deepEqual([s.kScale, s.vScale, s.pending], [1, 1, false]);
    const f32 = backend.allocateKvCache({
      numLayers: 1,
      numBlocks: 1,
      blockSize,
      numKvHeads: 1,
      headDim: 4,
      dtype: "f32",
    })[0]!;
    assert.equal(backend.kvCacheScales(f32), null);
    backend.resetWorkspace();
  });
});

describe("--calculate-kv-scales flag", () => {
  const parse = (argv: string[]) => {
    const cmd = addEngineFlags(new Command("t").exitOverride());
    cmd.parse(argv, { from: "user" });
    return engineArgsFromOptions(cmd.opts());
  };
  it("off by default; with --kv-cache-dtype fp8 it is accepted", () => {
    assert.equal(parse([]).calculateKvScales, false);
    const a = parse(["--kv-cache-dtype", "fp8", "--calculate-kv-scales"]);
    assert.equal(a.calculateKvScales, true);
    assert.deepEqual(validateEngineArgs(a), []);
  });
  it("without --kv-cache-dtype fp8 the engine check says why", () => {
    for (const dtype of [[], ["--kv-cache-dtype", "bf16"]]) {
      const a = parse([...dtype, "--calculate-kv-scales"]);
      assert.deepEqual(validateEngineArgs(a), [
        `--calculate-kv-scales measures the scales of an fp8 KV cache: it needs --kv-cache-dtype fp8, got ${a.kvCacheDtype}`,
      ]);
    }
  });
});
