/**
 * Serving metrics from per-request timings, with `vllm bench serve`'s definitions and JSON
 * field names (vllm/benchmarks/serve.py `calculate_metrics`, `benchmark`).
 */
import type { RequestFuncOutput } from "./request_func.js";
import { mean, median, percentile, std } from "./stats.js";

/** Latency metrics with distributions (`--percentile-metrics`). */
export const LATENCY_METRICS = ["ttft", "tpot", "itl", "e2el"] as const;
export type LatencyMetric = (typeof LATENCY_METRICS)[number];

/** Service-level objectives of goodput, in milliseconds (`--goodput ttft:ms tpot:ms e2el:ms`). */
export type GoodputSlos = Partial<Record<"ttft" | "tpot" | "e2el", number>>;

/** Distribution summary of one latency metric, in milliseconds. */
export interface MetricSummary {
  mean: number;
  median: number;
  std: number;
  /** [percentile, value] for each selected percentile. */
  percentiles: [number, number][];
}

/** Aggregates of one run (vLLM BenchmarkMetrics); rates per second of `duration`. */
export interface BenchmarkMetrics {
  completed: number;
  failed: number;
  totalInput: number;
  totalOutput: number;
  requestThroughput: number;
  requestGoodput: number;
  outputThroughput: number;
  totalTokenThroughput: number;
  latency: Record<LatencyMetric, MetricSummary>;
  /** Most output tokens received within one one-second bucket of the run. */
  maxOutputTokensPerS: number;
  /** Most requests in flight at once (sweep over [start, end) intervals). */
  maxConcurrentRequests: number;
  /** Output tokens of each request (0 for failed ones), in request order. */
  outputLens: number[];
}

/**
 * Parses `--goodput` pairs ("ttft:500").
 * @throws Error naming the bad pair (unknown metric, not KEY:VALUE, negative value).
 */
export function parseGoodput(pairs: readonly string[]): GoodputSlos {
  const slos: GoodputSlos = {};
  for (const pair of pairs) {
    const m = /^([a-z0-9]+):([^:]+)$/.exec(pair.trim());
    const v = m === null ? Number.NaN : Number(m[2]);
    if (m === null || !Number.isFinite(v))
      throw new Error(`--goodput takes KEY:VALUE pairs in milliseconds (e.g. ttft:500), got "${pair}"`);
    const key = m[1]!;
    if (key !== "ttft" && key !== "tpot" && key !== "e2el")
      throw new Error(`--goodput metric must be ttft, tpot or e2el, got "${key}"`);
    if (v < 0) throw new Error(`--goodput value must be >= 0, got ${pair}`);
    slos[key] = v;
  }
  return slos;
}

/** Summary in milliseconds of samples in seconds. */
function summarize(xs: readonly number[], selectedPercentiles: readonly number[]): MetricSummary {
  return {
    mean: mean(xs) * 1000,
    median: median(xs) * 1000,
    std: std(xs) * 1000,
    percentiles: selectedPercentiles.map((p) => [p, percentile(xs, p) * 1000]),
  };
}

/**
 * Computes the run's metrics. Per successful request: output tokens = usage.completion_tokens,
 * else `countTokens(generatedText)`, else its number of token chunks (vLLM would count 1);
 * TPOT = (E2EL − TTFT) / (output tokens − 1) for requests with more than one output token (and
 * 0 for goodput otherwise); ITLs of all requests pooled. A request is "good" when it meets every
 * given SLO (value <= SLO). Throughputs divide by `durationS`.
 * @param durationS wall time of the run in seconds (> 0)
 */
