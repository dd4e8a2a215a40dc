/** Exact bf16 / f16 widening to f32 and the weight upload that uses it. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { bf16ToF32, CpuBackend, f16ToF32, f32ToBf16 } from "../../../../src/backends/cpu/index.js";

describe("bf16", () => {
  it("widens by shifting the bits into the upper half of an f32", () => {
    // 0x3f80 = 1.0, 0xc000 = -2.0, 0x3fc0 = 1.5, 0x0001 = smallest subnormal 2^-133,
    // 0x7f80 = +inf, 0xff80 = -inf, 0x8000 = -0.
    const bits = Uint16Array.from([0x3f80, 0xc000, 0x3fc0, 0x0001, 0x7f80, 0xff80, 0x8000]);
    const f = bf16ToF32(bits);
    assert.deepEqual([...f], [1, -2, 1.5, 2 ** -133, Infinity, -Infinity, -0]);
    assert.ok(Object.is(f[6], -0));
    assert.ok(Number.isNaN(bf16ToF32(Uint16Array.from([0x7fc0]))[0]));
    const u32 = new Uint32Array(f.buffer);
    for (let i = 0; i < bits.length; i++) assert.equal(u32[i], (bits[i]! << 16) >>> 0);
  });

  it("rounds f32 to the nearest bf16 with ties to even, and round-trips bf16 values", () => {
    // 1 + 2^-8 lies halfway between bf16 1.0 and 1 + 2^-7: ties to even -> 1.0 (0x3f80).
    // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd mantissa) and 1 + 2^-6: -> 0x3f82.
    // 1 + 2^-8 + 2^-20 is above halfway -> 0x3f81.
    const x = Float32Array.from([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -3.140625]);
    assert.deepEqual([...f32ToBf16(x)], [0x3f80, 0x3f82, 0x3f81, 0xc049]);
    const all = Uint16Array.from({ length: 0x7f80 }, (_, i) => i); // every finite non-negative bf16
    assert.deepEqual(f32ToBf16(bf16ToF32(all)), all);
  });
});

describe("f16", () => {
  it("widens normals, subnormals, zeros and infinities exactly", () => {
    // 0x3c00 = 1, 0xc000 = -2, 0x3555 = 0.333251953125, 0x0001 = 2^-24, 0x03ff = 1023 * 2^-24,
    // 0x7bff = 65504 (max), 0x7c00 = inf, 0x8000 = -0.
    const bits = Uint16Array.from([0x3c00, 0xc000, 0x3555, 0x0001, 0x03ff, 0x7bff, 0x7c00, 0x8000]);
    assert.deepEqual(
      [...f16ToF32(bits)],
      [1, -2, 0.333251953125, 2 ** -24, 1023 * 2 ** -24, 65504, Infinity, -0],
    );
    assert.ok(Number.isNaN(f16ToF32(Uint16Array.from([0x7e00]))[0]));
  });
});

describe("uploadWeight", () => {
  it("stores bf16 and f16 weights as their exact f32 values", () => {
    const b = new CpuBackend({ numThreads: 1 });
    const bf = b.toHost(
      b.uploadWeight({
        data: Uint16Array.from([0x3f80, 0xbe00, 0x4049, 0x0000]),
        dtype: "bf16",
        shape: [2, 2],
      }),
    );
    assert.deepEqual([...bf], [1, -0.125, 3.140625, 0]);
    const h = b.toHost(
      b.uploadWeight({ data: Uint16Array.from([0x3c00, 0x3800]), dtype: "f16", shape: [2] }),
    );
    assert.deepEqual([...h], [1, 0.5]);
    assert.throws(
      () => b.uploadWeight({ data: new Float32Array(3), dtype: "f32", shape: [2, 2] }),
      /3 values for shape \[2,2\]/,
    );
    b.dispose();
  });
});
