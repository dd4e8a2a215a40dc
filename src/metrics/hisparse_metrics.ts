/**
 * HiSparse observability (DESIGN.md §4): Prometheus series and the periodic log line. Takes the
 * engine's cumulative {@link HiSparseStats} (StepStats.hisparse); self-contained, so it only
 * needs a prom-client Registry from whoever serves /metrics.
 */
import { Counter, Gauge, type Registry } from "prom-client";
import type { HiSparseStats } from "../core/hisparse/plan.js";
import { PageState } from "../core/hisparse/residency.js";

/** The label every HiSparse series carries (metrics_registry.ts labels its series alike). */
type ModelLabel = "model_name";

/**
 * The HiSparse series: counters `hisparse_cache_hits_total`, `hisparse_cache_misses_total`,
 * `hisparse_host_to_device_bytes_total`, `hisparse_spilled_pages_total` (DESIGN.md §4; vLLM's
 * `vllm:hisparse_cache_hits` etc.), `hisparse_device_to_host_bytes_total` (eager mirrors) and
 * `hisparse_sparse_decodes_total` (request decode steps that attended sparsely);
 * gauges `hisparse_pages{state="ACTIVE"|"SPARSE"|"INACTIVE"}`, `hisparse_host_pool_used_pages`,
 * `hisparse_host_pool_usage` (fraction in [0, 1]) and `hisparse_sparse_requests`.
 * Every series carries `model_name` (the served model name), as vLLM's series and the server's
 * `hisparse_kv_cache_*` gauges do (metrics_registry.ts), so one dashboard filters them alike.
 */
export class HiSparseMetrics {
  private readonly labels: Record<ModelLabel, string>;
  private readonly hits: Counter<ModelLabel>;
  private readonly misses: Counter<ModelLabel>;
  private readonly h2dBytes: Counter<ModelLabel>;
  private readonly d2hBytes: Counter<ModelLabel>;
  private readonly spilled: Counter<ModelLabel>;
  private readonly sparseDecodes: Counter<ModelLabel>;
  private readonly pages: Gauge<ModelLabel | "state">;
  private readonly hostUsed: Gauge<ModelLabel>;
  private readonly hostUsage: Gauge<ModelLabel>;
  private readonly sparseRequests: Gauge<ModelLabel>;
  /** Totals already added to the counters. */
  private last: HiSparseStats | null = null;

  /**
   * Registers the series in `registry`, labelled `model_name="<modelName>"`; the counters start
   * at 0, so they are scraped before the first sparse step.
   * @param modelName the served model name (MetricsRegistry's `model_name`).
   * @throws Error when the series are already registered in `registry`.
   */
  constructor(registry: Registry, modelName: string) {
    this.labels = { model_name: modelName };
    const registers = [registry];
    const labelNames = ["model_name"] as const;
    const counter = (name: string, help: string) => {
      const c = new Counter({ name, help, labelNames, registers });
      c.inc(this.labels, 0);
      return c;
    };
    const gauge = (name: string, help: string) => new Gauge({ name, help, labelNames, registers });
    this.hits = counter(
      "hisparse_cache_hits_total",
      "Selected host-resident page slices found in the hot buffer.",
    );
    this.misses = counter(
      "hisparse_cache_misses_total",
      "Selected host-resident page slices copied from the host tier into the hot buffer.",
    );
    this.h2dBytes = counter("hisparse_host_to_device_bytes_total", "Bytes copied host to device (misses).");
    this.d2hBytes = counter(
      "hisparse_device_to_host_bytes_total",
      "Bytes copied device to host (eager mirrors).",
    );
    this.spilled = counter(
      "hisparse_spilled_pages_total",
      "Pages whose device block was released to the host tier.",
    );
    this.sparseDecodes = counter(
      "hisparse_sparse_decodes_total",
      "Request decode steps that attended sparsely (top-k pages), one per request and step.",
    );
    this.pages = new Gauge({
      name: "hisparse_pages",
      help: "KV pages of live requests by residency state.",
      labelNames: ["model_name", "state"] as const,
      registers,
    });
    this.hostUsed = gauge("hisparse_host_pool_used_pages", "Pages of the host pool in use.");
    this.hostUsage = gauge("hisparse_host_pool_usage", "Fraction of the host pool in use, in [0, 1].");
    this.sparseRequests = gauge(
      "hisparse_sparse_requests",
      "Requests holding at least one host-resident page.",
    );
  }

