/**
 * FP8 E4M3 on the CPU backend (the oracle of `--kv-cache-dtype fp8`): the encoding's round trip,
 * ties to even, subnormals and saturation; reshapeAndCache into an "fp8" cache stores exactly the
 * rounded values; attention over it stays close to attention over f32.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import type { QkvLayout } from "../../../../src/backends/backend.js";
import { CpuBackend } from "../../../../src/backends/cpu/index.js";
import { E4M3_VALUES, e4m3ToFloat, floatToE4m3, roundToE4m3 } from "../../../../src/backends/fp8.js";
import {
  FP8_E4M3_MAX,
  KV_CACHE_DTYPE_BYTES,
  kvCacheDtypeBytes,
} from "../../../../src/core/kv/kv_cache_dtype.js";
import { buildMetadata, makeRand, randF32 } from "./helpers.js";

const backend = new CpuBackend({ numThreads: 1 });
after(() => backend.dispose());

describe("fp8 e4m3 encoding", () => {
  it("every finite code round-trips; 0x7f / 0xff are NaN; the largest finite value is 448", () => {
    for (let c = 0; c < 256; c++) {
      if ((c & 0x7f) === 0x7f) {
        assert.ok(Number.isNaN(e4m3ToFloat(c)), `code ${c}`);
        continue;
      }
      assert.equal(floatToE4m3(E4M3_VALUES[c]!), c, `code ${c} (${E4M3_VALUES[c]})`);
    }
    assert.equal(e4m3ToFloat(0x7e), FP8_E4M3_MAX);
    assert.equal(e4m3ToFloat(0x01), 2 ** -9); // smallest subnormal
    assert.equal(e4m3ToFloat(0x08), 2 ** -6); // smallest normal
    assert.equal(e4m3ToFloat(0xb8), -1);
  });

  it("rounds to nearest with ties to even, saturates to +-448 and keeps NaN", () => {
    // 1 + 1/16 lies halfway between 1 (mantissa 000, even) and 1.125 (001): to 1.
    assert.equal(e4m3ToFloat(floatToE4m3(1 + 1 / 16)), 1);
    // 1.125 + 1/16 lies between 1.125 (odd) and 1.25 (even): to 1.25.
    assert.equal(e4m3ToFloat(floatToE4m3(1.1875)), 1.25);
    assert.equal(e4m3ToFloat(floatToE4m3(1.07)), 1.125);
    // Subnormal ties: 2^-10 (between 0 and 2^-9) to 0, 3 * 2^-10 to 2 * 2^-9.
    assert.equal(e4m3ToFloat(floatToE4m3(2 ** -10)), 0);
    assert.equal(e4m3ToFloat(floatToE4m3(3 * 2 ** -10)), 2 ** -8);
    // 15.5 * 2^-10 rounds up across the subnormal/normal boundary to 2^-6.
    assert.equal(floatToE4m3(15.5 * 2 ** -10), 0x08);
    // A mantissa carry moves the exponent: 1.97 -> 2.
    assert.equal(e4m3ToFloat(floatToE4m3(1.97)), 2);
    assert.equal(floatToE4m3(1000), 0x7e);
    assert.equal(floatToE4m3(-1e30), 0xfe);
    assert.equal(floatToE4m3(Number.POSITIVE_INFINITY), 0x7e);
    assert.equal(floatToE4m3(-0), 0x80);
    assert.ok(Number.isNaN(e4m3ToFloat(floatToE4m3(Number.NaN))));
  });

  it("brute force: the code chosen is a nearest finite value (ties: even mantissa)", () => {
    const rand = makeRand(7);
    const finite = Array.from(E4M3_VALUES).filter((v) => Number.isFinite(v) && v >= 0);
    for (let i = 0; i < 4000; i++) {
      const x = Math.fround((rand() - 0.5) * 2 ** Math.floor(rand() * 24 - 12));
      const got = e4m3ToFloat(floatToE4m3(x));
      const a = Math.min(Math.abs(x), FP8_E4M3_MAX);
      const best = Math.min(...finite.map((v) => Math.abs(v - a)));
      assert.equal(Math.abs(Math.abs(got) - a), best, `x = ${x} -> ${got}`);
    }
  });

  it("the KV memory formula's bytes per element: fp8 1, bf16/f16 2, f32 4", () => {
    assert.deepEqual(KV_CACHE_DTYPE_BYTES, { bf16: 2, f16: 2, f32: 4, fp8: 1 });
    assert.equal(kvCacheDtypeBytes("fp8"), 1);
    assert.throws(() => kvCacheDtypeBytes("auto"), /unknown KV cache dtype "auto"/);
  });
});

describe("CPU KV cache in fp8 (emulated)", () => {
  const layout: QkvLayout = { numHeads: 4, numKvHeads: 2, headDim: 16 };
  const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
  const W = (Hq + 2 * Hkv) * D;
  const blockSize = 4;
  const seqLen = 37;
  const numBlocks = Math.ceil(seqLen / blockSize);
  const blockIds = Array.from({ length: numBlocks }, (_, i) => (i * 5) % numBlocks);

  /** Caches the random history (every token) and attends with the last 5 as queries. */
  function run(dtype: "f32" | "fp8", rows: Float32Array): { cache: Float32Array; out: Float32Array } {
    const kv = backend.allocateKvCache({
      numLayers: 1,
      numBlocks,
      blockSize,
      numKvHeads: Hkv,
      headDim: D,
      dtype,
    })[0]!;
    const hist = buildMetadata(backend, [{ numComputed: 0, numNew: seqLen - 5, blockIds }], blockSize);
    backend.reshapeAndCache(
      backend.stage(rows.subarray(0, (seqLen - 5) * W), [seqLen - 5, W], "f32"),
      layout,
      kv,
      hist.meta.slotMapping,
      blockSize,
    );
    const step = buildMetadata(backend, [{ numComputed: seqLen - 5, numNew: 5, blockIds }], blockSize);
    const qkv = backend.stage(rows.subarray((seqLen - 5) * W), [5, W], "f32");
    backend.reshapeAndCache(qkv, layout, kv, step.meta.slotMapping, blockSize);
    const out = Float32Array.from(
      backend.toHost(backend.pagedAttention(qkv, layout, kv, step.meta, blockSize)),
    );
    const cache = Float32Array.from(backend.toHost(kv));
    backend.resetWorkspace();
    return { cache, out };
  }

  it("reshapeAndCache stores e4m3(x) exactly; attention reads those values (close to f32)", () => {
    const rows = randF32(makeRand(3), seqLen * W);
    const f = run("f32", rows);
    const q = run("fp8", rows);
    const expected = Float32Array.from(f.cache);
    roundToE4m3(expected, 0, expected.length, 1);
    assert.deepEqual(q.cache, expected);
    assert.notDeepEqual(q.cache, f.cache);
    // e4m3 has a relative step of 2^-3: outputs (convex combinations of V) stay within a few %.
    let maxErr = 0;
    let maxRef = 0;
    for (let i = 0; i < f.out.length; i++) {
      maxErr = Math.max(maxErr, Math.abs(q.out[i]! - f.out[i]!));
      maxRef = Math.max(maxRef, Math.abs(f.out[i]!));
    }
    assert.ok(maxErr > 0 && maxErr < 0.08 * maxRef, `max |fp8 - f32| ${maxErr} of ${maxRef}`);
  });
});
