import { type Command, InvalidArgumentError, Option } from "commander";
import { DEFAULT_MAX_REQUEST_BODY_BYTES } from "../server/app.js";
import { createLogger, type LogFormat } from "../server/log.js";
import { DEFAULT_STATS_INTERVAL_S, type RunningServer, startServer } from "../server/server.js";
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
    .description("serve the OpenAI-compatible API (completions, chat completions, models, metrics, preheat)")
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
  const kv = info.kvCache;
  logger[kv.logLevel]({ [kv.key]: kv.fields }, kv.line);
  const tp = info.tensorParallel;
  if (tp.communicator !== null)
    logger.info(
      { tensor_parallel: { size: tp.size, devices: tp.devices, communicator: tp.communicator } },
      `tensor parallel: ${tp.size} rank${tp.size > 1 ? "s" : ""} over ${tp.communicator}: ${tp.devices.map((d, r) => `rank ${r} ${d}`).join(", ")}`,
    );
  // Before the ready line: a client (or test) that signals as soon as it reads it must find the
  // handlers installed, or the default action kills the process without a graceful shutdown.
  installSignalHandlers(server, logger);
  logger.info(
    `hisparse serving ${server.context.modelName} on ${server.url} (${info.backend}: ${info.deviceName}, ` +
      `${tp.size > 1 ? `tensor_parallel_size ${tp.size}, ` : ""}max_model_len ${info.maxModelLen}, ${info.numGpuBlocks} KV blocks${tp.size > 1 ? " per rank" : ""})`,
  );
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
