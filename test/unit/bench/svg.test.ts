/** The sweep chart: axis ticks and the plotted coordinates of a known sweep. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { niceTicks, sweepSvg } from "../../../src/bench/svg.js";

describe("sweep SVG", () => {
  it("ticks go from 0 to a 1-2-5 multiple at or above the maximum", () => {
    assert.deepEqual(niceTicks(100), [0, 20, 40, 60, 80, 100]);
    assert.deepEqual(niceTicks(7.3), [0, 2, 4, 6, 8]);
    assert.deepEqual(niceTicks(0.9), [0, 0.2, 0.4, 0.6, 0.8, 1]);
    assert.deepEqual(niceTicks(0), [0, 1]);
  });

  it("plots throughput and latencies per concurrency, evenly spaced", () => {
    const svg = sweepSvg(
      [
        {
          concurrency: 1,
          outputThroughput: 50,
          requestThroughput: 1,
          medianTtftMs: 10,
          p99TtftMs: 20,
          medianTpotMs: 5,
          p99TpotMs: null,
        },
        {
          concurrency: 2,
          outputThroughput: 80,
          requestThroughput: 2,
          medianTtftMs: 15,
          p99TtftMs: 30,
          medianTpotMs: 6,
          p99TpotMs: null,
        },
        {
          concurrency: 4,
          outputThroughput: 100,
          requestThroughput: 3,
          medianTtftMs: 25,
          p99TtftMs: 40,
          medianTpotMs: 8,
          p99TpotMs: null,
        },
      ],
      "ref-small <random>",
    );
    assert.ok(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"'));
    assert.ok(svg.includes("ref-small &lt;random&gt;"), "title escaped");
    // Throughput panel: plot area x 64..344 (w 280), y 74..242 (h 168), axis top 100:
    // points (64, 242 − 50/100 × 168 = 158), (204, 107.6), (344, 74).
    assert.ok(svg.includes('points="64,158 204,107.6 344,74"'), svg);
    // TTFT panel (x offset 360, axis top 40): median 10, 15, 25 → y 200, 179, 137; P99 too.
    assert.ok(svg.includes('points="424,200 564,179 704,137"'));
    assert.ok(svg.includes(">P99 TTFT<"));
    // TPOT has no P99 (not selected): only the median line.
    assert.ok(svg.includes(">median TPOT<") && !svg.includes(">P99 TPOT<"));
    assert.equal((svg.match(/<polyline/g) ?? []).length, 4);
  });
});
