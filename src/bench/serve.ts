/**
 * `hisparse bench serve`: drives an OpenAI-compatible server with a dataset at a request rate
 * and reports vLLM's serving metrics (vllm/benchmarks/serve.py `benchmark`): warm-up requests,
 * arrivals from {@link arrivalOffsets}, an optional client-side concurrency cap, one streamed
 * request per sample, metrics over the main run only.
 */
import { arrivalOffsets } from "./arrival.js";
import type { SampleRequest } from "./datasets.js";
import type { GpuMonitor, GpuStats } from "./gpu_monitor.js";
import {
  type BenchmarkMetrics,
  calculateMetrics,
  type GoodputSlos,
  type LatencyMetric,
  metricsJson,
} from "./metrics.js";
import {
  type BenchClock,
  type EndpointKind,
  HttpAgents,
  type RequestFuncOutput,
  sendStreamingRequest,
  systemClock,
} from "./request_func.js";
import { Rng } from "./rng.js";

/** Settings of one benchmark run. */
export interface BenchmarkConfig {
  kind: EndpointKind;
  /** Endpoint URL, e.g. http://127.0.0.1:8000/v1/completions. */
  apiUrl: string;
  /** Model name sent in each request. */
  model: string;
  requests: readonly SampleRequest[];
  /** Requests per second; Infinity sends all at once. */
  requestRate: number;
  burstiness: number;
  /** Client-side cap on requests in flight; null = none. */
  maxConcurrency: number | null;
  /** Requests (copies of the first sample) sent before the measured run. */
  numWarmups: number;
  ignoreEos: boolean;
  extraBody?: Record<string, unknown>;
  apiKey?: string;
  selectedMetrics: readonly LatencyMetric[];
  selectedPercentiles: readonly number[];
  goodput: GoodputSlos;
  /** Seed of the arrival process. */
  seed: number;
}

/** Injected services (all optional). */
export interface BenchmarkDeps {
  clock?: BenchClock;
  /** Counts output tokens of a text when the server reports no usage. */
  countTokens?: (text: string) => number;
  /** Progress of the measured run (total, then one tick per finished request, with its success). */
  progress?: { start(total: number): void; tick(success: boolean): void; stop(): void };
  /** Samples GPU memory and power during the measured run. */
  gpuMonitor?: GpuMonitor | null;
}

/** Everything one run measured. */
export interface BenchmarkResult {
  durationS: number;
  metrics: BenchmarkMetrics;
  outputs: RequestFuncOutput[];
  gpu: GpuStats | null;
}

/** A counting semaphore for the concurrency cap. */
class Semaphore {
  private readonly waiters: (() => void)[] = [];
  constructor(private free: number) {}
  async acquire(): Promise<void> {
    if (this.free > 0) {
      this.free--;
      return;
    }
    await new Promise<void>((r) => this.waiters.push(r));
  }
  release(): void {
    const w = this.waiters.shift();
    if (w !== undefined) w();
    else this.free++;
  }
  /** Runs `fn` holding one unit. */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    await this.acquire();
    try {
      return await fn();
    } finally {
      this.release();
    }
  }
}

const sleep = (seconds: number) => new Promise<void>((r) => setTimeout(r, seconds * 1000));

/**
 * Runs warm-ups, then the measured requests, and computes the metrics.
 * Request ids (`x-request-id`): `warmup-<i>` and `<prefix>-<i>`.
 * @throws RangeError for an empty request list, a rate or burstiness <= 0, or a bad cap.
 */
