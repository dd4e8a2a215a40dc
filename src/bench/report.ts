/**
 * The text report of `bench serve`, laid out as `vllm bench serve` prints it (labels padded to
 * 40 columns, values with 2 decimals), so the two can be read side by side.
 */
import type { LatencyMetric } from "./metrics.js";
import type { BenchmarkResult } from "./serve.js";

const HEADERS: Record<LatencyMetric, [string, string]> = {
  ttft: ["TTFT", "Time to First Token"],
  tpot: ["TPOT", "Time per Output Token (excl. 1st token)"],
  itl: ["ITL", "Inter-token Latency"],
  e2el: ["E2EL", "End-to-end Latency"],
};

/** `s` centered in `width` columns, padded with `fill` (Python's "{:c^n}"). */
function center(s: string, width: number, fill: string): string {
  const total = Math.max(0, width - s.length);
  const left = Math.floor(total / 2);
  return fill.repeat(left) + s + fill.repeat(total - left);
}

function row(label: string, value: number | string): string {
  const v = typeof value === "number" && !Number.isInteger(value) ? value.toFixed(2) : String(value);
  return `${label.padEnd(40)} ${v}`;
}

function fixed(label: string, value: number): string {
  return `${label.padEnd(40)} ${value.toFixed(2)}`;
}

/** Report lines of one run. */
export function formatReport(
  r: BenchmarkResult,
  o: {
    maxConcurrency: number | null;
    requestRate: number;
    selectedMetrics: readonly LatencyMetric[];
    hasGoodput: boolean;
  },
): string[] {
  const m = r.metrics;
  const lines = [center(" Serving Benchmark Result ", 50, "=")];
  lines.push(row("Successful requests:", m.completed), row("Failed requests:", m.failed));
  if (o.maxConcurrency !== null) lines.push(row("Maximum request concurrency:", o.maxConcurrency));
  if (o.requestRate !== Number.POSITIVE_INFINITY)
    lines.push(fixed("Request rate configured (RPS):", o.requestRate));
  lines.push(
    fixed("Benchmark duration (s):", r.durationS),
    row("Total input tokens:", m.totalInput),
    row("Total generated tokens:", m.totalOutput),
    fixed("Request throughput (req/s):", m.requestThroughput),
  );
  if (o.hasGoodput) lines.push(fixed("Request goodput (req/s):", m.requestGoodput));
  lines.push(
    fixed("Output token throughput (tok/s):", m.outputThroughput),
    fixed("Peak output token throughput (tok/s):", m.maxOutputTokensPerS),
    fixed("Peak concurrent requests:", m.maxConcurrentRequests),
    fixed("Total token throughput (tok/s):", m.totalTokenThroughput),
  );
  for (const name of o.selectedMetrics) {
    const [short, header] = HEADERS[name];
    const s = m.latency[name];
    lines.push(
      center(header, 50, "-"),
      fixed(`Mean ${short} (ms):`, s.mean),
      fixed(`Median ${short} (ms):`, s.median),
    );
    for (const [p, v] of s.percentiles) lines.push(fixed(`P${p} ${short} (ms):`, v));
  }
  if (r.gpu !== null) {
    lines.push(
      center("GPU (nvidia-smi)", 50, "-"),
      row("GPUs sampled:", r.gpu.numGpus),
      fixed("Peak GPU memory used (MiB):", r.gpu.maxMemoryUsedMiB),
      fixed("Energy (J):", r.gpu.energyJ),
      fixed("Mean power (W):", r.gpu.meanPowerW),
    );
    if (m.totalOutput > 0) lines.push(fixed("Energy per output token (J):", r.gpu.energyJ / m.totalOutput));
  }
  lines.push("=".repeat(50));
  return lines;
}

/** Errors of failed requests, at most `limit` (vLLM prints the first 10). */
export function failedRequestLines(r: BenchmarkResult, limit = 10): string[] {
  return r.outputs
    .filter((o) => !o.success)
    .slice(0, limit)
    .map((o, i) => `Error ${i}: ${o.error}`);
}
