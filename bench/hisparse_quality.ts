/**
 * HiSparse quality on real data, dense vs sparse, on the CPU backend
 * (run: `npx tsx bench/hisparse_quality.ts [--trials N] [--segments N] [--quick] [--block-size B]
 *   [--sink S] [--window W] [--digest-tokens T] [--quest sink=S,window=W,digest=T]...
 *   [--names heldout] [--passkey-only | --ppl-only] [--no-oracle] [--out FILE]`):
 *
 * - passkey retrieval at ~2K tokens (ref-small's trained length), in the format the reference
 *   models learned (/work/shared/models/README.md): real filler text with 1-4 needle sentences
 *   "The access code for the <colour> <noun> vault is <5 digits>." at random depths and the
 *   plain question at the end; greedy; a hit when the continuation starts with the code;
 * - perplexity through the decode path (forced tokens: each scored token runs one decode step,
 *   sparse attention included) on long real texts: the last 512 tokens of 2048-token windows,
 *   the first 1536 prefilled, so the sparse steps attend to topk of 1536-2047 tokens (~1/7).
 *
 * Dense is `--enable-hybrid-sparse off`; sparse is `on` with topk 256 (1/8 of 2K), sinks,
 * window and digest granularity as given (`--sink`, `--window`, `--digest-tokens`; absent: the
 * engine's defaults, config/hisparse_budget.ts), min_sparse_tokens 0 (every request goes
 * host-resident after its prefill); each `--quest k=v,..` adds one more Quest variant with its own
 * sink / window / digest tokens (passkey and topk-256 perplexity rows). `--names heldout` draws
 * the passkey names from colours and nouns that neither the eval set nor this bench's default
 * list uses (a held-out set; 20 trials by default, seed 7). The
 * perplexity runs also sweep topk 512 and 1024, and (`--oracle`, on by default) rank pages by
 * their exact attention mass instead of Quest's bound (bench/hisparse_oracle.ts, evaluation
 * only). Writes bench/results/hisparse_quality_cpu.md.
 */
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { resolveHiSparseConfig } from "../src/config/hisparse_config.js";
import type { HiSparseStats } from "../src/core/hisparse/plan.js";
import { LLM } from "../src/engine/llm.js";
import { formatSparseBlockStateLine } from "../src/metrics/hisparse_metrics.js";
import { Tokenizer } from "../src/tokenizer/tokenizer.js";
import { installExactMassSelection } from "./hisparse_oracle.js";

const argv = process.argv.slice(2);
const flag = (name: string, dflt: number) => {
  const i = argv.indexOf(name);
  return i < 0 ? dflt : Number(argv[i + 1]);
};
const quick = argv.includes("--quick");
const TRIALS = flag("--trials", quick ? 4 : argv.includes("--names") ? 20 : 40);
const SEGMENTS = flag("--segments", quick ? 1 : 4);
const root = join(fileURLToPath(new URL(".", import.meta.url)), "..");
const MODEL = join(root, "models", "ref-small");
const CONTEXT = 2048;
const PPL_PREFIX = 1536;
/** An optional token count: `--name N`, absent: undefined (the engine's default). */
const optFlag = (name: string): number | undefined =>
  argv.includes(name) ? Number(argv[argv.indexOf(name) + 1]) : undefined;
/** Sinks, recent window and digest granularity: `--sink`, `--window`, `--digest-tokens` (absent: the engine's defaults). */
const SPARSE = {
  topk: 256,
  sinkTokens: optFlag("--sink"),
  windowTokens: optFlag("--window"),
  digestTokens: optFlag("--digest-tokens"),
  minSparseTokens: 0,
};
const HELDOUT = argv.includes("--names") && argv[argv.indexOf("--names") + 1] === "heldout";
/** Perplexity also runs at these budgets (tokens). */
const SWEEP = quick ? [] : [512, 1024];
const ORACLE = !argv.includes("--no-oracle");
/** KV block (page) size: Quest selects whole pages, so smaller pages give a finer selection. */
const BLOCK_SIZE = flag("--block-size", 16);
const PASSKEY_ONLY = argv.includes("--passkey-only");
const PPL_ONLY = argv.includes("--ppl-only");
/** Where the report goes (default bench/results/hisparse_quality_cpu.md). */
const OUT_NAME = argv.includes("--out") ? argv[argv.indexOf("--out") + 1]! : "hisparse_quality_cpu.md";

