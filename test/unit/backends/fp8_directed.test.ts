/**
 * Directed rounding onto the e4m3 grid (src/backends/fp8.ts floatToE4m3Down / Up), the rounding of
 * Quest's fp8 digests: checked against a brute-force search of the grid over every bf16 value (all
 * e4m3 values, their neighbours and the subnormal range among them) and around every e4m3 code;
 * saturation at +-448, NaN, the canonical +0; and the fold identity the digests rely on,
 * min(rd(a), rd(b)) = rd(min(a, b)) and max(ru(a), ru(b)) = ru(max(a, b)).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { E4M3_VALUES, floatToE4m3Down, floatToE4m3Up } from "../../../src/backends/fp8.js";

/** The finite e4m3 codes in value order, one code per value (+0 for zero). */
const GRID: number[] = Array.from({ length: 256 }, (_, c) => c)
  .filter((c) => (c & 0x7f) !== 0x7f && c !== 0x80)
  .sort((a, b) => E4M3_VALUES[a]! - E4M3_VALUES[b]!);

/** Brute force: the code of the largest grid value <= x (up: smallest >= x), saturating at +-448. */
function bruteDirected(x: number, up: boolean): number {
  const v = Math.fround(x);
  if (Number.isNaN(v)) throw new Error("NaN has no neighbour on the grid");
  if (v >= 448) return 0x7e;
  if (v <= -448) return 0xfe;
  const fits = GRID.filter((c) => (up ? E4M3_VALUES[c]! >= v : E4M3_VALUES[c]! <= v));
  return up ? fits[0]! : fits[fits.length - 1]!;
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
/** The f32 value of bit pattern u. */
const bitsToF32 = (u: number): number => {
  u32[0] = u >>> 0;
  return f32[0]!;
};

describe("fp8 e4m3 directed rounding (Quest digests)", () => {
  it("every non-NaN bf16 value rounds down / up to the brute-force neighbour on the grid", () => {
    let checked = 0;
    for (let b = 0; b < 0x10000; b++) {
      const x = bitsToF32(b << 16);
      if (Number.isNaN(x)) continue;
      assert.equal(floatToE4m3Down(x), bruteDirected(x, false), `down(${x})`);
      assert.equal(floatToE4m3Up(x), bruteDirected(x, true), `up(${x})`);
      checked++;
    }
    assert.equal(checked, 0x10000 - 2 * 127); // 2 x (2^7 - 1) bf16 NaNs
  });

  it("around every code: the value itself, its f32 neighbours and the midpoints to the next code", () => {
    for (let i = 0; i < GRID.length; i++) {
      const c = GRID[i]!;
      const v = E4M3_VALUES[c]!;
      assert.equal(floatToE4m3Down(v), c, `down(${v}) is exact`);
      assert.equal(floatToE4m3Up(v), c, `up(${v}) is exact`);
      f32[0] = v;
      const neighbours =
        v === 0 ? [2 ** -149, -(2 ** -149)] : [bitsToF32(u32[0]! + 1), bitsToF32(u32[0]! - 1)];
      const next = i + 1 < GRID.length ? E4M3_VALUES[GRID[i + 1]!]! : 480;
      for (const x of [...neighbours, (v + next) / 2])
        for (const up of [false, true])
          assert.equal(
            (up ? floatToE4m3Up : floatToE4m3Down)(x),
            bruteDirected(x, up),
            `${up ? "up" : "down"}(${x})`,
          );
    }
  });

  it("rounds outward across the subnormal range and the normal boundary", () => {
    // 2^-9 is the smallest subnormal, 2^-6 the smallest normal (code 0x08), 7 * 2^-9 the largest subnormal.
    assert.equal(E4M3_VALUES[floatToE4m3Up(2 ** -10)], 2 ** -9);
    assert.equal(E4M3_VALUES[floatToE4m3Down(2 ** -10)], 0);
    assert.equal(floatToE4m3Up(7.5 * 2 ** -9), 0x08); // up to the first normal
    assert.equal(floatToE4m3Down(7.5 * 2 ** -9), 0x07);
    assert.equal(E4M3_VALUES[floatToE4m3Down(-(2 ** -10))], -(2 ** -9));
    // A carry out of the mantissa moves the exponent: (1.875, 2) rounds up to 2.
    assert.equal(E4M3_VALUES[floatToE4m3Up(1.9)], 2);
    assert.equal(E4M3_VALUES[floatToE4m3Down(1.9)], 1.875);
    assert.equal(E4M3_VALUES[floatToE4m3Down(-1.9)], -2);
  });

  it("saturates at +-448 (scale 1), keeps NaN, and gives +0 for every zero result", () => {
    assert.equal(floatToE4m3Down(1000), 0x7e); // 448 <= 1000: still a lower bound
    assert.equal(floatToE4m3Up(1000), 0x7e); // saturated: 448 is not an upper bound of 1000
    assert.equal(floatToE4m3Down(Number.NEGATIVE_INFINITY), 0xfe);
    assert.equal(floatToE4m3Up(Number.POSITIVE_INFINITY), 0x7e);
    assert.equal(floatToE4m3Up(440), 0x7e); // (416, 448) rounds up to 448, not to NaN
    assert.equal(floatToE4m3Down(Number.NaN) & 0x7f, 0x7f);
    assert.equal(floatToE4m3Up(Number.NaN) & 0x7f, 0x7f);
    for (const x of [0, -0, 2 ** -12, -(2 ** -12)]) {
      const down = floatToE4m3Down(x);
      const up = floatToE4m3Up(x);
      assert.ok(E4M3_VALUES[down]! <= x && E4M3_VALUES[up]! >= x, `${x}`);
      if (E4M3_VALUES[down] === 0) assert.equal(down, 0x00, `down(${x}) is +0`);
      if (E4M3_VALUES[up] === 0) assert.equal(up, 0x00, `up(${x}) is +0`);
    }
  });

  it("pinned codes, the same in native/tests/hisparse_test_kv.cu (directedRoundingCase)", () => {
    const pins: Array<[number, number, number]> = [
      [0.1, 0x1c, 0x1d],
      [0.3, 0x29, 0x2a],
      [-2, 0xc0, 0xc0],
      [1000, 0x7e, 0x7e],
      [-0, 0x00, 0x00],
      [-0.0001, 0x81, 0x00],
      [1.9, 0x3f, 0x40],
      [7.5 / 512, 0x07, 0x08],
      [-600, 0xfe, 0xfe],
      [2 ** -10, 0x00, 0x01],
    ];
    for (const [x, down, up] of pins)
      assert.deepEqual([floatToE4m3Down(x), floatToE4m3Up(x)], [down, up], `${x}`);
  });

  it("folding commutes with rounding: min(rd(a), rd(b)) = rd(min(a, b)), max(ru(a), ru(b)) = ru(max(a, b))", () => {
    // rd and ru are monotone, so a digest folded key by key equals the rounded exact min / max.
    const rd = (x: number) => E4M3_VALUES[floatToE4m3Down(x)]!;
    const ru = (x: number) => E4M3_VALUES[floatToE4m3Up(x)]!;
    let seed = 12345;
    const rand = () => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed / 2 ** 32;
    };
    const sample = () => Math.fround((rand() - 0.5) * 2 ** (Math.floor(rand() * 22) - 12));
    for (let n = 0; n < 20000; n++) {
      const a = sample();
      const b = n % 3 === 0 ? Math.fround(a * (1 + (rand() - 0.5) / 64)) : sample(); // near ties too
      assert.equal(Math.min(rd(a), rd(b)), rd(Math.min(a, b)), `min ${a} ${b}`);
      assert.equal(Math.max(ru(a), ru(b)), ru(Math.max(a, b)), `max ${a} ${b}`);
      assert.ok(rd(a) <= a && ru(a) >= a, `${a} lies in [rd, ru]`);
    }
  });
});
