import { mkdirSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import cliProgress from "cli-progress";
import { type Command, InvalidArgumentError, Option } from "commander";
import { DATASET_NAMES, type DatasetName, getSamples } from "../bench/datasets.js";
import { GpuMonitor, nvidiaSmiAvailable } from "../bench/gpu_monitor.js";
import { LATENCY_METRICS, type LatencyMetric, parseGoodput } from "../bench/metrics.js";
import { failedRequestLines, formatReport } from "../bench/report.js";
import type { EndpointKind } from "../bench/request_func.js";
import { Rng } from "../bench/rng.js";
import { type BenchmarkConfig, type BenchmarkDeps, resultJson, runBenchmark } from "../bench/serve.js";
import { fetchFirstModel } from "../bench/server_info.js";
import { type SweepPoint, sweepPointFrom, sweepSvg } from "../bench/svg.js";
import { resolveModelDir } from "../models/registry.js";
import { Tokenizer } from "../tokenizer/tokenizer.js";
import { runMultiTurnBench } from "./bench_multiturn.js";
import { parseFloatArg, parseIntArg } from "./engine_flags.js";
import { action } from "./errors.js";
import { progressLines } from "./progress.js";

/** Parses a rate: a number > 0 or "inf". */
export function parsePositiveOrInf(v: string): number {
  if (v.trim().toLowerCase() === "inf") return Number.POSITIVE_INFINITY;
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n) || n <= 0)
    throw new InvalidArgumentError("must be a number > 0 or inf.");
  return n;
}

/** Parses "1,2,4" into positive integers. */
export function parseIntList(v: string): number[] {
  const xs = v.split(",").map((s) => s.trim());
  if (xs.some((s) => !/^\d+$/.test(s) || Number(s) < 1))
    throw new InvalidArgumentError("must be a comma-separated list of integers >= 1.");
  return xs.map(Number);
}

/** The options of `hisparse bench serve` (commander's camelCase keys). */
export interface BenchServeOptions {
  baseUrl?: string;
  host: string;
  port: number;
  endpoint?: string;
  backend: EndpointKind;
  model?: string;
  tokenizer?: string;
  datasetName: DatasetName;
  dataset?: DatasetName;
  datasetPath?: string;
  multiturnConversations: number;
  multiturnTurns: number;
  multiturnFirstLen: number;
  multiturnTurnLen: number;
  numPrompts: number;
  inputLen?: number;
  outputLen?: number;
  randomInputLen?: number;
  randomOutputLen?: number;
  randomRangeRatio: number;
  lognormalSigma: number;
  sharegptOutputLen?: number;
  requestRate: number;
  burstiness: number;
  maxConcurrency?: number;
  numWarmups: number;
  seed: number;
  ignoreEos: boolean;
  temperature?: number;
  extraBody?: string;
  apiKey?: string;
  percentileMetrics: string;
  metricPercentiles: string;
  goodput?: string[];
  saveResult: boolean;
  saveDetailed: boolean;
  resultDir?: string;
  resultFilename?: string;
  label?: string;
  sweepConcurrency?: number[];
  plot?: string;
  disableTqdm: boolean;
  gpuMetrics: boolean;
}

