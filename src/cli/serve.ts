import { type Command, InvalidArgumentError, Option } from "commander";
import { type HiSparseConfig, hisparseConfigOf } from "../config/hisparse_config.js";
import { DEFAULT_MAX_REQUEST_BODY_BYTES } from "../server/app.js";
import { createLogger, type LogFormat } from "../server/log.js";
import { DEFAULT_STATS_INTERVAL_S, type RunningServer, startServer } from "../server/server.js";
import type { WorkerInfo } from "../worker/worker.js";
import { addEngineFlags, engineArgsFromOptions, parseFloatArg, parseIntArg } from "./engine_flags.js";
import { action } from "./errors.js";
import { packageVersion } from "./info.js";
import { loadProgressBar } from "./progress.js";

/** Environment variable read when --api-key is not given (keeps the key out of `ps`). */
export const API_KEY_ENV = "HISPARSE_API_KEY";

interface ServeOptions extends Record<string, unknown> {
  host: string;
  port: number;
  apiKey?: string;
  servedModelName?: string;
  maxWaitingRequests?: number;
  maxRequestBodyBytes: number;
  statsInterval: number;
  logFormat: LogFormat;
  logLevel: string;
}

/** Parses a TCP port (0 = any free port). */
function parsePort(v: string): number {
  const n = parseIntArg(v);
  if (n < 0 || n > 65535) throw new InvalidArgumentError("must be a port number in [0, 65535].");
  return n;
}

/** Parses a positive integer flag. */
function parsePositiveInt(v: string): number {
  const n = parseIntArg(v);
  if (n < 1) throw new InvalidArgumentError("must be >= 1.");
  return n;
}

/** `hisparse serve`: the OpenAI-compatible server (vLLM's `vllm serve`). */
export function registerServe(program: Command): void {
  const cmd = program
    .command("serve")
    .description("serve the OpenAI-compatible API (completions, chat completions, models, metrics)")
    .option("--host <host>", "address to listen on (0.0.0.0 for every interface)", "127.0.0.1")
    .option("--port <port>", "port to listen on (0 picks a free one)", parsePort, 8000)
    .option("--api-key <key>", `key required as 'Authorization: Bearer <key>' on /v1 (or $${API_KEY_ENV})`)
    .option("--served-model-name <name>", "model name in the API (default: the model directory's name)")
    .option(
      "--max-waiting-requests <n>",
      "queued requests beyond which new ones get 503 (default: 4 x --max-num-seqs)",
      parsePositiveInt,
    )
    .option(
      "--max-request-body-bytes <n>",
      "largest request body accepted (413 above)",
      parsePositiveInt,
      DEFAULT_MAX_REQUEST_BODY_BYTES,
    )
    .option(
      "--stats-interval <s>",
      "seconds between stats log lines (0 = off)",
      parseFloatArg,
      DEFAULT_STATS_INTERVAL_S,
    )
    .addOption(
      new Option("--log-format <fmt>", "log lines as text or pino JSON")
        .choices(["text", "json"])
        .default("text"),
    )
    .addOption(
      new Option("--log-level <level>", "log level")
        .choices(["fatal", "error", "warn", "info", "debug", "trace", "silent"])
        .default("info"),
    );
  addEngineFlags(cmd).action(action(runServe));
}

async function runServe(o: ServeOptions): Promise<void> {
  if (o.statsInterval < 0) throw new Error("--stats-interval must be >= 0");
  const logger = createLogger(o.logFormat, o.logLevel);
  const engineArgs = engineArgsFromOptions(o);
  const bar = loadProgressBar();
  let server: RunningServer;
  try {
    server = await startServer({
      engineArgs,
      host: o.host,
      port: o.port,
      apiKey: o.apiKey ?? process.env[API_KEY_ENV] ?? null,
      servedModelName: o.servedModelName,
      maxWaitingRequests: o.maxWaitingRequests,
      maxRequestBodyBytes: o.maxRequestBodyBytes,
      statsIntervalSeconds: o.statsInterval,
      logger,
      version: packageVersion(),
      engineOptions: { onLoadProgress: bar.onProgress },
    });
  } finally {
    bar.stop();
  }
  const info = server.llm.engine.info;
  const hisparse = hisparseStartupSummary(hisparseConfigOf(server.llm.engine.args.extensions), info);
  if (hisparse !== null) logger.info({ hisparse: hisparse.fields }, hisparse.line);
  logger.info(
    `hisparse serving ${server.context.modelName} on ${server.url} (${info.backend}: ${info.deviceName}, ` +
      `max_model_len ${info.maxModelLen}, ${info.numGpuBlocks} KV blocks)`,
  );
  installSignalHandlers(server, logger);
}

