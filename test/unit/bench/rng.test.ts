/**
 * The seeded generator: xoshiro128** outputs equal the authors' C reference (compiled with gcc
 * from prng.di.unimi.it/xoshiro128starstar.c), seeding with splitmix64 equals the C splitmix64,
 * and the derived distributions have the right moments on a fixed seed.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../../src/bench/rng.js";

describe("Rng", () => {
  it("xoshiro128** from state {1, 2, 3, 4} gives the reference outputs", () => {
    const r = Rng.fromState([1, 2, 3, 4]);
    const got = Array.from({ length: 6 }, () => r.nextUint32());
    assert.deepEqual(got, [11520, 0, 5927040, 70819200, 2031721883, 1637235492]);
  });

  it("seed 42 seeds the state with two splitmix64 outputs (C reference values)", () => {
    const r = new Rng(42);
    assert.deepEqual(
      Array.from({ length: 4 }, () => r.nextUint32()),
      [1776835114, 4165204688, 17111135, 2317295270],
    );
  });

  it("integer(low, high) covers both bounds and nothing outside", () => {
    const r = new Rng(1);
    const seen = new Set<number>();
    for (let i = 0; i < 2000; i++) seen.add(r.integer(3, 7));
    assert.deepEqual([...seen].sort(), [3, 4, 5, 6, 7]);
    assert.throws(() => r.integer(5, 4), /invalid integer range/);
  });

  it("gamma(k, θ) has mean kθ and variance kθ² (20 000 draws, seed 7, within 3%)", () => {
    for (const [k, theta] of [
      [0.5, 2],
      [1, 0.25],
      [4, 0.5],
    ] as const) {
      const r = new Rng(7);
      const xs = Array.from({ length: 20000 }, () => r.gamma(k, theta));
      const m = xs.reduce((a, b) => a + b, 0) / xs.length;
      const v = xs.reduce((a, b) => a + (b - m) ** 2, 0) / xs.length;
      assert.ok(Math.abs(m / (k * theta) - 1) < 0.03, `mean ${m} for k=${k}`);
      assert.ok(Math.abs(v / (k * theta * theta) - 1) < 0.03, `variance ${v} for k=${k}`);
      assert.ok(xs.every((x) => x > 0));
    }
  });

  it("the same seed gives the same sequence; shuffle is a permutation", () => {
    const a = new Rng(123);
    const b = new Rng(123);
    assert.deepEqual(
      Array.from({ length: 5 }, () => a.random()),
      Array.from({ length: 5 }, () => b.random()),
    );
    const s = new Rng(5).shuffle([1, 2, 3, 4, 5, 6]);
    assert.deepEqual([...s].sort(), [1, 2, 3, 4, 5, 6]);
  });
});
