/**
 * Statistics equal numpy's bit for bit on a small sample (values printed by numpy 2.4:
 * np.mean, np.std, np.median, np.percentile with the default "linear" method).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { mean, median, percentile, std } from "../../../src/bench/stats.js";

const X = [3, 1, 4, 1, 5, 9, 2, 6];

describe("numpy-compatible statistics", () => {
  it("mean, population std and median", () => {
    assert.equal(mean(X), 3.875);
    assert.equal(std(X), 2.5708704751503917);
    assert.equal(median(X), 3.5);
  });

  it("percentiles interpolate linearly between closest ranks, as np.percentile", () => {
    // Sorted [1 1 2 3 4 5 6 9]; position p/100 × 7.
    const expected: [number, number][] = [
      [0, 1],
      [10, 1],
      [25, 1.75],
      [50, 3.5],
      [75, 5.25],
      [90, 6.8999999999999995],
      [99, 8.79],
      [99.9, 8.979000000000001],
      [100, 9],
    ];
    for (const [p, v] of expected) assert.equal(percentile(X, p), v, `p${p}`);
    assert.equal(percentile([7], 99), 7);
  });

  it("an empty sample counts as 0 (vLLM's `np.mean(xs or 0)`), and p outside [0, 100] throws", () => {
    assert.equal(mean([]), 0);
    assert.equal(std([]), 0);
    assert.equal(percentile([], 99), 0);
    assert.throws(() => percentile(X, 101), /percentile must be in \[0, 100\]/);
  });
});
