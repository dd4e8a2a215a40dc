import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { StepStats } from "../engine/llm_engine.js";
import type { RequestMetrics, RequestOutput } from "../engine/outputs.js";
import { type RequestPhaseTimes, requestPhaseTimes } from "./request_phases.js";

/** Live engine gauges, read at each scrape and by the stats line. */
export interface EngineGauges {
  numRunningReqs: number;
  numWaitingReqs: number;
  /** Fraction of device KV blocks in use, in [0, 1]. */
  kvCacheUsage: number;
  numFreeBlocks: number;
  numTotalBlocks: number;
}

/** Options of {@link MetricsRegistry}. */
export interface MetricsRegistryOptions {
  /** Value of the `model_name` label (the served model name). */
  modelName: string;
  /** Reads the engine's gauges now (the scheduler's running/waiting queues and block pool). */
  gauges: () => EngineGauges;
  /**
   * The engine's ranks, exported as an info gauge (`hisparse:parallel_config_info`, 1, labelled
   * like vLLM's `vllm:cache_config_info`). Request and scheduler series are not labelled by rank:
   * as in vLLM there is one scheduler for every rank. Default one rank, no communicator.
   */
  parallel?: { tensorParallelSize: number; communicator: string | null; devices: readonly string[] };
}

/**
 * Histogram buckets in seconds, copied from vLLM v1 (vllm/v1/metrics/loggers.py
 * PrometheusStatLogger) so dashboards built for vLLM read ours unchanged.
 */
export const TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
  80.0, 160.0, 640.0, 2560.0,
];
export const ITL_BUCKETS = [
  0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
];
export const REQUEST_LATENCY_BUCKETS = [
  0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
  960.0, 1920.0, 7680.0,
];
/** Token-count buckets: 1, 2, 5 × powers of ten up to 1e6 (vLLM build_1_2_5_buckets). */
export const TOKEN_COUNT_BUCKETS = [
  1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6,
];

type Label = "model_name";

/**
 * The server's Prometheus metrics on a private prom-client {@link Registry} (never the global
 * one), with vLLM's metric names where vLLM has the metric. Fed by the engine's "step" events
 * ({@link onStep}) and by each request's outputs ({@link trackRequest}); gauges are read from
 * the engine at scrape time, so they are exact even between steps.
 *
 * Extensions (HiSparse) add their own series on {@link registry} (pass `registers: [registry]`)
 * and may refresh them before each scrape through {@link addCollector}.
 */
export class MetricsRegistry {
  readonly registry = new Registry();
  /** Totals since start, also kept as plain numbers for the stats line. */
  numPromptTokens = 0;
  numGenerationTokens = 0;
  private readonly labels: Record<Label, string>;
  private readonly collectors: (() => void | Promise<void>)[] = [];
  private lastPreemptions = 0;
  /** Prefix-cache totals since start (tokens), also read by the stats line. */
  prefixCacheQueries = 0;
  prefixCacheHits = 0;
  private lastPrefixHostHits = 0;

  private readonly promptTokens: Counter<Label>;
  private readonly generationTokens: Counter<Label>;
  private readonly preemptions: Counter<Label>;
  private readonly prefixQueries: Counter<Label>;
  private readonly prefixHits: Counter<Label | "tier">;
  private readonly requestSuccess: Counter<Label | "finished_reason">;
  private readonly ttft: Histogram<Label>;
  private readonly itl: Histogram<Label>;
  private readonly e2e: Histogram<Label>;
  /** vLLM's request phase histograms (seconds; {@link RequestPhaseTimes}), observed at the finish. */
  private readonly queueTime: Histogram<Label>;
  private readonly prefillTime: Histogram<Label>;
  private readonly decodeTime: Histogram<Label>;
  private readonly inferenceTime: Histogram<Label>;
  private readonly requestPromptTokens: Histogram<Label>;
  private readonly requestGenerationTokens: Histogram<Label>;