/** Quest's knobs a variant may override (absent: SPARSE's). */
type QuestKnobs = { sinkTokens?: number; windowTokens?: number; digestTokens?: number };
/** An engine setting compared: dense, or sparse at a budget (oracle: exact-mass page ranking). */
interface Variant {
  name: string;
  topk: number | null;
  oracle: boolean;
  knobs?: QuestKnobs;
}
const DENSE: Variant = { name: "dense", topk: null, oracle: false };
const quest = (topk: number): Variant => ({ name: `Quest, topk ${topk}`, topk, oracle: false });
/** `--quest sink=S,window=W,digest=T` (repeatable): more Quest variants at topk 256. */
const EXTRA: Variant[] = argv.flatMap((a, i) => {
  if (a !== "--quest") return [];
  const kv = Object.fromEntries(argv[i + 1]!.split(",").map((x) => x.split("=") as [string, string]));
  const knobs: QuestKnobs = {
    sinkTokens: kv["sink"] === undefined ? undefined : Number(kv["sink"]),
    windowTokens: kv["window"] === undefined ? undefined : Number(kv["window"]),
    digestTokens: kv["digest"] === undefined ? undefined : Number(kv["digest"]),
  };
  return [{ name: `Quest, topk ${SPARSE.topk}, ${argv[i + 1]}`, topk: SPARSE.topk, oracle: false, knobs }];
});

/** Mulberry32 (deterministic trials). */
function makeRand(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Real texts on this machine: the filler of the passkey documents and the perplexity corpora. */
const SOURCES = {
  filler: "/usr/share/perl/5.36.0/pod/perldiag.pod",
  cFile: "/usr/include/X11/Xtrans/Xtranssock.c",
  manPage: "bash(1), rendered by `MANWIDTH=80 man bash | col -b`",
};
function manPageText(): string {
  const r = spawnSync("sh", ["-c", "MANWIDTH=80 man bash 2>/dev/null | col -b"], {
    encoding: "utf8",
    maxBuffer: 1 << 26,
  });
  if (r.status !== 0 || r.stdout.length < 100_000)
    throw new Error("cannot render the bash man page (man, col)");
  return r.stdout;
}

/** Held-out names (`--names heldout`): in neither this list nor src/eval/passkey.ts's. */
const HELDOUT_COLOURS = [
  "plum",
  "russet",
  "khaki",
  "mauve",
  "umber",
  "lilac",
  "tawny",
  "sepia",
  "fawn",
  "beige",
];
const HELDOUT_NOUNS = [
  "walrus",
  "kettle",
  "marble",
  "tundra",
  "pelican",
  "acorn",
  "trumpet",
  "lagoon",
  "bramble",
  "turnip",
];
const COLOURS = [
  "amber",
  "crimson",
  "teal",
  "violet",
  "silver",
  "ochre",
  "indigo",
  "scarlet",
  "jade",
  "cobalt",
];
const NOUNS = [
  "falcon",
  "otter",
  "lantern",
  "harbor",
  "willow",
  "comet",
  "badger",
  "anchor",
  "thistle",
  "raven",
];

interface PasskeyTrial {
  prompt: number[];
  code: string;
}

/** One passkey document of about CONTEXT - 16 tokens: filler lines with needles, then the question. */
function passkeyTrial(tok: Tokenizer, fillerLines: string[], rand: () => number): PasskeyTrial {
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(rand() * xs.length)]!;
  const numNeedles = 1 + Math.floor(rand() * 4);
  const needles: { name: string; code: string }[] = [];
  while (needles.length < numNeedles) {
    const name = HELDOUT
      ? `${pick(HELDOUT_COLOURS)} ${pick(HELDOUT_NOUNS)}`
      : `${pick(COLOURS)} ${pick(NOUNS)}`;
    if (needles.some((n) => n.name === name)) continue;
    needles.push({ name, code: String(10000 + Math.floor(rand() * 90000)) });
  }
  const target = needles[Math.floor(rand() * needles.length)]!;
  const question = `\nQuestion: What is the access code for the ${target.name} vault?\nAnswer: The access code for the ${target.name} vault is`;
  const budget = CONTEXT - 16 - tok.encode(question, { addSpecialTokens: false }).length;
  const lines: string[] = [];
  let used = 0;
  for (let i = Math.floor(rand() * fillerLines.length); used < budget - 40 * numNeedles; i++) {
    const line = fillerLines[i % fillerLines.length]!;
    const n = tok.encode(`${line}\n`, { addSpecialTokens: false }).length;
    if (used + n > budget - 40 * numNeedles) break;
    lines.push(line);
    used += n;
  }
  for (const n of needles) {
    const at = Math.floor(rand() * (lines.length + 1));
    lines.splice(at, 0, `The access code for the ${n.name} vault is ${n.code}.`);
  }
  const prompt = tok.encode(`${lines.join("\n")}${question}`, { addSpecialTokens: false });
  return { prompt: prompt.slice(-(CONTEXT - 16)), code: target.code };
}