/** `hisparse bench serve`: the serving benchmark (vLLM's `vllm bench serve` flags). */
export function registerBench(program: Command): void {
  const bench = program.command("bench").description("benchmarks");
  bench
    .command("serve")
    .description("benchmark an OpenAI-compatible server (ours, vLLM, llama.cpp) with vLLM's metrics")
    .option("--base-url <url>", "server URL, e.g. http://127.0.0.1:8000 (default: --host and --port)")
    .option("--host <host>", "server host", "127.0.0.1")
    .option("--port <n>", "server port", parseIntArg, 8000)
    .option(
      "--endpoint <path>",
      "API path (default: /v1/completions, or /v1/chat/completions for openai-chat)",
    )
    .addOption(
      new Option("--backend <kind>", "API to drive").choices(["openai", "openai-chat"]).default("openai"),
    )
    .option("--model <name>", "model name to send (default: the first of /v1/models)")
    .option(
      "--tokenizer <dir>",
      "tokenizer that builds prompts and counts tokens (default: the bundled ref-small)",
    )
    .addOption(
      new Option("--dataset-name <name>", "prompt source").choices([...DATASET_NAMES]).default("random"),
    )
    .addOption(new Option("--dataset <name>", "same as --dataset-name").choices([...DATASET_NAMES]))
    .option("--dataset-path <file>", "text file (file) or ShareGPT JSON (sharegpt)")
    .option(
      "--multiturn-conversations <n>",
      "multiturn: conversations at once (--sweep-concurrency runs one per value)",
      parseIntArg,
      8,
    )
    .option("--multiturn-turns <n>", "multiturn: turns per conversation", parseIntArg, 13)
    .option("--multiturn-first-len <n>", "multiturn: tokens of turn 1's prompt", parseIntArg, 74160)
    .option("--multiturn-turn-len <n>", "multiturn: new tokens of each later turn", parseIntArg, 753)
    .option("--num-prompts <n>", "requests in the measured run", parseIntArg, 1000)
    .option(
      "--input-len <n>",
      "mean prompt length in tokens (random, lognormal, file; default 1024)",
      parseIntArg,
    )
    .option("--output-len <n>", "mean output length in tokens (default 128; multiturn: 220)", parseIntArg)
    .option("--random-input-len <n>", "same as --input-len (vLLM's name)", parseIntArg)
    .option("--random-output-len <n>", "same as --output-len (vLLM's name)", parseIntArg)
    .option("--random-range-ratio <r>", "uniform lengths in len × [1 − r, 1 + r]", parseFloatArg, 0)
    .option("--lognormal-sigma <s>", "σ of the log-normal lengths", parseFloatArg, 0.5)
    .option(
      "--sharegpt-output-len <n>",
      "fixed output length for sharegpt (default: the reply's)",
      parseIntArg,
    )
    .addOption(
      new Option("--request-rate <r>", "requests per second, or inf to send all at once")
        .argParser(parsePositiveOrInf)
        .default(Number.POSITIVE_INFINITY, "inf"),
    )
    .option("--burstiness <b>", "Gamma shape of the arrival gaps (1 = Poisson)", parsePositiveOrInf, 1)
    .option("--max-concurrency <n>", "requests in flight at most (client side)", parseIntArg)
    .option("--num-warmups <n>", "warm-up requests before the measured run", parseIntArg, 0)
    .option("--seed <n>", "seed of the dataset and the arrival process", parseIntArg, 0)
    .option("--ignore-eos", "ask for exactly the output length (ignore_eos: true)", false)
    .option("--temperature <t>", "sampling temperature sent with each request", parseFloatArg)
    .option("--extra-body <json>", "JSON object merged into every request body")
    .option("--api-key <key>", "Bearer key (default: $OPENAI_API_KEY)")
    .option(
      "--percentile-metrics <list>",
      `metrics to summarize (${LATENCY_METRICS.join(",")})`,
      "ttft,tpot,itl",
    )
    .option("--metric-percentiles <list>", "percentiles to report, e.g. 50,90,99", "99")
    .option("--goodput <slo...>", "SLOs in ms for goodput, e.g. ttft:500 tpot:50 e2el:10000")
    .option("--save-result", "write the result JSON", false)
    .option("--save-detailed", "include per-request arrays in the JSON", false)
    .option("--result-dir <dir>", "folder of the result files (default: .)")
    .option(
      "--result-filename <name>",
      "result file name (default: <label>-<rate>qps[-concurrencyN]-<model>-<date>.json)",
    )
    .option("--label <text>", "label of the run (default: the backend)")
    .option(
      "--sweep-concurrency <list>",
      "run once per --max-concurrency value, e.g. 1,2,4,8, and plot",
      parseIntList,
    )
    .option("--plot <file>", "SVG file of the sweep (default: <result-dir>/sweep-<model>.svg)")
    .option("--disable-tqdm", "no progress bar", false)
    .option("--no-gpu-metrics", "do not sample nvidia-smi even when present")
    .action(action(runBenchServe));
}