  constructor(readonly options: MetricsRegistryOptions) {
    this.labels = { model_name: options.modelName };
    const registers = [this.registry];
    const labelNames = ["model_name"] as const;
    this.makeGauges();
    const p = options.parallel ?? { tensorParallelSize: 1, communicator: null, devices: [] };
    new Gauge({
      name: "hisparse:parallel_config_info",
      help: "Tensor parallelism of the engine (value 1): its size, communicator and devices.",
      labelNames: ["model_name", "tensor_parallel_size", "communicator", "devices"] as const,
      registers,
    }).set(
      {
        model_name: options.modelName,
        tensor_parallel_size: String(p.tensorParallelSize),
        communicator: p.communicator ?? "none",
        devices: p.devices.join(","),
      },
      1,
    );
    const counter = (name: string, help: string) => new Counter({ name, help, labelNames, registers });
    const histogram = (name: string, help: string, buckets: number[]) =>
      new Histogram({ name, help, labelNames, buckets, registers });
    this.promptTokens = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.");
    this.generationTokens = counter("vllm:generation_tokens_total", "Number of generation tokens processed.");
    this.preemptions = counter("vllm:num_preemptions_total", "Cumulative number of preemptions.");
    this.prefixQueries = counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in tokens.");
    this.prefixHits = new Counter({
      name: "vllm:prefix_cache_hits_total",
      help: 'Prefix cache hits, in tokens, by the tier that held the pages ("device"; "host": HiSparse pages loaded back from pinned host memory).',
      labelNames: ["model_name", "tier"] as const,
      registers,
    });
    this.requestSuccess = new Counter({
      name: "vllm:request_success_total",
      help: "Count of finished requests, by finish reason (stop, length, abort).",
      labelNames: ["model_name", "finished_reason"] as const,
      registers,
    });
    this.ttft = histogram(
      "vllm:time_to_first_token_seconds",
      "Time to first token in seconds.",
      TTFT_BUCKETS,
    );
    this.itl = histogram("vllm:inter_token_latency_seconds", "Inter-token latency in seconds.", ITL_BUCKETS);
    this.e2e = histogram(
      "vllm:e2e_request_latency_seconds",
      "End-to-end request latency in seconds.",
      REQUEST_LATENCY_BUCKETS,
    );
    // Names, help and buckets of vllm/v1/metrics/loggers.py PrometheusStatLogger.
    const phase = (name: string, what: string) =>
      histogram(name, `Histogram of time spent in ${what} phase for request.`, REQUEST_LATENCY_BUCKETS);
    this.queueTime = phase("vllm:request_queue_time_seconds", "WAITING");
    this.inferenceTime = phase("vllm:request_inference_time_seconds", "RUNNING");
    this.prefillTime = phase("vllm:request_prefill_time_seconds", "PREFILL");
    this.decodeTime = phase("vllm:request_decode_time_seconds", "DECODE");
    this.requestPromptTokens = histogram(
      "vllm:request_prompt_tokens",
      "Number of prefill tokens processed, per request.",
      TOKEN_COUNT_BUCKETS,
    );
    this.requestGenerationTokens = histogram(
      "vllm:request_generation_tokens",
      "Number of generation tokens processed, per request.",
      TOKEN_COUNT_BUCKETS,
    );
  }

  /** Gauges read from `options.gauges()` at each scrape. */
  private makeGauges(): void {
    const registers = [this.registry];
    const labelNames = ["model_name"] as const;
    const gauge = (name: string, help: string, read: (g: EngineGauges) => number) => {
      const labels = this.labels;
      const gauges = this.options.gauges;
      new Gauge({
        name,
        help,
        labelNames,
        registers,
        collect() {
          this.set(labels, read(gauges()));
        },
      });
    };
    gauge(
      "vllm:num_requests_running",
      "Number of requests in model execution batches.",
      (g) => g.numRunningReqs,
    );
    gauge(
      "vllm:num_requests_waiting",
      "Number of requests waiting to be processed.",
      (g) => g.numWaitingReqs,
    );
    gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", (g) => g.kvCacheUsage);
    gauge("hisparse_kv_cache_free_blocks", "Free device KV cache blocks.", (g) => g.numFreeBlocks);
    gauge("hisparse_kv_cache_total_blocks", "Device KV cache blocks in all.", (g) => g.numTotalBlocks);
  }

  /** The `model_name` label value (the served model name), for extensions' series. */
  get modelName(): string {
    return this.options.modelName;
  }

  /** Prometheus text content type of {@link metrics}. */
  get contentType(): string {
    return this.registry.contentType;
  }

  /** Adds a function run before each scrape (an extension refreshing its own series). */
  addCollector(fn: () => void | Promise<void>): void {
    this.collectors.push(fn);
  }

  /** The exposition text of every series (runs the collectors first). */
  async metrics(): Promise<string> {
    for (const c of this.collectors) await c();
    return this.registry.metrics();
  }

  /** Reads the engine gauges now. */
  gauges(): EngineGauges {
    return this.options.gauges();
  }

  /**
   * Updates the counters that the scheduler keeps cumulatively (preemptions, prefix-cache
   * queries and hits) from an AsyncLLM "step" event.
   */
  onStep(stats: StepStats | null): void {
    if (stats === null) return;
    const s = stats.scheduler;
    this.preemptions.inc(this.labels, Math.max(0, s.numPreemptions - this.lastPreemptions));
    this.prefixQueries.inc(this.labels, Math.max(0, s.prefixCacheQueries - this.prefixCacheQueries));
    const hostHits = Math.max(0, s.prefixCacheHostHits - this.lastPrefixHostHits);
    const hits = Math.max(0, s.prefixCacheHits - this.prefixCacheHits);
    this.prefixHits.inc({ ...this.labels, tier: "device" }, Math.max(0, hits - hostHits));
    this.prefixHits.inc({ ...this.labels, tier: "host" }, hostHits);
    this.lastPreemptions = s.numPreemptions;
    this.prefixCacheQueries = s.prefixCacheQueries;
    this.prefixCacheHits = s.prefixCacheHits;
    this.lastPrefixHostHits = s.prefixCacheHostHits;
  }