export async function runBenchmark(cfg: BenchmarkConfig, deps: BenchmarkDeps = {}): Promise<BenchmarkResult> {
  const clock = deps.clock ?? systemClock;
  if (cfg.maxConcurrency !== null && !(Number.isInteger(cfg.maxConcurrency) && cfg.maxConcurrency >= 1))
    throw new RangeError(`--max-concurrency must be >= 1, got ${cfg.maxConcurrency}`);
  const offsets = arrivalOffsets(cfg.requests.length, cfg.requestRate, cfg.burstiness, new Rng(cfg.seed));
  const agents = new HttpAgents();
  const prefix = `bench-${Math.random().toString(36).slice(2, 10)}`;
  const send = (r: SampleRequest, requestId: string) =>
    sendStreamingRequest(
      {
        kind: cfg.kind,
        apiUrl: cfg.apiUrl,
        model: cfg.model,
        prompt: r.prompt,
        promptLen: r.promptLen,
        outputLen: r.expectedOutputLen,
        ignoreEos: cfg.ignoreEos,
        extraBody: cfg.extraBody,
        apiKey: cfg.apiKey,
        requestId,
      },
      clock,
      agents,
    );
  try {
    const warm = new Semaphore(cfg.maxConcurrency ?? Math.max(1, cfg.numWarmups));
    const first = cfg.requests[0]!;
    await Promise.all(
      Array.from({ length: cfg.numWarmups }, (_, i) => warm.run(() => send(first, `warmup-${i}`))),
    );
    const sem = new Semaphore(cfg.maxConcurrency ?? cfg.requests.length);
    deps.progress?.start(cfg.requests.length);
    deps.gpuMonitor?.start();
    const start = clock.now();
    const tasks: Promise<RequestFuncOutput>[] = [];
    for (const [i, r] of cfg.requests.entries()) {
      const wait = start + offsets[i]! - clock.now();
      if (wait > 0) await sleep(wait);
      tasks.push(
        sem
          .run(() => send(r, `${prefix}-${i}`))
          .then((o) => {
            deps.progress?.tick(o.success);
            return o;
          }),
      );
    }
    const outputs = await Promise.all(tasks);
    const durationS = clock.now() - start;
    const gpu = (await deps.gpuMonitor?.stop()) ?? null;
    deps.progress?.stop();
    const metrics = calculateMetrics(
      outputs,
      durationS,
      cfg.selectedPercentiles,
      cfg.goodput,
      deps.countTokens,
    );
    return { durationS, metrics, outputs, gpu };
  } finally {
    agents.destroy();
  }
}

/** Run settings echoed in the result JSON (vLLM's keys). */
export interface ResultInfo {
  backend: EndpointKind;
  modelId: string;
  tokenizerId: string;
  numPrompts: number;
  requestRate: number;
  burstiness: number;
  maxConcurrency: number | null;
  datasetName: string;
  label?: string;
}

/**
 * The result JSON with vLLM's field names: run settings, metrics (see metricsJson), `duration`,
 * per-request arrays when `detailed` (`input_lens`, `output_lens`, `ttfts`, `itls`,
 * `latencies`, `start_times`, `generated_texts`, `errors`), and hisparse's GPU fields
 * (`gpu_max_memory_used_mib`, `gpu_energy_j`, `gpu_mean_power_w`,
 * `gpu_energy_per_output_token_j`) when nvidia-smi was sampled.
 */
export function resultJson(
  r: BenchmarkResult,
  info: ResultInfo,
  cfg: Pick<BenchmarkConfig, "selectedMetrics" | "goodput">,
  detailed: boolean,
  date = new Date(),
): Record<string, unknown> {
  const out: Record<string, unknown> = {
    date: date.toISOString(),
    endpoint_type: info.backend,
    backend: info.backend,
    label: info.label ?? null,
    model_id: info.modelId,
    tokenizer_id: info.tokenizerId,
    dataset_name: info.datasetName,
    num_prompts: info.numPrompts,
    request_rate: info.requestRate === Number.POSITIVE_INFINITY ? "inf" : info.requestRate,
    burstiness: info.burstiness === Number.POSITIVE_INFINITY ? "inf" : info.burstiness,
    max_concurrency: info.maxConcurrency,
    duration: r.durationS,
    ...metricsJson(r.metrics, cfg.selectedMetrics, Object.keys(cfg.goodput).length > 0),
  };
  if (detailed) {
    out.input_lens = r.outputs.map((o) => o.promptLen);
    out.output_lens = r.metrics.outputLens;
    out.ttfts = r.outputs.map((o) => o.ttft);
    out.itls = r.outputs.map((o) => o.itl);
    out.latencies = r.outputs.map((o) => o.latency);
    out.start_times = r.outputs.map((o) => o.startTime);
    out.generated_texts = r.outputs.map((o) => o.generatedText);
    out.errors = r.outputs.map((o) => o.error);
  }
  if (r.gpu !== null) {
    out.gpu_count = r.gpu.numGpus;
    out.gpu_max_memory_used_mib = r.gpu.maxMemoryUsedMiB;
    out.gpu_energy_j = r.gpu.energyJ;
    out.gpu_mean_power_w = r.gpu.meanPowerW;
    out.gpu_energy_per_output_token_j =
      r.metrics.totalOutput > 0 ? r.gpu.energyJ / r.metrics.totalOutput : null;
  }
  return out;
}
