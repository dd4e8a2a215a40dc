/**
 * MetricsRegistry and StatsLogger with hand-made request outputs and a fake clock: exact
 * counter values, histogram observations (TTFT, ITL, E2E) and the stats line text.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Gauge } from "prom-client";
import type { StepStats } from "../../../src/engine/llm_engine.js";
import type { RequestOutput } from "../../../src/engine/outputs.js";
import { type EngineGauges, MetricsRegistry } from "../../../src/metrics/metrics_registry.js";
import { formatStatsLine, StatsLogger } from "../../../src/metrics/stats_logger.js";

const GAUGES: EngineGauges = {
  numRunningReqs: 3,
  numWaitingReqs: 5,
  kvCacheUsage: 0.25,
  numFreeBlocks: 96,
  numTotalBlocks: 128,
};

/** A delta output of one request: `n` new tokens at time `t` (seconds), arrival at 10.0. */
function output(n: number, t: number, first: number, finished: boolean): RequestOutput {
  return {
    requestId: "r",
    prompt: "p",
    promptTokenIds: [1, 2, 3, 4, 5, 6, 7],
    outputs: [
      {
        index: 0,
        text: "x".repeat(n),
        tokenIds: Array.from({ length: n }, () => 9),
        cumulativeLogprob: null,
        logprobs: null,
        finishReason: finished ? "length" : null,
        stopReason: null,
      },
    ],
    finished,
    numCachedTokens: 0,
    numHostCachedTokens: 0,
    metrics: {
      arrivalTime: 10.0,
      firstScheduledTime: 10.25,
      firstTokenTime: first,
      lastTokenTime: t,
      finishedTime: finished ? t : null,
    },
  };
}

/** Parses the exposition text into "series -> value". */
async function values(m: MetricsRegistry): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const line of (await m.metrics()).split("\n")) {
    if (line.startsWith("#") || line === "") continue;
    const i = line.lastIndexOf(" ");
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}

const L = '{model_name="m"}';

describe("MetricsRegistry", () => {
  it("gauges are read from the engine at scrape time, under vLLM's names", async () => {
    const m = new MetricsRegistry({ modelName: "m", gauges: () => GAUGES });
    const v = await values(m);
    assert.equal(v.get(`vllm:num_requests_running${L}`), 3);
    assert.equal(v.get(`vllm:num_requests_waiting${L}`), 5);
    assert.equal(v.get(`vllm:kv_cache_usage_perc${L}`), 0.25);
    assert.equal(v.get(`hisparse_kv_cache_free_blocks${L}`), 96);
    assert.equal(v.get(`hisparse_kv_cache_total_blocks${L}`), 128);
  });

  it("one request: prompt tokens once, every generated token, TTFT, one ITL per later output, E2E", async () => {
    const m = new MetricsRegistry({ modelName: "m", gauges: () => GAUGES });
    const t = m.trackRequest();
    // First token at 10.5 (TTFT 0.5 s), then tokens at 10.75 and (2 tokens) 11.0; finished.
    t.observe(output(1, 10.5, 10.5, false));
    t.observe(output(1, 10.75, 10.5, false));
    t.observe(output(2, 11.0, 10.5, true));
    t.observe(output(1, 12.0, 10.5, true)); // after the end: ignored
    const v = await values(m);
    assert.equal(v.get(`vllm:prompt_tokens_total${L}`), 7);
    assert.equal(v.get(`vllm:generation_tokens_total${L}`), 4);
    assert.equal(v.get(`vllm:time_to_first_token_seconds_sum${L}`), 0.5);
    assert.equal(v.get(`vllm:time_to_first_token_seconds_count${L}`), 1);
    assert.equal(v.get(`vllm:inter_token_latency_seconds_count${L}`), 2);
    assert.equal(v.get(`vllm:inter_token_latency_seconds_sum${L}`), 0.5);
    assert.equal(v.get(`vllm:e2e_request_latency_seconds_sum${L}`), 1.0);
    // Phases (vLLM's, at the finish): queued 10.0 -> 10.25, prefill 10.25 -> 10.5 (first token),
    // decode 10.5 -> 11.0 (last token), inference 10.25 -> 11.0; queued + prefill = TTFT.
    assert.equal(v.get(`vllm:request_queue_time_seconds_sum${L}`), 0.25);
    assert.equal(v.get(`vllm:request_prefill_time_seconds_sum${L}`), 0.25);
    assert.equal(v.get(`vllm:request_decode_time_seconds_sum${L}`), 0.5);
    assert.equal(v.get(`vllm:request_inference_time_seconds_sum${L}`), 0.75);
    for (const h of ["queue", "prefill", "decode", "inference"])
      assert.equal(v.get(`vllm:request_${h}_time_seconds_count${L}`), 1, h);
    // vLLM's request latency buckets: 0.25 s falls in le=0.3, 0.75 s in le=0.8.
    assert.equal(v.get('vllm:request_prefill_time_seconds_bucket{le="0.3",model_name="m"}'), 1);
    assert.equal(v.get('vllm:request_inference_time_seconds_bucket{le="0.5",model_name="m"}'), 0);
    assert.equal(v.get('vllm:request_inference_time_seconds_bucket{le="0.8",model_name="m"}'), 1);
    assert.equal(v.get(`vllm:request_generation_tokens_sum${L}`), 4);
    assert.equal(v.get(`vllm:request_prompt_tokens_sum${L}`), 7);
    assert.equal(v.get('vllm:request_success_total{model_name="m",finished_reason="length"}'), 1);
    assert.deepEqual([m.numPromptTokens, m.numGenerationTokens], [7, 4]);
  });

  it("an aborted request counts under finished_reason abort, once", async () => {
    const m = new MetricsRegistry({ modelName: "m", gauges: () => GAUGES });
    const t = m.trackRequest();
    t.observe(output(1, 10.5, 10.5, false));
    t.abort();
    t.abort();
    const v = await values(m);
    assert.equal(v.get('vllm:request_success_total{model_name="m",finished_reason="abort"}'), 1);
    assert.equal(
      v.get(`vllm:e2e_request_latency_seconds_count${L}`) ?? 0,
      0,
      "no latency for an aborted request",
    );
    // It was scheduled and had its first token: its queue time counts, no other phase.
    assert.equal(v.get(`vllm:request_queue_time_seconds_count${L}`), 1);
    assert.equal(v.get(`vllm:request_queue_time_seconds_sum${L}`), 0.25);
    // (prom-client prints a series only once it has been observed.)
    assert.equal(v.get(`vllm:request_prefill_time_seconds_count${L}`) ?? 0, 0);
    assert.equal(v.get(`vllm:request_inference_time_seconds_count${L}`) ?? 0, 0);
  });

  it("step events turn the scheduler's cumulative counters into counter increments", async () => {
    const m = new MetricsRegistry({ modelName: "m", gauges: () => GAUGES });
    const step = (pre: number, q: number, h: number, hostHits = 0): StepStats => ({
      numScheduledTokens: 1,
      numPromptTokens: 0,
      numGenerationTokens: 1,
      scheduler: {
        numRunningReqs: 1,
        numWaitingReqs: 0,
        kvCacheUsage: 0,
        numPreemptions: pre,
        prefixCacheQueries: q,
        prefixCacheHits: h,
        prefixCacheHostHits: hostHits,
      },
    });
    m.onStep(step(1, 32, 16));
    m.onStep(null);
    m.onStep(step(3, 48, 16));
    // HiSparse: 8 more tokens hit, 4 of them on pages found only in the host tier.
    m.onStep(step(3, 64, 24, 4));
    const v = await values(m);
    assert.equal(v.get(`vllm:num_preemptions_total${L}`), 3);
    assert.equal(v.get(`vllm:prefix_cache_queries_total${L}`), 64);
    assert.equal(v.get(`vllm:prefix_cache_hits_total{model_name="m",tier="device"}`), 20);
    assert.equal(v.get(`vllm:prefix_cache_hits_total{model_name="m",tier="host"}`), 4);
  });

  it("extensions add series on the registry and refresh them through collectors", async () => {
    const m = new MetricsRegistry({ modelName: "m", gauges: () => GAUGES });
    const g = new Gauge({ name: "hisparse_host_pool_used_blocks", help: "test", registers: [m.registry] });
    let used = 0;
    m.addCollector(() => {
      used += 5;
      g.set(used);
    });
    assert.equal((await values(m)).get("hisparse_host_pool_used_blocks"), 5);
    assert.equal((await values(m)).get("hisparse_host_pool_used_blocks"), 10);
  });
});

