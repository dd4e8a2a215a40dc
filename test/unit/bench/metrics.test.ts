/** Goodput parsing and the peak figures of vLLM's calculate_metrics. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  calculateMetrics,
  metricsJson,
  parseGoodput,
  peakConcurrency,
  peakTokensPerSecond,
} from "../../../src/bench/metrics.js";
import type { RequestFuncOutput } from "../../../src/bench/request_func.js";

function out(
  startTime: number,
  ttft: number,
  itl: number[],
  over: Partial<RequestFuncOutput> = {},
): RequestFuncOutput {
  return {
    success: true,
    generatedText: "",
    latency: ttft + itl.reduce((a, b) => a + b, 0),
    outputTokens: 1 + itl.length,
    ttft,
    itl,
    promptLen: 8,
    error: "",
    startTime,
    ...over,
  };
}

describe("bench metrics", () => {
  it("--goodput pairs parse into SLOs; bad pairs name the problem", () => {
    assert.deepEqual(parseGoodput(["ttft:500", "tpot:50.5", "e2el:0"]), { ttft: 500, tpot: 50.5, e2el: 0 });
    assert.throws(
      () => parseGoodput(["ttft=5"]),
      /--goodput takes KEY:VALUE pairs in milliseconds \(e\.g\. ttft:500\), got "ttft=5"/,
    );
    assert.throws(() => parseGoodput(["itl:5"]), /--goodput metric must be ttft, tpot or e2el, got "itl"/);
    assert.throws(() => parseGoodput(["ttft:-1"]), /--goodput value must be >= 0/);
  });

  it("peak tokens per second counts token chunks in 1-second buckets from the first start", () => {
    // Request A starts at 10.0: chunks at 10.2, 10.9, 11.1; B starts at 10.5: chunks at 10.6, 11.4.
    // Buckets from 10.0: [0,1) holds 10.2, 10.9, 10.6 → 3; [1,2) holds 11.1, 11.4 → 2.
    const a = out(10.0, 0.2, [0.7, 0.2]);
    const b = out(10.5, 0.1, [0.8]);
    assert.equal(peakTokensPerSecond([a, b]), 3);
  });

  it("peak concurrency treats intervals as [start, end): back-to-back requests do not overlap", () => {
    const a = out(0, 1, []); // [0, 1)
    const b = out(1, 1, []); // [1, 2)
    const c = out(0.5, 1, []); // [0.5, 1.5)
    assert.equal(peakConcurrency([a, b]), 1);
    assert.equal(peakConcurrency([a, b, c]), 2);
  });

  it("without usage, output tokens are counted by the tokenizer, else by token chunks", () => {
    const o = out(0, 0.5, [0.25, 0.25], { outputTokens: 0, generatedText: "one two three four" });
    const counted = calculateMetrics([o], 1, [99], {}, (t) => t.split(" ").length);
    assert.deepEqual(counted.outputLens, [4]);
    assert.deepEqual(calculateMetrics([o], 1, [99], {}).outputLens, [3]);
    // TPOT with 4 tokens: (1.0 − 0.5)/3.
    assert.equal(counted.latency.tpot.mean, (0.5 / 3) * 1000);
  });

  it("the JSON has request_goodput null without SLOs and p<P>_<metric>_ms keys", () => {
    const m = calculateMetrics([out(0, 0.5, [0.5])], 2, [50, 99.9], {});
    const j = metricsJson(m, ["ttft", "e2el"], false);
    assert.equal(j.request_goodput, null);
    assert.deepEqual(
      Object.keys(j).filter((k) => k.endsWith("_ms")),
      [
        "mean_ttft_ms",
        "median_ttft_ms",
        "std_ttft_ms",
        "p50_ttft_ms",
        "p99.9_ttft_ms",
        "mean_e2el_ms",
        "median_e2el_ms",
        "std_e2el_ms",
        "p50_e2el_ms",
        "p99.9_e2el_ms",
      ],
    );
    assert.equal(j.request_throughput, 0.5);
  });
});
