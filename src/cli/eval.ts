import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { Command, CommanderError, InvalidArgumentError, Option } from "commander";
import { ConfigError, type EngineArgs, validateEngineArgs } from "../config/engine_args.js";
import { loadModelConfig } from "../config/model_config.js";
import { LLM } from "../engine/llm.js";
import { loadFiller } from "../eval/filler.js";
import {
  buildNeedleDocs,
  evenDepths,
  type NeedleOptions,
  needleOptionReasons,
  runNeedleTrials,
  summarizeNeedle,
} from "../eval/needle.js";
import { type PplOptions, pplOptionReasons, pplWindows, runPpl } from "../eval/ppl.js";
import { needleHeading, needleTable, pplHeading, pplTable } from "../eval/table.js";
import { parseVariantSpecs, type VariantSpec } from "../eval/variants.js";
import { resolveMaxModelLen, resolveModelDir } from "../models/registry.js";
import { Tokenizer } from "../tokenizer/tokenizer.js";
import { parseIntList } from "./bench.js";
import { addEngineFlags, engineArgsFromOptions, parseIntArg } from "./engine_flags.js";
import { action } from "./errors.js";

interface EvalCommon extends Record<string, unknown> {
  compare?: string[];
  json?: string;
}

interface PplCliOptions extends EvalCommon {
  file: string;
  ctx: number;
  prefixTokens?: number;
  maxWindows?: number;
}

interface NeedleCliOptions extends EvalCommon {
  lengths: number[];
  depths: number[];
  trials: number;
  needles: [number, number];
  seed: number;
  fillerFile?: string[];
  maxTokens: number;
}

/** Parses `--depths`: a count N (N even depths from 0% to 100%) or a list of percentages "10,50,90". */
export function parseDepths(v: string): number[] {
  const s = v.trim();
  if (/^\d+$/.test(s)) {
    const n = Number(s);
    if (n < 1) throw new InvalidArgumentError("must be a count >= 1 or a list of percentages.");
    return evenDepths(n);
  }
  const xs = s.split(",").map((x) => Number(x.trim().replace(/%$/, "")));
  if (xs.some((x) => !(x >= 0 && x <= 100)))
    throw new InvalidArgumentError(
      "must be a count >= 1 or a list of percentages in [0, 100] (e.g. 10,50,90).",
    );
  return xs.map((x) => x / 100);
}

/** Needles per document the reference models were trained on (shared/models/README.md). */
export const MAX_NEEDLES = 4;

/** Parses `--needles`: "2" or a range "1-4" within [1, MAX_NEEDLES]. */
export function parseNeedleRange(v: string): [number, number] {
  const m = /^(\d+)(?:-(\d+))?$/.exec(v.trim());
  const lo = m === null ? 0 : Number(m[1]);
  const hi = m === null ? 0 : Number(m[2] ?? m[1]);
  if (m === null || lo < 1 || hi < lo || hi > MAX_NEEDLES)
    throw new InvalidArgumentError(`must be a count or a range like "1-4" within 1-${MAX_NEEDLES}.`);
  return [lo, hi];
}

/**
 * Rewrites `--compare A "--x 1 --y" B` as `--compare=A --compare=--x 1 --y --compare=B` so that
 * variant specs may start with "--" (commander would take them for options). Values after
 * `--compare` are collected up to the first argument that looks like one option (starts with "-"
 * and has no whitespace) or "--"; other arguments are left alone.
 */
export function expandCompareArgs(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a !== "--compare") {
      out.push(a);
      continue;
    }
    let j = i + 1;
    const isSpec = (x: string) => x !== "--" && (!x.startsWith("-") || /\s/.test(x));
    while (j < argv.length && isSpec(argv[j]!)) out.push(`--compare=${argv[j++]}`);
    if (j === i + 1) out.push(a);
    i = j - 1;
  }
  return out;
}

const COMPARE_HELP =
  'engine variants side by side: "NAME: FLAGS", "FLAGS" or "NAME" (no extra flags), e.g. dense "topk256: --enable-hybrid-sparse on --hybrid-sparse-topk 256"';