/** Parses and checks the list flags. */
function parseLists(o: BenchServeOptions): { metrics: LatencyMetric[]; percentiles: number[] } {
  const metrics = o.percentileMetrics.split(",").map((s) => s.trim());
  for (const m of metrics)
    if (!(LATENCY_METRICS as readonly string[]).includes(m))
      throw new Error(`--percentile-metrics takes ${LATENCY_METRICS.join(", ")}, got "${m}"`);
  const percentiles = o.metricPercentiles.split(",").map((s) => Number(s.trim()));
  if (percentiles.some((p) => !(p >= 0 && p <= 100)))
    throw new Error(`--metric-percentiles takes numbers in [0, 100], got "${o.metricPercentiles}"`);
  return { metrics: metrics as LatencyMetric[], percentiles };
}

/** `--extra-body` and `--temperature` as one object. */
function extraBodyOf(o: BenchServeOptions): Record<string, unknown> | undefined {
  let extra: Record<string, unknown> = {};
  if (o.extraBody !== undefined) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(o.extraBody);
    } catch {
      throw new Error("--extra-body must be a JSON object");
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed))
      throw new Error("--extra-body must be a JSON object");
    extra = parsed as Record<string, unknown>;
  }
  if (o.temperature !== undefined) extra.temperature = o.temperature;
  return Object.keys(extra).length > 0 ? extra : undefined;
}

/**
 * Progress on stderr: a bar (cli-progress) on a terminal, else a line every 10 s (logs stay
 * informative during long runs); none with --disable-tqdm.
 */
function progressBar(disabled: boolean): BenchmarkDeps["progress"] {
  if (disabled) return undefined;
  if (!process.stderr.isTTY) return progressLines("bench");
  const bar = new cliProgress.SingleBar(
    {
      stream: process.stderr,
      format: "Requests [{bar}] {value}/{total} | {duration_formatted}",
      hideCursor: true,
    },
    cliProgress.Presets.shades_classic,
  );
  let done = 0;
  return {
    start: (total) => {
      done = 0;
      bar.start(total, 0);
    },
    tick: () => bar.update(++done),
    stop: () => bar.stop(),
  };
}