describe("StatsLogger", () => {
  it("formats vLLM's line", () => {
    assert.equal(
      formatStatsLine(12.345, 0, GAUGES),
      "Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 3 reqs, Waiting: 5 reqs, GPU KV cache usage: 25.0%",
    );
  });

  it("names the CPU as the KV cache's device on the CPU backend", () => {
    assert.match(formatStatsLine(0, 0, GAUGES, "CPU"), /, CPU KV cache usage: 25\.0%$/);
    const lines: string[] = [];
    const log = { info: (x: string) => lines.push(x), debug: (x: string) => lines.push(x) };
    const source = { numPromptTokens: 0, numGenerationTokens: 0, gauges: () => GAUGES };
    assert.match(new StatsLogger(source, log, 0, () => 0, "CPU").logOnce(), /CPU KV cache usage/);
  });

  it("throughput over the interval; info while busy, debug when idle twice; extension lines follow", () => {
    const source = { numPromptTokens: 0, numGenerationTokens: 0, gauges: () => GAUGES };
    const lines: [string, string][] = [];
    const log = {
      info: (s: string) => lines.push(["info", s]),
      debug: (s: string) => lines.push(["debug", s]),
    };
    let now = 100;
    const s = new StatsLogger(source, log, 10, () => now);
    s.addLine(() => "sparse_block_state: ACTIVE=1");
    now = 110;
    source.numPromptTokens = 200;
    source.numGenerationTokens = 50;
    assert.match(
      s.logOnce(),
      /^Avg prompt throughput: 20\.0 tokens\/s, Avg generation throughput: 5\.0 tokens\/s/,
    );
    now = 120;
    s.logOnce(); // idle, but the previous interval was busy: still info
    now = 130;
    s.logOnce(); // idle twice: debug
    assert.deepEqual(
      lines.map(([lvl, l]) => [lvl, l.slice(0, 40)]),
      [
        ["info", "Avg prompt throughput: 20.0 tokens/s, Av"],
        ["info", "sparse_block_state: ACTIVE=1"],
        ["info", "Avg prompt throughput: 0.0 tokens/s, Avg"],
        ["info", "sparse_block_state: ACTIVE=1"],
        ["debug", "Avg prompt throughput: 0.0 tokens/s, Avg"],
        ["debug", "sparse_block_state: ACTIVE=1"],
      ],
    );
  });
});