interface RunStats {
  seconds: number;
  hisparse: HiSparseStats | null;
  generatedTokens: number;
}

/** Runs prompts through an engine (dense or sparse) and returns its outputs' ids and logprobs. */
async function runBatch(
  v: Variant,
  prompts: number[][],
  params: (i: number) => Record<string, unknown>,
): Promise<{ outs: { ids: number[]; text: string; logprobs: number[] }[]; stats: RunStats }> {
  const extensions =
    v.topk === null
      ? {}
      : {
          hisparse: resolveHiSparseConfig({ mode: "on", ...SPARSE, ...v.knobs, topk: v.topk }, BLOCK_SIZE),
        };
  if (v.oracle) installExactMassSelection();
  const llm = new LLM({
    model: MODEL,
    device: "cpu",
    maxModelLen: CONTEXT + 16,
    blockSize: BLOCK_SIZE,
    extensions,
    inprocWorker: v.oracle,
  });
  const t0 = performance.now();
  try {
    const engine = await llm.getEngine();
    const res = await llm.generate(
      prompts.map((p) => ({ promptTokenIds: p })),
      prompts.map((_, i) => params(i)),
    );
    const outs = res.map((o) => ({
      ids: o.outputs[0]!.tokenIds,
      text: o.outputs[0]!.text,
      logprobs: (o.outputs[0]!.logprobs ?? []).map((l) => l.sampledLogprob),
    }));
    const generatedTokens = outs.reduce((a, o) => a + o.ids.length, 0);
    return {
      outs,
      stats: {
        seconds: (performance.now() - t0) / 1000,
        hisparse: engine.hisparse?.stats() ?? null,
        generatedTokens,
      },
    };
  } finally {
    await llm.shutdown();
  }
}

/** Windows of CONTEXT tokens, evenly spaced over a text. */
function windows(tok: Tokenizer, text: string, n: number): number[][] {
  const ids = tok.encode(text, { addSpecialTokens: false });
  if (ids.length < CONTEXT) throw new Error("text too short for one window");
  const step = Math.floor((ids.length - CONTEXT) / Math.max(1, n - 1));
  return Array.from({ length: n }, (_, i) => ids.slice(i * step, i * step + CONTEXT));
}