async function runBenchServe(o: BenchServeOptions): Promise<void> {
  const { metrics, percentiles } = parseLists(o);
  const goodput = parseGoodput(o.goodput ?? []);
  const baseUrl = (o.baseUrl ?? `http://${o.host}:${o.port}`).replace(/\/+$/, "");
  if (!/^https?:\/\//.test(baseUrl)) {
    throw new Error(`--base-url must start with http:// or https:// (got ${baseUrl})`);
  }
  const apiKey = o.apiKey ?? process.env.OPENAI_API_KEY;
  const endpoint = o.endpoint ?? (o.backend === "openai" ? "/v1/completions" : "/v1/chat/completions");
  const tokDir = o.tokenizer ?? resolveModelDir(undefined);
  const tok = Tokenizer.fromDir(tokDir);
  const served = await fetchFirstModel(baseUrl, apiKey);
  const model = o.model ?? served;
  if (model === null) throw new Error(`${baseUrl}/v1/models is missing; pass --model NAME`);
  if ((o.dataset ?? o.datasetName) === "multiturn") {
    await runMultiTurnBench(o, baseUrl, model, apiKey, tok, extraBodyOf(o));
    return;
  }
  const requests = getSamples(
    tok,
    {
      name: o.datasetName,
      path: o.datasetPath,
      numPrompts: o.numPrompts,
      inputLen: o.randomInputLen ?? o.inputLen ?? 1024,
      outputLen: o.randomOutputLen ?? o.outputLen ?? 128,
      rangeRatio: o.randomRangeRatio,
      lognormalSigma: o.lognormalSigma,
      sharegptOutputLen: o.sharegptOutputLen,
    },
    new Rng(o.seed),
  );
  const base: BenchmarkConfig = {
    kind: o.backend,
    apiUrl: `${baseUrl}${endpoint.startsWith("/") ? "" : "/"}${endpoint}`,
    model,
    requests,
    requestRate: o.requestRate,
    burstiness: o.burstiness,
    maxConcurrency: o.maxConcurrency ?? null,
    numWarmups: o.numWarmups,
    ignoreEos: o.ignoreEos,
    extraBody: extraBodyOf(o),
    apiKey,
    selectedMetrics: metrics,
    selectedPercentiles: percentiles,
    goodput,
    seed: o.seed,
  };
  const gpu = o.gpuMetrics && nvidiaSmiAvailable();
  const deps: BenchmarkDeps = {
    countTokens: (t) => tok.encode(t, { addSpecialTokens: false }).length,
    progress: progressBar(o.disableTqdm),
  };
  const caps = o.sweepConcurrency ?? [o.maxConcurrency ?? null];
  const jsons: Record<string, unknown>[] = [];
  const points: SweepPoint[] = [];
  for (const [k, cap] of caps.entries()) {
    const cfg = { ...base, maxConcurrency: cap, numWarmups: k === 0 ? base.numWarmups : 0 };
    printHeader(cfg);
    const r = await runBenchmark(cfg, { ...deps, gpuMonitor: gpu ? new GpuMonitor() : null });
    for (const l of failedRequestLines(r)) console.log(l);
    const report = formatReport(r, { ...cfg, hasGoodput: Object.keys(goodput).length > 0 });
    for (const l of report) console.log(l);
    const info = {
      backend: o.backend,
      modelId: model,
      tokenizerId: tokDir,
      numPrompts: requests.length,
      requestRate: o.requestRate,
      burstiness: o.burstiness,
      maxConcurrency: cap,
      datasetName: o.datasetName,
      label: o.label,
    };
    jsons.push(resultJson(r, info, cfg, o.saveDetailed));
    if (cap !== null) points.push(sweepPointFrom(cap, r.metrics));
    if (r.metrics.completed === 0 && requests.length > 0) {
      writeOutputs(o, model, jsons, points);
      const first = failedRequestLines(r)[0]?.replace(/^Error \d+: /, "") ?? "no detail";
      throw new Error(`all ${requests.length} requests failed (first: ${first})`);
    }
  }
  writeOutputs(o, model, jsons, points);
}

function printHeader(cfg: BenchmarkConfig): void {
  const rate = cfg.requestRate === Number.POSITIVE_INFINITY ? "inf" : String(cfg.requestRate);
  const dist = cfg.burstiness === 1 ? "Poisson process" : "Gamma distribution";
  console.log(`Traffic request rate: ${rate}`);
  console.log(`Burstiness factor: ${cfg.burstiness} (${dist})`);
  console.log(`Maximum request concurrency: ${cfg.maxConcurrency ?? "None"}`);
}

/** Writes the result JSON (one run: an object; a sweep: an array) and the sweep's SVG. */
function writeOutputs(
  o: BenchServeOptions,
  model: string,
  jsons: Record<string, unknown>[],
  points: SweepPoint[],
): void {
  const dir = o.resultDir ?? ".";
  const modelBase = basename(model);
  const sweep = o.sweepConcurrency !== undefined;
  if (o.saveResult) {
    const stamp = new Date().toISOString().replace(/[-:]/g, "").slice(0, 15);
    const rate = o.requestRate === Number.POSITIVE_INFINITY ? "inf" : String(o.requestRate);
    const conc = sweep ? "-sweep" : o.maxConcurrency !== undefined ? `-concurrency${o.maxConcurrency}` : "";
    const name = o.resultFilename ?? `${o.label ?? o.backend}-${rate}qps${conc}-${modelBase}-${stamp}.json`;
    const path = join(dir, name);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, `${JSON.stringify(sweep ? jsons : jsons[0], null, 2)}\n`);
    console.log(`Result written to ${path}`);
  }
  if (sweep) {
    const path = o.plot ?? join(dir, `sweep-${modelBase}.svg`);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(
      path,
      sweepSvg(points, `${modelBase} — ${o.datasetName}, ${jsons[0]?.num_prompts} prompts`),
    );
    console.log(`Sweep plot written to ${path}`);
  }
}