/** `hisparse eval ppl|needle`: quality of the engine's attention, variants side by side. */
export function registerEval(program: Command): void {
  const ev = program
    .command("eval")
    .description("long-context quality checks (perplexity, passkey), variants side by side");
  const ppl = ev
    .command("ppl")
    .description("perplexity of a text, scored token by token through the decode path")
    .requiredOption("--file <path>", "text file to score")
    .option("--ctx <n>", "tokens per window", parseIntArg, 1024)
    .option(
      "--prefix-tokens <n>",
      "prompt tokens of each window; the rest are scored (default: ctx / 2)",
      parseIntArg,
    )
    .option("--max-windows <n>", "windows at most (default: every whole window of the file)", parseIntArg)
    .option("--compare <spec...>", COMPARE_HELP)
    .option("--json <file>", "also write the results as JSON");
  addEngineFlags(ppl).action(action(runEvalPpl));
  const needle = ev
    .command("needle")
    .description("passkey retrieval accuracy by document length and needle depth")
    .option("--lengths <list>", "document lengths in tokens", parseIntList, [1024, 2048])
    .option(
      "--depths <n|list>",
      "depth count (even, 0%..100%) or percentages, e.g. 5 or 10,50,90",
      parseDepths,
      evenDepths(5),
    )
    .option("--trials <n>", "documents per length and depth", parseIntArg, 4)
    .addOption(
      new Option("--needles <n|range>", "needles per document, e.g. 1 or 1-4")
        .argParser(parseNeedleRange)
        .default([1, 4] as [number, number], "1-4"),
    )
    .option(
      "--filler-file <path...>",
      "filler text (default: the licence texts in /usr/share/common-licenses)",
    )
    .option("--max-tokens <n>", "tokens decoded per document", parseIntArg, 8)
    .option("--compare <spec...>", COMPARE_HELP)
    .option("--json <file>", "also write the results as JSON");
  addEngineFlags(needle).action(action(runEvalNeedle));
}

/**
 * Engine args of one variant: the command line's options, overridden by the flags the variant
 * gives explicitly (parsed with the same engine flag definitions).
 * @throws Error naming the variant for an unknown or malformed flag, or a --model/--tokenizer.
 */
export function variantEngineArgs(base: Record<string, unknown>, spec: VariantSpec): EngineArgs {
  const cmd = addEngineFlags(new Command(spec.name))
    .exitOverride()
    .configureOutput({ writeErr: () => {}, writeOut: () => {} });
  try {
    cmd.parse(spec.argv, { from: "user" });
  } catch (e) {
    const msg = e instanceof CommanderError ? e.message.replace(/^error: /, "") : (e as Error).message;
    throw new Error(`--compare variant "${spec.name}": ${msg}`);
  }
  const opts = cmd.opts();
  const given = Object.keys(opts).filter((k) => cmd.getOptionValueSource(k) === "cli");
  if (given.includes("model") || given.includes("tokenizer"))
    throw new Error(
      `--compare variant "${spec.name}": variants compare engine settings of one model; give --model outside --compare`,
    );
  const merged: Record<string, unknown> = { ...base };
  for (const k of given) merged[k] = opts[k];
  return engineArgsFromOptions(merged);
}

/**
 * How a task's options are checked against an engine's length: reasons they cannot run with
 * `maxModelLen` tokens, the length named for the user as `source`.
 */
type TaskReasons = (maxModelLen: number, source: string) => string[];

/**
 * The variants with their engine args, every one checked before any runs: its flags parsed,
 * its HiSparse settings resolved, its engine args validated (validateEngineArgs), and the task's
 * lengths checked against its max model length (--max-model-len, else the model's
 * max_position_embeddings, read from config.json without loading weights).
 * @throws ConfigError for the task's own options; Error naming every bad variant (one line).
 */
export function resolveVariants(
  o: EvalCommon,
  taskReasons: TaskReasons,
): { spec: VariantSpec; args: EngineArgs }[] {
  const general = taskReasons(Number.POSITIVE_INFINITY, "");
  if (general.length > 0) throw new ConfigError(general);
  const specs = parseVariantSpecs(o.compare);
  const named = o.compare !== undefined && o.compare.length > 0;
  const modelConfig = loadModelConfig(resolveModelDir(o["model"] as string | undefined));
  const out: { spec: VariantSpec; args: EngineArgs }[] = [];
  const problems: string[] = [];
  for (const spec of specs) {
    try {
      const args = variantEngineArgs(o, spec);
      const reasons = validateEngineArgs(args, modelConfig);
      if (reasons.length === 0) {
        const len = resolveMaxModelLen(modelConfig, args.maxModelLen);
        const source =
          args.maxModelLen === undefined
            ? `the model's max_position_embeddings (${len})`
            : `--max-model-len (${len})`;
        reasons.push(...taskReasons(len, source));
      }
      if (reasons.length > 0) throw new ConfigError(reasons);
      out.push({ spec, args });
    } catch (e) {
      // One line per variant: a multi-reason ConfigError's bullet list folded into it.
      const msg = (e as Error).message.replace(/:\n {2}- /, ": ").replaceAll("\n  - ", "; ");
      const prefixed = named && !msg.startsWith("--compare variant");
      problems.push(prefixed ? `--compare variant "${spec.name}": ${msg}` : msg);
    }
  }
  if (problems.length > 0) throw new Error(problems.join("; "));
  return out;
}

/** Seconds between `[eval]` progress lines while a variant runs. */
const EVAL_PROGRESS_INTERVAL_S = 10;

