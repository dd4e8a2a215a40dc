/**
 * vLLM's request phase histograms from a real engine run (ref-small on the CPU backend, through
 * AsyncLLM as the server runs it, each request's outputs fed to a RequestTracker):
 * `vllm:request_{queue,prefill,decode,inference}_time_seconds` hold exactly the intervals of the
 * engine's own timestamps (vllm/v1/metrics/stats.py semantics), queued + prefill equals the TTFT
 * histogram, and with `--max-num-seqs 1` the second request's queue time covers the first one's
 * run: it is first scheduled after the first one's last token.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { makeEngineArgs } from "../../../src/config/engine_args.js";
import { makeSamplingParams } from "../../../src/core/sampling_params.js";
import { AsyncLLM } from "../../../src/engine/async_llm.js";
import type { RequestMetrics } from "../../../src/engine/outputs.js";
import { MetricsRegistry } from "../../../src/metrics/metrics_registry.js";
import { refModelDir } from "../../helpers/reference.js";

const L = '{model_name="ref-small"}';
/** Histogram sums are float additions of the same differences: equal to rounding. */
const EPS = 1e-9;

describe("request phase histograms (real engine, CPU)", () => {
  let llm: AsyncLLM;
  before(async () => {
    llm = await AsyncLLM.create(
      makeEngineArgs({ model: refModelDir("ref-small")!, device: "cpu", maxModelLen: 256, maxNumSeqs: 1 }),
    );
  });
  after(() => llm.shutdown());

  it("two requests, max-num-seqs 1: the histograms hold the engine's intervals; B queues behind A", async () => {
    const metrics = new MetricsRegistry({
      modelName: "ref-small",
      gauges: () => ({
        numRunningReqs: 0,
        numWaitingReqs: 0,
        kvCacheUsage: 0,
        numFreeBlocks: 0,
        numTotalBlocks: 0,
      }),
    });
    const params = makeSamplingParams({ temperature: 0, maxTokens: 6, ignoreEos: true });
    const run = async (id: string, prompt: number[]): Promise<RequestMetrics> => {
      const tracker = metrics.trackRequest();
      let last: RequestMetrics | null = null;
      for await (const out of llm.generate({ promptTokenIds: prompt }, params, { requestId: id })) {
        tracker.observe(out);
        last = out.metrics;
      }
      return last!;
    };
    const [a, b] = await Promise.all([
      run(
        "A",
        Array.from({ length: 96 }, (_, i) => 300 + i),
      ),
      run(
        "B",
        Array.from({ length: 64 }, (_, i) => 700 + i),
      ),
    ]);
    const v = new Map<string, number>();
    for (const line of (await metrics.metrics()).split("\n")) {
      if (line.startsWith("#") || line === "") continue;
      v.set(line.slice(0, line.lastIndexOf(" ")), Number(line.slice(line.lastIndexOf(" ") + 1)));
    }
    const sum = (h: string) => v.get(`vllm:request_${h}_time_seconds_sum${L}`)!;
    for (const h of ["queue", "prefill", "decode", "inference"])
      assert.equal(v.get(`vllm:request_${h}_time_seconds_count${L}`), 2, h);

    // B is scheduled only once A is gone (one running request at most): after A's last token.
    assert.ok(b.firstScheduledTime! >= a.lastTokenTime!, JSON.stringify({ a, b }));
    // The histograms hold the engine's own intervals.
    const queued = (m: RequestMetrics) => m.firstScheduledTime! - m.arrivalTime;
    const prefill = (m: RequestMetrics) => m.firstTokenTime! - m.firstScheduledTime!;
    const decode = (m: RequestMetrics) => m.lastTokenTime! - m.firstTokenTime!;
    assert.ok(Math.abs(sum("queue") - (queued(a) + queued(b))) < EPS);
    assert.ok(Math.abs(sum("prefill") - (prefill(a) + prefill(b))) < EPS);
    assert.ok(Math.abs(sum("decode") - (decode(a) + decode(b))) < EPS);
    assert.ok(Math.abs(sum("inference") - (sum("prefill") + sum("decode"))) < EPS);
    // B's queue time covers A's whole run after B arrived; A's prefill and both decodes (5
    // tokens after the first) took real steps.
    assert.ok(queued(b) >= a.lastTokenTime! - b.arrivalTime);
    assert.ok(queued(b) > queued(a), `B queued ${queued(b)} s, A ${queued(a)} s`);
    assert.ok(prefill(a) > 0 && decode(a) > 0 && decode(b) > 0);
    // TTFT (first token - arrival) is queued + prefill, request by request and in sum.
    const ttft = v.get(`vllm:time_to_first_token_seconds_sum${L}`)!;
    assert.ok(Math.abs(ttft - (sum("queue") + sum("prefill"))) < EPS, `${ttft} vs queue + prefill`);
  });
});