  /** Brings the series up to date with the engine's latest stats (counters advance by the difference). */
  update(s: HiSparseStats): void {
    const prev = this.last;
    const labels = this.labels;
    const inc = (c: Counter<ModelLabel>, cur: number, old: number | undefined) => {
      const d = cur - (old ?? 0);
      if (d > 0) c.inc(labels, d);
    };
    inc(this.hits, s.hitsTotal, prev?.hitsTotal);
    inc(this.misses, s.missesTotal, prev?.missesTotal);
    inc(this.h2dBytes, s.hostToDeviceBytesTotal, prev?.hostToDeviceBytesTotal);
    inc(this.d2hBytes, s.deviceToHostBytesTotal, prev?.deviceToHostBytesTotal);
    inc(this.spilled, s.spilledPagesTotal, prev?.spilledPagesTotal);
    inc(this.sparseDecodes, s.sparseDecodesTotal, prev?.sparseDecodesTotal);
    this.pages.set({ ...labels, state: PageState.ACTIVE }, s.numActivePages);
    this.pages.set({ ...labels, state: PageState.SPARSE }, s.numSparsePages);
    this.pages.set({ ...labels, state: PageState.INACTIVE }, s.numInactivePages);
    this.hostUsed.set(labels, s.hostPoolUsedBlocks);
    this.hostUsage.set(
      labels,
      s.hostPoolTotalBlocks === 0 ? 0 : s.hostPoolUsedBlocks / s.hostPoolTotalBlocks,
    );
    this.sparseRequests.set(labels, s.numSparseRequests);
    this.last = s;
  }
}

/**
 * The periodic log line (DESIGN.md §4):
 * `sparse_block_state: ACTIVE=.. SPARSE=.. INACTIVE=.. hit_rate=.. h2d_GBps=..`, with page counts
 * now, and over the interval since `prev` (null: since start) the hot-buffer hit rate (hits /
 * (hits + misses), 3 decimals; `n/a` when nothing was looked up) and the host-to-device rate in
 * GB/s (1e9 bytes per second, 3 decimals).
 * @param intervalSeconds seconds between `prev` and `cur` (> 0).
 */
export function formatSparseBlockStateLine(
  cur: HiSparseStats,
  prev: HiSparseStats | null,
  intervalSeconds: number,
): string {
  const hits = cur.hitsTotal - (prev?.hitsTotal ?? 0);
  const misses = cur.missesTotal - (prev?.missesTotal ?? 0);
  const bytes = cur.hostToDeviceBytesTotal - (prev?.hostToDeviceBytesTotal ?? 0);
  const hitRate = hits + misses === 0 ? "n/a" : (hits / (hits + misses)).toFixed(3);
  const gbps = intervalSeconds > 0 ? (bytes / intervalSeconds / 1e9).toFixed(3) : "n/a";
  return `sparse_block_state: ACTIVE=${cur.numActivePages} SPARSE=${cur.numSparsePages} INACTIVE=${cur.numInactivePages} hit_rate=${hitRate} h2d_GBps=${gbps}`;
}

/** Where {@link attachHiSparseObservability} plugs in (the server's MetricsRegistry and StatsLogger). */
export interface ObservabilityHost {
  registry: Registry;
  /** Value of the `model_name` label (the served model name). */
  readonly modelName: string;
  addCollector(fn: () => void): void;
}
export interface StatsLineHost {
  addLine(fn: () => string | null): void;
}

/**
 * Registers the HiSparse series on the server's registry, labelled `model_name` =
 * `metrics.modelName` and refreshed before each scrape from `stats()`, and adds the
 * `sparse_block_state` line to the periodic stats log.
 * @param now clock in seconds (injectable for tests)
 */
export function attachHiSparseObservability(
  metrics: ObservabilityHost,
  log: StatsLineHost,
  stats: () => HiSparseStats,
  now: () => number = () => performance.now() / 1000,
): HiSparseMetrics {
  const m = new HiSparseMetrics(metrics.registry, metrics.modelName);
  metrics.addCollector(() => m.update(stats()));
  let prev: HiSparseStats | null = null;
  let prevTime = now();
  log.addLine(() => {
    const cur = stats();
    const t = now();
    const line = formatSparseBlockStateLine(cur, prev, t - prevTime);
    prev = cur;
    prevTime = t;
    return line;
  });
  return m;
}