/** Bytes as GiB with 2 decimals ("0.25 GiB"). */
const gib = (bytes: number): string => `${(bytes / 2 ** 30).toFixed(2)} GiB`;

/** The HiSparse settings in effect and its pools, as `hisparse serve` logs them at start-up. */
export interface HiSparseStartupSummary {
  /** One log line, e.g. "HiSparse auto: residency hybrid, topk 2048, ...; device pool 512 blocks (0.06 GiB) + ..., host pool 1024 pages (0.12 GiB)". */
  line: string;
  /** The same figures as pino fields (JSON log format); pool sizes in pages and bytes. */
  fields: {
    mode: string;
    residency: string;
    topk: number;
    deviceBufferTokens: number;
    minSparseTokens: number;
    numGpuBlocks: number;
    devicePoolBytes: number;
    /** Device bytes held for the host pages (all of them): dense layers' KV and digests. */
    hostPagesDeviceBytes: number;
    numHostBlocks: number;
    hostPoolBytes: number;
  };
}

/**
 * The start-up summary of HiSparse (mode auto or on): mode, residency, topk,
 * device_buffer_tokens, min_sparse_tokens (`on` only: it decides nothing in `auto`; token counts,
 * the `--hisparse-config` names; the JSON fields keep it in both modes), the
 * device pool (main-pool blocks × `info.kvBytesPerBlock`, the sparse layers' KV), the device
 * memory held per host page (host pages × `info.hisparse.deviceBytesPerHostBlock`: the dense
 * layers' KV and the Quest digests) and the host pool (pages × `info.hisparse.hostBytesPerBlock`),
 * in pages and GiB with 2 decimals.
 * @returns null when HiSparse is off (`config` null, as hisparseConfigOf gives for `off`, or a
 *   worker without HiSparse pools).
 */
export function hisparseStartupSummary(
  config: HiSparseConfig | null,
  info: Pick<WorkerInfo, "numGpuBlocks" | "kvBytesPerBlock" | "hisparse">,
): HiSparseStartupSummary | null {
  if (config === null || info.hisparse === null) return null;
  const devicePoolBytes = info.numGpuBlocks * info.kvBytesPerBlock;
  const numHostBlocks = info.hisparse.numHostBlocks;
  const hostPoolBytes = numHostBlocks * info.hisparse.hostBytesPerBlock;
  const hostPagesDeviceBytes = numHostBlocks * info.hisparse.deviceBytesPerHostBlock;
  const line =
    `HiSparse ${config.mode}: residency ${config.residency}, topk ${config.topk}, ` +
    `device_buffer_tokens ${config.deviceBufferTokens}` +
    // min_sparse_tokens only decides anything in `on` (auto attends sparsely once a page spills)
    (config.mode === "on" ? `, min_sparse_tokens ${config.minSparseTokens}; ` : "; ") +
    `device pool ${info.numGpuBlocks} blocks (${gib(devicePoolBytes)}) + ${gib(hostPagesDeviceBytes)} of dense-layer KV and digests, ` +
    `host pool ${numHostBlocks} pages (${gib(hostPoolBytes)})`;
  return {
    line,
    fields: {
      mode: config.mode,
      residency: config.residency,
      topk: config.topk,
      deviceBufferTokens: config.deviceBufferTokens,
      minSparseTokens: config.minSparseTokens,
      numGpuBlocks: info.numGpuBlocks,
      devicePoolBytes,
      hostPagesDeviceBytes,
      numHostBlocks,
      hostPoolBytes,
    },
  };
}

/**
 * SIGINT/SIGTERM: abort every request, close the listener, stop the engine, exit 0.
 * A second signal during shutdown exits at once with code 1.
 */
function installSignalHandlers(server: RunningServer, logger: { info(m: string): void }): void {
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) process.exit(1);
    stopping = true;
    logger.info(`${signal} received: shutting down`);
    server.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
}