  /** A tracker for one engine request; feed it every output of the request. */
  trackRequest(): RequestTracker {
    return new RequestTracker(this);
  }

  /** @internal Prompt tokens and TTFT (s) of a request's first output (RequestTracker). */
  recordFirstToken(numPromptTokens: number, ttft: number): void {
    this.numPromptTokens += numPromptTokens;
    this.promptTokens.inc(this.labels, numPromptTokens);
    this.ttft.observe(this.labels, ttft);
  }

  /**
   * @internal A request's phases (RequestTracker, at its finish, as vLLM records its
   * FinishedRequestStats): each known interval goes to its histogram.
   */
  recordPhases(p: RequestPhaseTimes): void {
    this.queueTime.observe(this.labels, p.queued);
    if (p.prefill !== null) this.prefillTime.observe(this.labels, p.prefill);
    if (p.decode !== null) this.decodeTime.observe(this.labels, p.decode);
    if (p.inference !== null) this.inferenceTime.observe(this.labels, p.inference);
  }

  /** @internal Adds `n` generated tokens and, after the first output, one inter-token latency (s). */
  recordTokens(n: number, itl: number | null): void {
    this.numGenerationTokens += n;
    this.generationTokens.inc(this.labels, n);
    if (itl !== null) this.itl.observe(this.labels, itl);
  }

  /** @internal Counts a finished request by reason; E2E latency (s) and token counts when known. */
  recordFinished(reason: string, e2e: number | null, numPromptTokens: number, numOutputTokens: number): void {
    this.requestSuccess.inc({ ...this.labels, finished_reason: reason });
    if (e2e === null) return;
    this.e2e.observe(this.labels, e2e);
    this.requestPromptTokens.observe(this.labels, numPromptTokens);
    this.requestGenerationTokens.observe(this.labels, numOutputTokens);
  }
}

/**
 * Timing and token counts of one engine request, from its "delta" RequestOutputs
 * (RequestOutput.metrics holds times in seconds): TTFT = firstTokenTime - arrivalTime, one
 * inter-token latency per output after the first (the gap between the steps that produced
 * them, as vLLM's per-iteration ITL), E2E = finishedTime - arrivalTime; at the finish, the
 * queue, prefill, decode and inference times ({@link requestPhaseTimes}). An aborted request
 * that had its first token keeps its queue time (as before the phase histograms; no E2E, no
 * other phase).
 */
export class RequestTracker {
  private started = false;
  private done = false;
  private lastTokenTime: number | null = null;
  private numOutputTokens = 0;
  /** Timestamps of the latest output (for an abort's queue time). */
  private lastMetrics: RequestMetrics | null = null;

  constructor(private readonly m: MetricsRegistry) {}

  /** Records one output of the request (in "delta" mode: only the new tokens). */
  observe(out: RequestOutput): void {
    if (this.done) return;
    const c = out.outputs[0];
    const n = c?.tokenIds.length ?? 0;
    const t = out.metrics;
    if (n > 0) {
      if (!this.started) {
        this.started = true;
        const first = t.firstTokenTime ?? t.lastTokenTime ?? t.arrivalTime;
        this.m.recordFirstToken(out.promptTokenIds.length, first - t.arrivalTime);
        this.m.recordTokens(n, null);
      } else {
        const last = t.lastTokenTime;
        this.m.recordTokens(
          n,
          last !== null && this.lastTokenTime !== null ? last - this.lastTokenTime : null,
        );
      }
      this.lastTokenTime = t.lastTokenTime;
      this.numOutputTokens += n;
      this.lastMetrics = t;
    }
    if (out.finished) {
      this.done = true;
      const phases = requestPhaseTimes(t);
      if (phases !== null) this.m.recordPhases(phases);
      const e2e = t.finishedTime === null ? null : t.finishedTime - t.arrivalTime;
      this.m.recordFinished(c?.finishReason ?? "stop", e2e, out.promptTokenIds.length, this.numOutputTokens);
    }
  }

  /** Records an abort (client gone, shutdown) of a request that had not finished. */
  abort(): void {
    if (this.done) return;
    this.done = true;
    const phases = this.lastMetrics === null ? null : requestPhaseTimes(this.lastMetrics);
    if (phases !== null)
      this.m.recordPhases({ queued: phases.queued, prefill: null, decode: null, inference: null });
    this.m.recordFinished("abort", null, 0, 0);
  }
}
