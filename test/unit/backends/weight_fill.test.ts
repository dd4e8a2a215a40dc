/**
 * The counter-based fill rule of generated weights (src/backends/weight_fill.ts), which the CUDA
 * kernel (native/kernels/dummy_init.cu) must reproduce bit for bit: the pinned values below are
 * also pinned in native/tests/dummy_init_test.cu (run on the CPU by
 * `bash native/tests/emu/run_emu.sh dummy --quick`, on the GPU by test/native/weight_load.test.ts).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  fillBits,
  generateFill,
  mix32,
  WEIGHT_FILL_TABLE_SIZE,
  type WeightFill,
} from "../../../src/backends/weight_fill.js";

/** table[k] = k: the output shows the 16-bit index each element drew. */
const identity = Uint16Array.from({ length: WEIGHT_FILL_TABLE_SIZE }, (_, k) => k);
const fill: WeightFill = {
  kind: "table",
  dtype: "bf16",
  table: identity,
  key0: 0xdeadbeef,
  key1: 0x12345678,
};

function gen(f: WeightFill, start: number, count: number): number[] {
  const out = f.dtype === "f32" ? new Float32Array(count) : new Uint16Array(count);
  generateFill(f, start, count, out);
  return Array.from(out);
}

describe("weight fill rule", () => {
  it("mix32 is lowbias32 (values of the C reference) and fillBits keys both words of the counter", () => {
    assert.deepEqual([mix32(0), mix32(1), mix32(0xffffffff)], [0, 2261973619, 2578835075]);
    assert.equal(fillBits(1, 2, 0), 1870567865);
    assert.equal(fillBits(1, 2, 2 ** 32 + 5), 2955207078);
    assert.equal(fillBits(0xdeadbeef, 0x12345678, 2 ** 40 + 3), 2259389337);
  });

  it("pins the values the CUDA test pins (start 3; a counter above 2^32)", () => {
    assert.deepEqual(gen(fill, 3, 10), [50185, 4776, 46426, 63329, 4271, 50427, 1265, 50411, 64571, 63138]);
    assert.deepEqual(gen(fill, 2 ** 33 + 1, 4), [61799, 59215, 18496, 32625]);
    // element 2c is the low half of pair c's bits, element 2c + 1 the high half
    const r = fillBits(0xdeadbeef, 0x12345678, 2);
    assert.deepEqual(gen(fill, 4, 2), [r & 0xffff, r >>> 16]);
  });

  it("is counter-based: any range equals the same slice of the whole, from odd or even starts", () => {
    const whole = gen(fill, 0, 1000);
    for (const [start, count] of [
      [0, 1],
      [1, 1],
      [7, 100],
      [8, 9],
      [513, 487],
    ] as const) {
      assert.deepEqual(gen(fill, start, count), whole.slice(start, start + count), `[${start}, +${count})`);
    }
    // across 2^33 (pairs cross 2^32: the fast path of small counters hands over to the general one)
    const edge = 2 ** 33 - 6;
    const across = gen(fill, edge, 12);
    for (let j = 0; j < 12; j++)
      assert.deepEqual(gen(fill, edge + j, 1), [across[j]!], `element ${edge + j}`);
  });

  it("writes at an offset in the fill's encoding, and fills constants", () => {
    const out = new Float32Array(6).fill(-1);
    const table = Float32Array.from({ length: WEIGHT_FILL_TABLE_SIZE }, (_, k) => k / 4);
    generateFill({ ...fill, dtype: "f32", table }, 10, 3, out, 2);
    assert.deepEqual(Array.from(out), [-1, -1, ...gen(fill, 10, 3).map((k) => k / 4), -1]);
    assert.deepEqual(gen({ kind: "constant", dtype: "bf16", value: 0x3f80 }, 5, 3), [0x3f80, 0x3f80, 0x3f80]);
  });

  it("rejects a table of the wrong size and an output that is too short", () => {
    assert.throws(() => gen({ ...fill, table: new Uint16Array(10) }, 0, 2), /65536 entries, got 10/);
    assert.throws(() => generateFill(fill, 0, 5, new Uint16Array(4)), /5 values do not fit at 0 of 4/);
  });
});