/** Perplexity of the last CONTEXT - PPL_PREFIX tokens of each window, for each variant. */
async function perplexity(segs: number[][], variants: readonly Variant[]) {
  const prompts = segs.map((s) => s.slice(0, PPL_PREFIX));
  const forced = segs.map((s) => s.slice(PPL_PREFIX));
  const params = (i: number) => ({
    temperature: 0,
    maxTokens: forced[i]!.length,
    ignoreEos: true,
    logprobs: 0,
    forcedTokenIds: forced[i]!,
  });
  const ppl = (lps: number[]) => Math.exp(-lps.reduce((a, b) => a + b, 0) / lps.length);
  const rows: { v: Variant; ppl: number; stats: RunStats }[] = [];
  for (const v of variants) {
    const r = await runBatch(v, prompts, params);
    rows.push({ v, ppl: ppl(r.outs.flatMap((o) => o.logprobs)), stats: r.stats });
  }
  return { scored: forced.reduce((a, f) => a + f.length, 0), rows };
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const hitRate = (s: HiSparseStats) =>
  s.hitsTotal + s.missesTotal === 0 ? "n/a" : pct(s.hitsTotal / (s.hitsTotal + s.missesTotal));
/** H2D KiB per generated token of a run ("-" for dense). */
const h2dPerToken = (r: RunStats) =>
  r.hisparse === null
    ? "-"
    : `${(r.hisparse.hostToDeviceBytesTotal / r.generatedTokens / 1024).toFixed(1)} KiB`;
const oracle: Variant = { name: `exact-mass oracle, topk ${SPARSE.topk}`, topk: SPARSE.topk, oracle: true };

/** Report lines, echoed to the console. */
const lines: string[] = [];
const out = (s = "") => {
  lines.push(s);
  console.log(s);
};

/** The passkey section: accuracy of each variant on the same trials. */
async function passkeySection(tok: Tokenizer, variants: readonly Variant[]): Promise<void> {
  const filler = readFileSync(SOURCES.filler, "utf8")
    .split("\n")
    .filter((l) => l.trim().length > 0 && !l.includes("access code"));
  const rand = makeRand(HELDOUT ? 7 : 2026);
  const trials = Array.from({ length: TRIALS }, () => passkeyTrial(tok, filler, rand));
  const prompts = trials.map((t) => t.prompt);
  const runs = [];
  for (const v of variants)
    runs.push({ v, r: await runBatch(v, prompts, () => ({ temperature: 0, maxTokens: 8 })) });
  out(
    `## Passkey at ${CONTEXT - 16} tokens (${TRIALS} trials, 1-4 needles each${HELDOUT ? ", held-out names" : ""})`,
  );
  out();
  out(
    `Filler: ${SOURCES.filler}; needles and question in the models' learned format; a hit when the greedy continuation starts with the code. The first answer token comes from the (dense) prefill, the next ones from sparse decode steps.`,
  );
  out();
  out("| attention | accuracy | vs dense | same 8 tokens as dense | hit rate | H2D per token | wall time |");
  out("|---|---|---|---|---|---|---|");
  const dense = runs[0]!.r;
  const hits = (r: typeof dense) => r.outs.filter((o, i) => o.text.trim().startsWith(trials[i]!.code)).length;
  for (const { v, r } of runs) {
    const h = hits(r);
    const same = r.outs.filter((o, i) => o.text === dense.outs[i]!.text).length;
    const st = r.stats.hisparse;
    const delta = v.topk === null ? "-" : `${((100 * (h - hits(dense))) / TRIALS).toFixed(1)} points`;
    out(
      `| ${v.name} | ${h}/${TRIALS} = ${pct(h / TRIALS)} | ${delta} | ${same}/${TRIALS} | ${st === null ? "-" : hitRate(st)} | ${h2dPerToken(r.stats)} | ${r.stats.seconds.toFixed(0)} s |`,
    );
  }
  out();
}

/** The perplexity section: one table per text, a row per variant. */
async function perplexitySection(
  tok: Tokenizer,
  variants: readonly Variant[],
): Promise<HiSparseStats | null> {
  out(
    `## Perplexity through the decode path (last ${CONTEXT - PPL_PREFIX} tokens of ${SEGMENTS} windows of ${CONTEXT})`,
  );
  out();
  let lastQuest: RunStats | null = null;
  for (const [name, text] of [
    [`C code: ${SOURCES.cFile}`, readFileSync(SOURCES.cFile, "utf8")],
    [`man page: ${SOURCES.manPage}`, manPageText()],
  ] as const) {
    const r = await perplexity(windows(tok, text, SEGMENTS), variants);
    out(`${name}, ${r.scored} tokens scored:`);
    out();
    out("| attention | ppl | vs dense | hit rate | H2D per token | wall time |");
    out("|---|---|---|---|---|---|");
    const dense = r.rows[0]!.ppl;
    for (const row of r.rows) {
      const st = row.stats.hisparse;
      const rel = row.v.topk === null ? "-" : `${(100 * (row.ppl / dense - 1)).toFixed(2)}%`;
      out(
        `| ${row.v.name} | ${row.ppl.toFixed(3)} | ${rel} | ${st === null ? "-" : hitRate(st)} | ${h2dPerToken(row.stats)} | ${row.stats.seconds.toFixed(0)} s |`,
      );
    }
    out();
    lastQuest = r.rows[1]!.stats;
  }
  if (lastQuest !== null) {
    out(`Periodic line of the man-page Quest topk ${SPARSE.topk} run (over the whole run):`);
    out();
    out(`    ${formatSparseBlockStateLine(lastQuest.hisparse!, null, lastQuest.seconds)}`);
    out();
  }
  return lastQuest?.hisparse ?? null;
}

async function main(): Promise<void> {
  const tok = Tokenizer.fromDir(MODEL);
  const cmd = `npx tsx bench/hisparse_quality.ts${argv.length > 0 ? ` ${argv.join(" ")}` : ""}`;
  const eff = resolveHiSparseConfig({ mode: "on", ...SPARSE }, BLOCK_SIZE);
  out("# HiSparse quality on the CPU backend: dense vs sparse (ref-small)");
  out();
  out(`Command: \`${cmd}\` (load average ${loadavg()[0]!.toFixed(2)}, ${cpus().length} cores).`);
  out(
    `Model: models/ref-small (trained at 2048 tokens). Dense = \`--enable-hybrid-sparse off\`; sparse = \`--enable-hybrid-sparse on\` with topk ${SPARSE.topk} (1/8 of 2K) unless stated, sink_tokens ${eff.sinkTokens}, window_tokens ${eff.windowTokens}, digest_tokens ${eff.digestTokens}${argv.includes("--sink") || argv.includes("--window") || argv.includes("--digest-tokens") ? "" : " (the engine's defaults at this topk and block size)"}, device_buffer_tokens 2x topk, dense_layers [0, 1], min_sparse_tokens 0, block size ${BLOCK_SIZE}, greedy. The exact-mass oracle (bench/hisparse_oracle.ts, evaluation only) keeps the same sinks, window and budget but ranks pages by the attention mass they would receive, to separate the cost of the budget from the cost of Quest's bound.`,
  );
  out();
  // Oracle runs patch this thread's selector, so they go last in each section.
  if (!PPL_ONLY)
    await passkeySection(tok, [DENSE, quest(SPARSE.topk), ...EXTRA, ...(ORACLE ? [oracle] : [])]);
  if (!PASSKEY_ONLY)
    await perplexitySection(tok, [
      DENSE,
      quest(SPARSE.topk),
      ...EXTRA,
      ...SWEEP.map(quest),
      ...(ORACLE ? [oracle] : []),
    ]);
  out(
    "H2D bytes count the K/V slices (per layer, kv head and page) copied into hot buffers; on the CPU backend both tiers are host memory, so the figure measures the traffic the GPU path would move, not a speed.",
  );
  writeFileSync(join(root, "bench", "results", OUT_NAME), `${lines.join("\n")}\n`);
}

await main();
