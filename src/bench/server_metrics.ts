/**
 * The server-side figures a benchmark reads from a server's Prometheus `/metrics` before and
 * after a run (vLLM's series names, so `vllm serve` answers too): prefix-cache counters,
 * preemptions, and the sums and counts of the TTFT and request phase histograms, whose deltas
 * give per-request means over the run.
 */

/** Sum and count of a histogram (seconds; requests), or null when the server has none. */
export interface HistogramTotals {
  sum: number;
  count: number;
}

/** Server counters read from /metrics (absent ones are null). */
export interface ServerCounters {
  prefixQueries: number | null;
  prefixHits: number | null;
  prefixHostHits: number | null;
  preemptions: number | null;
  /** `vllm:time_to_first_token_seconds`: first token − arrival at the engine, seconds. */
  ttft: HistogramTotals | null;
  /** `vllm:request_queue_time_seconds`: first scheduled − arrival (vllm/v1/metrics/stats.py). */
  queueTime: HistogramTotals | null;
  /** `vllm:request_prefill_time_seconds`: first token − first scheduled. */
  prefillTime: HistogramTotals | null;
}

/** Sums of a Prometheus series over its label sets (null when absent). */
export function seriesSum(text: string, name: string, label?: string): number | null {
  let sum: number | null = null;
  for (const line of text.split("\n")) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (!(rest.startsWith("{") || rest.startsWith(" "))) continue;
    if (label !== undefined && !rest.includes(label)) continue;
    const v = Number(line.slice(line.lastIndexOf(" ") + 1));
    if (Number.isFinite(v)) sum = (sum ?? 0) + v;
  }
  return sum;
}

/** A histogram's `_sum` and `_count` over its label sets; null when either is absent. */
function histogramTotals(text: string, name: string): HistogramTotals | null {
  const sum = seriesSum(text, `${name}_sum`);
  const count = seriesSum(text, `${name}_count`);
  return sum === null || count === null ? null : { sum, count };
}

/** Reads the counters of a server's /metrics; null when it has none. */
export async function readServerCounters(baseUrl: string, apiKey?: string): Promise<ServerCounters | null> {
  try {
    const r = await fetch(`${baseUrl}/metrics`, {
      headers: apiKey === undefined ? {} : { authorization: `Bearer ${apiKey}` },
    });
    if (!r.ok) return null;
    const t = await r.text();
    return {
      prefixQueries: seriesSum(t, "vllm:prefix_cache_queries_total"),
      prefixHits: seriesSum(t, "vllm:prefix_cache_hits_total"),
      prefixHostHits: seriesSum(t, "vllm:prefix_cache_hits_total", 'tier="host"'),
      preemptions: seriesSum(t, "vllm:num_preemptions_total"),
      ttft: histogramTotals(t, "vllm:time_to_first_token_seconds"),
      queueTime: histogramTotals(t, "vllm:request_queue_time_seconds"),
      prefillTime: histogramTotals(t, "vllm:request_prefill_time_seconds"),
    };
  } catch {
    return null;
  }
}

/** after − before; a series first seen after the run started from 0 (prom-client shows a labelled series once used). */
const diff = (a: number | null, b: number | null) => (a === null ? null : a - (b ?? 0));

const diffTotals = (a: HistogramTotals | null, b: HistogramTotals | null): HistogramTotals | null =>
  a === null ? null : { sum: a.sum - (b?.sum ?? 0), count: a.count - (b?.count ?? 0) };

/** The counters over a run: after − before. */
export function serverCountersDelta(after: ServerCounters, before: ServerCounters): ServerCounters {
  return {
    prefixQueries: diff(after.prefixQueries, before.prefixQueries),
    prefixHits: diff(after.prefixHits, before.prefixHits),
    prefixHostHits: diff(after.prefixHostHits, before.prefixHostHits),
    preemptions: diff(after.preemptions, before.preemptions),
    ttft: diffTotals(after.ttft, before.ttft),
    queueTime: diffTotals(after.queueTime, before.queueTime),
    prefillTime: diffTotals(after.prefillTime, before.prefillTime),
  };
}

/** Mean of a histogram delta in ms (sum / count × 1000); null without observations. */
export function meanMs(h: HistogramTotals | null | undefined): number | null {
  return h === null || h === undefined || h.count <= 0 ? null : (1000 * h.sum) / h.count;
}