/**
 * A progress callback printing `[eval] variant NAME: 12/40 <unit> done, 35.0 s` on stderr at
 * most every EVAL_PROGRESS_INTERVAL_S seconds (and for the last one), so long runs are not
 * silent between the variant's start and done lines.
 */
function variantProgress(name: string, unit: string, t0: number): (done: number, total: number) => void {
  let last = t0;
  return (done, total) => {
    const now = performance.now();
    if (done < total && now - last < EVAL_PROGRESS_INTERVAL_S * 1000) return;
    last = now;
    console.error(
      `[eval] variant ${name}: ${done}/${total} ${unit} done, ${((now - t0) / 1000).toFixed(1)} s`,
    );
  };
}

/**
 * Runs `fn` with an engine for each variant in turn (one at a time; each is shut down after);
 * `fn` gets a progress callback for its requests (see variantProgress).
 */
async function forEachVariant<T>(
  variants: { spec: VariantSpec; args: EngineArgs }[],
  unit: string,
  fn: (llm: LLM, onProgress: (done: number, total: number) => void) => Promise<T>,
): Promise<{ name: string; flags: string[]; result: T; seconds: number }[]> {
  const out: { name: string; flags: string[]; result: T; seconds: number }[] = [];
  for (const { spec, args } of variants) {
    const t0 = performance.now();
    console.error(
      `[eval] variant ${spec.name}${spec.argv.length > 0 ? ` (${spec.argv.join(" ")})` : ""} ...`,
    );
    const llm = new LLM(args);
    try {
      const result = await fn(llm, variantProgress(spec.name, unit, t0));
      const seconds = (performance.now() - t0) / 1000;
      console.error(`[eval] variant ${spec.name} done in ${seconds.toFixed(1)} s`);
      out.push({ name: spec.name, flags: spec.argv, result, seconds });
    } finally {
      await llm.shutdown();
    }
  }
  return out;
}

function tokenizerOf(args: EngineArgs): Tokenizer {
  return Tokenizer.fromDir(args.tokenizer ?? resolveModelDir(args.model));
}

function writeJson(path: string | undefined, value: unknown): void {
  if (path === undefined) return;
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, `${JSON.stringify(value, null, 2)}\n`);
  console.error(`[eval] results written to ${path}`);
}

async function runEvalPpl(o: PplCliOptions): Promise<void> {
  const opts: PplOptions = {
    ctx: o.ctx,
    prefixTokens: o.prefixTokens ?? Math.floor(o.ctx / 2),
    maxWindows: o.maxWindows ?? null,
  };
  const variants = resolveVariants(o, (len, source) => pplOptionReasons(opts, len, source));
  const base = variants[0]!.args;
  let text: string;
  try {
    text = readFileSync(o.file, "utf8");
  } catch (e) {
    throw new Error(`cannot read ${o.file} (${(e as NodeJS.ErrnoException).code ?? "error"})`);
  }
  const windows = pplWindows(tokenizerOf(base).encode(text, { addSpecialTokens: false }), opts);
  const results = await forEachVariant(variants, "windows", (llm, onProgress) =>
    runPpl(llm, windows, opts.prefixTokens, onProgress),
  );
  console.log(pplHeading(o.file, windows.length, opts.ctx, opts.prefixTokens));
  for (const l of pplTable(results)) console.log(l);
  writeJson(o.json, {
    task: "ppl",
    model: resolveModelDir(base.model),
    file: o.file,
    ...opts,
    variants: results.map((r) => ({ name: r.name, flags: r.flags, seconds: r.seconds, ...r.result })),
  });
}

async function runEvalNeedle(o: NeedleCliOptions): Promise<void> {
  const variants = resolveVariants(o, (len, source) => needleOptionReasons(o, len, source));
  const base = variants[0]!.args;
  const tok = tokenizerOf(base);
  const filler = loadFiller(o.fillerFile);
  const opts: NeedleOptions = {
    lengths: o.lengths,
    depths: o.depths,
    trials: o.trials,
    needles: o.needles,
    seed: base.seed,
    maxTokens: o.maxTokens,
  };
  const docs = buildNeedleDocs(tok, tok.encode(filler.text, { addSpecialTokens: false }), opts);
  const results = await forEachVariant(variants, "documents", async (llm, onProgress) => {
    const trials = await runNeedleTrials(llm, docs, opts.maxTokens, onProgress);
    return { trials, cells: summarizeNeedle(trials, opts) };
  });
  console.log(needleHeading(opts.trials, opts.needles, filler.files));
  for (const l of needleTable(results.map((r) => ({ name: r.name, cells: r.result.cells })))) console.log(l);
  writeJson(o.json, {
    task: "needle",
    model: resolveModelDir(base.model),
    fillerFiles: filler.files,
    ...opts,
    variants: results.map((r) => ({ name: r.name, flags: r.flags, seconds: r.seconds, ...r.result })),
  });
}