export function calculateMetrics(
  outputs: readonly RequestFuncOutput[],
  durationS: number,
  selectedPercentiles: readonly number[],
  goodput: GoodputSlos,
  countTokens?: (text: string) => number,
): BenchmarkMetrics {
  const outputLens: number[] = [];
  const ttfts: number[] = [];
  const tpots: number[] = [];
  const allTpots: number[] = [];
  const itls: number[] = [];
  const e2els: number[] = [];
  let totalInput = 0;
  let completed = 0;
  let good = 0;
  for (const o of outputs) {
    if (!o.success) {
      outputLens.push(0);
      continue;
    }
    const len = o.outputTokens > 0 ? o.outputTokens : (countTokens?.(o.generatedText) ?? 1 + o.itl.length);
    outputLens.push(len);
    totalInput += o.promptLen;
    let tpot = 0;
    if (len > 1) {
      tpot = (o.latency - o.ttft) / (len - 1);
      tpots.push(tpot);
    }
    allTpots.push(tpot);
    itls.push(...o.itl);
    ttfts.push(o.ttft);
    e2els.push(o.latency);
    completed++;
    const meets = (slo: number | undefined, v: number) => slo === undefined || slo / 1000 >= v;
    if (
      Object.keys(goodput).length > 0 &&
      meets(goodput.ttft, o.ttft) &&
      meets(goodput.tpot, tpot) &&
      meets(goodput.e2el, o.latency)
    )
      good++;
  }
  const totalOutput = outputLens.reduce((a, b) => a + b, 0);
  const ok = outputs.filter((o) => o.success);
  return {
    completed,
    failed: outputs.length - completed,
    totalInput,
    totalOutput,
    requestThroughput: completed / durationS,
    requestGoodput: good / durationS,
    outputThroughput: totalOutput / durationS,
    totalTokenThroughput: (totalInput + totalOutput) / durationS,
    latency: {
      ttft: summarize(ttfts, selectedPercentiles),
      tpot: summarize(tpots, selectedPercentiles),
      itl: summarize(itls, selectedPercentiles),
      e2el: summarize(e2els, selectedPercentiles),
    },
    maxOutputTokensPerS: peakTokensPerSecond(ok),
    maxConcurrentRequests: peakConcurrency(ok),
    outputLens,
  };
}

/**
 * Most token chunks received in one second (vLLM: buckets of one second from the earliest
 * start; a chunk at start + ttft + itl[0] + ... falls in bucket floor(t − first start)).
 */
export function peakTokensPerSecond(ok: readonly RequestFuncOutput[]): number {
  if (ok.length === 0) return 0;
  const t0 = Math.min(...ok.map((o) => o.startTime));
  const buckets = new Map<number, number>();
  for (const o of ok) {
    let t = o.startTime + o.ttft;
    const times = [t];
    for (const gap of o.itl) {
      t += gap;
      times.push(t);
    }
    for (const x of times) {
      const b = Math.floor(x - t0);
      buckets.set(b, (buckets.get(b) ?? 0) + 1);
    }
  }
  return Math.max(...buckets.values());
}

/** Largest number of requests in flight at once over half-open [start, start + E2EL) intervals. */
export function peakConcurrency(ok: readonly RequestFuncOutput[]): number {
  const events: [number, number][] = [];
  for (const o of ok) events.push([o.startTime, 1], [o.startTime + o.latency, -1]);
  // Ends before starts at equal times (half-open intervals).
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let cur = 0;
  let peak = 0;
  for (const [, d] of events) {
    cur += d;
    peak = Math.max(peak, cur);
  }
  return peak;
}

/** "99" for 99, "99.9" for 99.9 (vLLM's p_word). */
export function percentileWord(p: number): string {
  // JS and Python print 99 / 99.9 alike.
  return String(p);
}

/**
 * The metric fields of vLLM's result JSON: `completed`, `failed`, `total_input_tokens`,
 * `total_output_tokens`, `request_throughput`, `request_goodput` (null without SLOs),
 * `output_throughput`, `total_token_throughput`, `max_output_tokens_per_s`,
 * `max_concurrent_requests`, and for each selected metric `mean_<m>_ms`, `median_<m>_ms`,
 * `std_<m>_ms`, `p<P>_<m>_ms`.
 */
export function metricsJson(
  m: BenchmarkMetrics,
  selectedMetrics: readonly LatencyMetric[],
  hasGoodput: boolean,
): Record<string, number | null> {
  const r: Record<string, number | null> = {
    completed: m.completed,
    failed: m.failed,
    total_input_tokens: m.totalInput,
    total_output_tokens: m.totalOutput,
    request_throughput: m.requestThroughput,
    request_goodput: hasGoodput ? m.requestGoodput : null,
    output_throughput: m.outputThroughput,
    total_token_throughput: m.totalTokenThroughput,
    max_output_tokens_per_s: m.maxOutputTokensPerS,
    max_concurrent_requests: m.maxConcurrentRequests,
  };
  for (const name of selectedMetrics) {
    const s = m.latency[name];
    r[`mean_${name}_ms`] = s.mean;
    r[`median_${name}_ms`] = s.median;
    r[`std_${name}_ms`] = s.std;
    for (const [p, v] of s.percentiles) r[`p${percentileWord(p)}_${name}_ms`] = v;
  }
  return r;
}
