import { basename } from "node:path";
import type { FastifyInstance } from "fastify";
import { type Logger, pino } from "pino";
import type { EngineArgs } from "../config/engine_args.js";
import { AsyncLLM } from "../engine/async_llm.js";
import type { EngineCreateOptions, StepStats } from "../engine/llm_engine.js";
import { attachHiSparseObservability } from "../metrics/hisparse_metrics.js";
import { type EngineGauges, MetricsRegistry } from "../metrics/metrics_registry.js";
import { StatsLogger } from "../metrics/stats_logger.js";
import { TokenizerPool, type TokenizerPoolOptions } from "../tokenizer/tokenizer_pool.js";
import { buildApp, DEFAULT_MAX_REQUEST_BODY_BYTES } from "./app.js";
import { ServingContext } from "./context.js";

/** Default `--stats-interval` in seconds (vLLM logs every 10 s). */
export const DEFAULT_STATS_INTERVAL_S = 10;
/** Default waiting-queue limit as a multiple of max-num-seqs. */
export const WAITING_REQUESTS_PER_SEQ = 4;

/** How long shutdown waits for aborted requests to send their last event, in ms. */
export const SHUTDOWN_DRAIN_MS = 1000;

/** Options of {@link startServer}; engine settings are EngineArgs. */
export interface ServerOptions {
  engineArgs: EngineArgs;
  /** Default "127.0.0.1" (loopback only; pass 0.0.0.0 to listen on every interface). */
  host?: string;
  /** Default 8000; 0 picks a free port. */
  port?: number;
  /** Bearer key for /v1 routes (`--api-key`); none by default. */
  apiKey?: string | null;
  /** Default: `engineArgs.servedModelName`, else the model directory's base name. */
  servedModelName?: string;
  /** Default 4 × max-num-seqs. */
  maxWaitingRequests?: number;
  /** Default 4 MiB. */
  maxRequestBodyBytes?: number;
  /** Seconds between stats lines; 0 disables (default 10). */
  statsIntervalSeconds?: number;
  /** Default: pino at info level on stdout. */
  logger?: Logger;
  /** Reported by /version. */
  version?: string;
  /** Threads that tokenize and render chat templates off the event loop. */
  tokenizerPool?: TokenizerPoolOptions;
  /** Passed to the engine (load progress, HiSparse scheduler hooks). */
  engineOptions?: EngineCreateOptions;
  /**
   * Called once the engine is loaded, before the server listens: optional features register
   * their own series on `metrics.registry` (and collectors) and stats lines on `stats`.
   */
  extendMetrics?: (metrics: MetricsRegistry, stats: StatsLogger, llm: AsyncLLM) => void;
}

/** A running server (see {@link startServer}). */
export interface RunningServer {
  /** Base URL, e.g. "http://127.0.0.1:8000". */
  url: string;
  app: FastifyInstance;
  llm: AsyncLLM;
  context: ServingContext;
  metrics: MetricsRegistry;
  stats: StatsLogger;
  /** Aborts every request, closes the listener, stops the stats timer and the engine. Idempotent. */
  close(): Promise<void>;
}

/** Live gauges of an engine for metrics and the stats line. */
export function engineGauges(llm: AsyncLLM): EngineGauges {
  const s = llm.engine.scheduler;
  return {
    numRunningReqs: s.numRunning,
    numWaitingReqs: s.numWaiting,
    kvCacheUsage: s.kvCacheManager.usage,
    numFreeBlocks: s.kvCacheManager.numFreeBlocks,
    numTotalBlocks: llm.engine.info.numGpuBlocks,
  };
}

/**
 * Loads the engine and serves the OpenAI API on `host:port` (`hisparse serve`).
 * @throws the engine's load errors (ConfigError, ModelConfigError, ...), or the listener's
 *   (e.g. EADDRINUSE); the engine is shut down before rethrowing.
 */
export async function startServer(o: ServerOptions): Promise<RunningServer> {
  const logger = o.logger ?? pino({ level: "info" });
  // A given limit is checked up front; the derived one follows --max-num-seqs, which the engine
  // checks (so `--max-num-seqs 0` is reported under its own name, not as a waiting limit of 0).
  if (
    o.maxWaitingRequests !== undefined &&
    (!Number.isInteger(o.maxWaitingRequests) || o.maxWaitingRequests < 1)
  ) {
    throw new Error(`--max-waiting-requests must be an integer >= 1, got ${o.maxWaitingRequests}`);
  }
  const llm = await AsyncLLM.create(o.engineArgs, o.engineOptions);
  const maxWaitingRequests = o.maxWaitingRequests ?? WAITING_REQUESTS_PER_SEQ * o.engineArgs.maxNumSeqs;
  let tokenizers: TokenizerPool | null = null;
  try {
    const tok = llm.engine.tokenizer;
    if (tok !== null) tokenizers = await TokenizerPool.create(tok.dir, o.tokenizerPool);
    const modelName = o.servedModelName ?? o.engineArgs.servedModelName ?? basename(llm.engine.info.modelDir);
    const tp = llm.engine.info.tensorParallel;
    const metrics = new MetricsRegistry({
      modelName,
      gauges: () => engineGauges(llm),
      parallel: { tensorParallelSize: tp.size, communicator: tp.communicator, devices: tp.devices },
    });
    llm.on("step", (s: StepStats | null) => metrics.onStep(s));
    const context = new ServingContext(
      llm,
      modelName,
      { maxWaitingRequests },
      metrics,
      tokenizers,
      // /v1/models `root`: --model as given (vLLM's), the bundled model's name when none.
      o.engineArgs.model ?? basename(llm.engine.info.modelDir),
    );
    llm.on("engineError", (e: Error) => logger.error({ err: e }, `engine step failed: ${e.message}`));
    const app = buildApp(context, {
      apiKey: o.apiKey ?? null,
      maxRequestBodyBytes: o.maxRequestBodyBytes ?? DEFAULT_MAX_REQUEST_BODY_BYTES,
      logger,
      version: o.version ?? "unknown",
    });
    const stats = new StatsLogger(
      metrics,
      logger,
      o.statsIntervalSeconds ?? DEFAULT_STATS_INTERVAL_S,
      undefined,
      llm.engine.info.backend === "cpu" ? "CPU" : "GPU",
    );
    stats.showPrefixCacheHitRate = o.engineArgs.enablePrefixCaching === true;
    const hisparse = llm.engine.hisparse;
    if (hisparse !== null) attachHiSparseObservability(metrics, stats, () => hisparse.stats());
    o.extendMetrics?.(metrics, stats, llm);
    const host = o.host ?? "127.0.0.1";
    const port = o.port ?? 8000;
    let address: string;
    try {
      address = await app.listen({ host, port });
    } catch (e) {
      throw new Error(`cannot listen on ${host}:${port}: ${(e as Error).message}`);
    }
    stats.start();
    let closing: Promise<void> | null = null;
    const close = () => {
      closing ??= (async () => {
        stats.stop();
        context.abortAll();
        await context.drain(SHUTDOWN_DRAIN_MS);
        await app.close();
        await tokenizers?.close();
        await llm.shutdown();
      })();
      return closing;
    };
    return { url: address, app, llm, context, metrics, stats, close };
  } catch (e) {
    await tokenizers?.close();
    await llm.shutdown();
    throw e;
  }
}
