import { performance } from "node:perf_hooks";
import type { EngineGauges } from "./metrics_registry.js";

/** What the stats line reads: token totals since start and the live gauges. */
export interface StatsSource {
  readonly numPromptTokens: number;
  readonly numGenerationTokens: number;
  /** Prefix-cache totals in tokens (absent: the line names no hit rate). */
  readonly prefixCacheQueries?: number;
  readonly prefixCacheHits?: number;
  gauges(): EngineGauges;
}

/** The logging calls the stats line needs (a pino logger fits). */
export interface StatsLog {
  info(msg: string): void;
  debug(msg: string): void;
}

/**
 * The periodic one-line engine summary, as vLLM's LoggingStatLogger prints it
 * (vllm/v1/metrics/loggers.py):
 * "Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 4.5 tokens/s, Running: 1 reqs,
 * Waiting: 0 reqs, GPU KV cache usage: 0.3%" ("CPU KV cache usage" on the CPU backend). Throughputs are token deltas over the time since
 * the previous line. Like vLLM, a line is logged at debug level instead of info when this and
 * the previous interval both had zero throughput (an idle server stays quiet).
 * Extensions append their own lines through {@link addLine}.
 */
export class StatsLogger {
  private timer: NodeJS.Timeout | null = null;
  private lastTime: number;
  private lastPrompt: number;
  private lastGeneration: number;
  private lastWasIdle = true;
  private lastQueries: number;
  private lastHits: number;
  private readonly extraLines: (() => string | null)[] = [];

  /**
   * @param intervalSeconds seconds between lines; 0 disables the timer (logOnce still works)
   * @param now clock in seconds (injectable for tests)
   * @param kvCacheDevice where the KV cache lives, named in the line ("GPU", or "CPU" on the CPU
   *   backend)
   */
  constructor(
    private readonly source: StatsSource,
    private readonly log: StatsLog,
    readonly intervalSeconds: number,
    private readonly now: () => number = () => performance.now() / 1000,
    private readonly kvCacheDevice: KVCacheDevice = "GPU",
  ) {
    this.lastTime = now();
    this.lastPrompt = source.numPromptTokens;
    this.lastGeneration = source.numGenerationTokens;
    this.lastQueries = source.prefixCacheQueries ?? 0;
    this.lastHits = source.prefixCacheHits ?? 0;
  }

  /** When set (prefix caching on), the line ends with the interval's prefix-cache hit rate. */
  showPrefixCacheHitRate = false;

  /** Adds a line printed after the stats line (e.g. HiSparse's sparse_block_state); null skips it. */
  addLine(fn: () => string | null): void {
    this.extraLines.push(fn);
  }

  /** Starts the periodic timer (unref'd: it never keeps the process alive). */
  start(): void {
    if (this.intervalSeconds <= 0 || this.timer !== null) return;
    this.timer = setInterval(() => this.logOnce(), this.intervalSeconds * 1000);
    this.timer.unref();
  }

  /** Stops the periodic timer (idempotent). */
  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /**
   * Builds the line for the interval since the previous call, logs it (info, or debug when
   * idle) with any extension lines, and returns it.
   */
  logOnce(): string {
    const t = this.now();
    const dt = Math.max(t - this.lastTime, 1e-9);
    const prompt = (this.source.numPromptTokens - this.lastPrompt) / dt;
    const generation = (this.source.numGenerationTokens - this.lastGeneration) / dt;
    this.lastTime = t;
    this.lastPrompt = this.source.numPromptTokens;
    this.lastGeneration = this.source.numGenerationTokens;
    const g = this.source.gauges();
    let line = formatStatsLine(prompt, generation, g, this.kvCacheDevice);
    if (this.showPrefixCacheHitRate) line += `, ${this.prefixHitRate()}`;
    const idle = prompt === 0 && generation === 0;
    const emit = idle && this.lastWasIdle ? this.log.debug.bind(this.log) : this.log.info.bind(this.log);
    this.lastWasIdle = idle;
    emit(line);
    for (const f of this.extraLines) {
      const extra = f();
      if (extra !== null) emit(extra);
    }
    return line;
  }

  /** "Prefix cache hit rate: 42.0%" over the interval (tokens hit / tokens looked up; "n/a" without lookups). */
  private prefixHitRate(): string {
    const q = this.source.prefixCacheQueries ?? 0;
    const h = this.source.prefixCacheHits ?? 0;
    const dq = q - this.lastQueries;
    const dh = h - this.lastHits;
    this.lastQueries = q;
    this.lastHits = h;
    return `Prefix cache hit rate: ${dq > 0 ? `${((100 * dh) / dq).toFixed(1)}%` : "n/a"}`;
  }
}

/** Where the KV cache lives, as the stats line names it. */
export type KVCacheDevice = "GPU" | "CPU";

/**
 * The stats line text; throughputs in tokens/s, one decimal as vLLM prints them. vLLM always
 * says "GPU KV cache usage"; here the word follows the backend, so the CPU backend says "CPU".
 */
export function formatStatsLine(
  promptTps: number,
  generationTps: number,
  g: EngineGauges,
  kvCacheDevice: KVCacheDevice = "GPU",
): string {
  return (
    `Avg prompt throughput: ${promptTps.toFixed(1)} tokens/s, ` +
    `Avg generation throughput: ${generationTps.toFixed(1)} tokens/s, ` +
    `Running: ${g.numRunningReqs} reqs, Waiting: ${g.numWaitingReqs} reqs, ` +
    `${kvCacheDevice} KV cache usage: ${(g.kvCacheUsage * 100).toFixed(1)}%`
  );
}
