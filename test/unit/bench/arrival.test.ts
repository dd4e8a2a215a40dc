/** Arrival times of `bench serve` follow vllm/benchmarks/serve.py get_request. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { arrivalOffsets } from "../../../src/bench/arrival.js";
import { Rng } from "../../../src/bench/rng.js";

describe("arrivalOffsets", () => {
  it("rate inf sends every request at 0", () => {
    assert.deepEqual(arrivalOffsets(4, Number.POSITIVE_INFINITY, 1, new Rng(0)), [0, 0, 0, 0]);
  });

  it("burstiness inf gives constant gaps of 1/rate, the first request included", () => {
    assert.deepEqual(arrivalOffsets(4, 2, Number.POSITIVE_INFINITY, new Rng(0)), [0.5, 1, 1.5, 2]);
  });

  it("Gamma gaps are rescaled so the last request leaves at exactly n/rate", () => {
    for (const b of [0.25, 1, 4]) {
      const t = arrivalOffsets(50, 10, b, new Rng(3));
      assert.equal(t.length, 50);
      assert.ok(Math.abs(t[49]! - 5) < 1e-12, `last ${t[49]} for burstiness ${b}`);
      for (let i = 1; i < t.length; i++) assert.ok(t[i]! >= t[i - 1]!);
    }
  });

  it("lower burstiness gives more uneven gaps (coefficient of variation ≈ 1/sqrt(b))", () => {
    const cv = (b: number) => {
      const t = arrivalOffsets(4000, 10, b, new Rng(11));
      const gaps = t.map((x, i) => x - (i === 0 ? 0 : t[i - 1]!));
      const m = gaps.reduce((a, c) => a + c, 0) / gaps.length;
      const s = Math.sqrt(gaps.reduce((a, c) => a + (c - m) ** 2, 0) / gaps.length);
      return s / m;
    };
    assert.ok(Math.abs(cv(1) - 1) < 0.05);
    assert.ok(Math.abs(cv(0.25) - 2) < 0.15);
    assert.ok(Math.abs(cv(4) - 0.5) < 0.05);
  });

  it("a rate or burstiness <= 0 is refused with one sentence", () => {
    assert.throws(
      () => arrivalOffsets(3, 0, 1, new Rng(0)),
      /^RangeError: the request rate must be > 0 \(or inf\), got 0$/,
    );
    assert.throws(() => arrivalOffsets(3, 1, 0, new Rng(0)), /burstiness must be > 0/);
  });
});
