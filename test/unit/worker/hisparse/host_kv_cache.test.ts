/**
 * The CPU host tier (the oracle of the CUDA host tier's kernels): f32 pages are copies; fp8
 * pages (host_kv_cache_dtype fp8) hold e4m3(x / scale) codes with the K scale on K rows and the V
 * scale on V rows, and every read back (load, loadHeadSlice) gives code value * scale.
 * Geometry: block size 2, 2 kv heads of 4 dims, so a page is [2 (K, V), 2, 2, 4] = 32 values.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import type { Tensor } from "../../../../src/backends/backend.js";
import { CpuBackend } from "../../../../src/backends/cpu/index.js";
import { E4M3_VALUES, floatToE4m3 } from "../../../../src/backends/fp8.js";
import { CpuHostKvCache, type HostKvCacheSpec } from "../../../../src/worker/hisparse/host_kv_cache.js";

const be = new CpuBackend({ numThreads: 1 });
after(() => be.dispose());
const view = (t: Tensor) => be.hostView(t) as Float32Array;
const BS = 2;
const Hkv = 2;
const D = 4;
const PAGE = 2 * BS * Hkv * D;
const spec: HostKvCacheSpec = {
  numSparseLayers: 1,
  numHostBlocks: 4,
  blockSize: BS,
  numKvHeads: Hkv,
  headDim: D,
};

/** A 3-block cache whose element i is a value that e4m3 cannot hold exactly (most of them). */
function cache(): Tensor {
  const kv = be.allocateKvCache({
    numLayers: 1,
    numBlocks: 3,
    blockSize: BS,
    numKvHeads: Hkv,
    headDim: D,
    dtype: "f32",
  })[0]!;
  be.writeTensor(
    kv,
    Float32Array.from({ length: 3 * PAGE }, (_, i) =>
      Math.fround((i % 2 === 0 ? 1 : -1) * (0.013 * i + 0.07)),
    ),
  );
  return kv;
}

describe("CpuHostKvCache", () => {
  it("f32 pages: mirror then load is a copy; 4 bytes an element", () => {
    const tier = new CpuHostKvCache(spec, view);
    const kv = cache();
    const before = Float32Array.from(view(kv));
    tier.mirror(0, kv, [1], [3]);
    view(kv).fill(0, PAGE, 2 * PAGE);
    tier.load(0, kv, [1], [3]);
    assert.deepEqual(view(kv), before);
    assert.equal(tier.sliceBytes, 2 * BS * D * 4);
    assert.equal(tier.pageBytes, PAGE * 4);
  });

  it("fp8 pages: codes e4m3(x / scale), K and V scales apart; load and loadHeadSlice dequantise; 1 byte an element", () => {
    const kScale = 0.5;
    const vScale = 4;
    const tier = new CpuHostKvCache({ ...spec, fp8: { kScale, vScale } }, view);
    const kv = cache();
    const src = Float32Array.from(view(kv));
    tier.mirror(0, kv, [2], [1]);
    const codes = tier.layers[0] as Uint8Array;
    for (let i = 0; i < PAGE; i++) {
      const scale = i < PAGE / 2 ? kScale : vScale; // [K rows, V rows]
      assert.equal(codes[PAGE + i], floatToE4m3(src[2 * PAGE + i]! / scale), `code ${i}`);
    }
    const read = (i: number) => E4M3_VALUES[codes[PAGE + i]!]! * (i < PAGE / 2 ? kScale : vScale);
    // Whole page back into block 0.
    tier.load(0, kv, [0], [1]);
    const got = view(kv);
    for (let i = 0; i < PAGE; i++) assert.equal(got[i], read(i), `load ${i}`);
    let rounded = 0;
    for (let i = 0; i < PAGE; i++) rounded += got[i] !== src[2 * PAGE + i] ? 1 : 0;
    assert.ok(rounded > PAGE / 2, "most values are rounded (the test would not see a plain copy)");
    // Head 1's slice into block 1: only head 1's rows change.
    const before = Float32Array.from(view(kv));
    tier.loadHeadSlice(0, 1, 1, kv, 1);
    const after1 = view(kv);
    for (let i = 0; i < PAGE; i++) {
      const head = Math.floor(i / D) % Hkv;
      assert.equal(after1[PAGE + i], head === 1 ? read(i) : before[PAGE + i], `slice ${i}`);
    }
    assert.equal(tier.sliceBytes, 2 * BS * D);
    assert.equal(tier.pageBytes, PAGE);
  });

  it("fp8 pages over an fp8 device cache with calibrated scales: the device's own codes, per layer", () => {
    // Two sparse layers, each an fp8 device cache whose first batch set its scales
    // (--calculate-kv-scales): a mirror then a load gives back the device values exactly.
    const layers = [0, 1].map(() => {
      const kv = be.allocateKvCache({
        numLayers: 1,
        numBlocks: 3,
        blockSize: BS,
        numKvHeads: Hkv,
        headDim: D,
        dtype: "fp8",
        calculateScales: true,
      })[0]!;
      return kv;
    });
    // One token per layer into slot 0 (block 0) with amax |k| 2 (layer 0) or 20 (layer 1).
    layers.forEach((kv, l) => {
      const row = Float32Array.from(
        { length: (2 + 2 * Hkv) * D },
        (_, i) => (0.37 * (i + 1) * (l * 9 + 1)) % 2,
      );
      row[2 * D] = 2 * (l * 9 + 1); // the first K element: the amax
      be.reshapeAndCache(
        be.stage(row, [1, row.length], "f32"),
        { numHeads: 2, numKvHeads: Hkv, headDim: D },
        kv,
        be.stage(Int32Array.from([0]), [1], "i32"),
        BS,
      );
    });
    const scales = layers.map((kv) => be.kvCacheScales(kv)!);
    assert.deepEqual(
      scales.map((s) => s.kScale),
      [Math.fround(2 / 200), Math.fround(20 / 200)],
    );
    const tier = new CpuHostKvCache(
      { ...spec, numSparseLayers: 2, fp8: { scalesOf: (i) => scales[i]! } },
      view,
    );
    layers.forEach((kv, l) => {
      const before = Float32Array.from(view(kv));
      tier.mirror(l, kv, [0], [2]);
      view(kv).fill(0);
      tier.load(l, kv, [0], [2]);
      assert.deepEqual(view(kv), before, `layer ${l}: the recall reads what the device cache held`);
      assert.equal((tier.layers[l] as Uint8Array)[2 * PAGE], floatToE4m3(before[0]! / scales[l]!.kScale));
    });
    be.resetWorkspace();
  });

  it("fp8 scales must be > 0", () => {
    assert.throws(
      () => new CpuHostKvCache({ ...spec, fp8: { kScale: 0 } }, view),
      /scales > 0, got k 0, v 1/,
    );
  });
});
