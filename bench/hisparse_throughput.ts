/**
 * HiSparse decode throughput vs concurrency (issue 6), GPU machine:
 *   node dist/bench/hisparse_throughput.js [--config configs/llama-3.1-8b] [--contexts 32768,131072]
 *     [--batches 32768:1,4,8,16;131072:1,2,4] [--off-batches SPEC] [--modes off,on,auto] [--steps 16]
 *     [--kv-budget-gib 32] [--host-pool-gib 64] [--topk 2048] [--buffer 4096] [--dense-layers 0,1]
 *     [--json FILE] [--budget-s 420] [--overlap P[,P2...]] [--num-layers N --num-experts E]
 *     [--indexer-share N] [--row-prefetch on,off]
 *     [--host-kv-cache-dtype auto|fp8] [--digest-tokens 4] [--digest-dtype bf16|fp8]
 * Llama-3.1-8B shape with seeded dummy weights (bf16), block size 16, CUDA graphs. Modes: `off`,
 * `auto`, `on` (residency host: long requests go host-resident after prefill) and `on-hybrid`
 * (`on` with residency hybrid: sparse attention over pages that stay on the device while there
 * is room, spilled under pressure). A mode listed again is another round (alternating rounds,
 * e.g. `auto,off,auto,off`, measure run-to-run spread): its columns are `auto#2`, `off#2`, and
 * round k of a mode is compared with round k of `off`.
 *
 * Same device memory for every mode: `--kv-budget-gib` bytes hold the dense KV cache (off), or
 * HiSparse's main pool, dense-layer KV, digests and tables (on, auto); the host tier is
 * `--host-pool-gib` of pinned memory. (The defaults emulate a node whose host memory is twice its
 * KV memory, the regime HiSparse is for: this GPU machine has 128 GiB of RAM for 141 GB of HBM,
 * so a host tier larger than the device pool is impossible at full device size. With 32 GiB,
 * `off` holds 7 requests of 32K and 1 of 128K; the 64 GiB host pool holds 17 and 4.)
 *
 * Dummy weights and random keys make Quest's choice of pages change much more from one step to
 * the next than a trained model's (whose attention is coherent over time: arXiv 2608.07009
 * reports 7-13% misses at topk 2048): the hit rate printed with each point says how
 * miss-heavy the run was; the figures are pessimistic for HiSparse in that respect.
 *
 * `--host-kv-cache-dtype fp8`: the HiSparse modes keep fp8 host pages (half the host-link bytes
 * per miss; the same host pool holds twice the pages).
 * `--overlap P` (benchmark only, HiSparseConfig.benchSelectionOverlap): every sparse step keeps
 * each page of a request's previous selection (per layer and kv head) with probability P before
 * Quest fills the rest of the budget, so throughput is measured as a function of the selection
 * overlap: P = 0 is the engine's own selection over random keys (dummy weights: 14-33% hits);
 * the reference models re-select 96-99% of pages in long decodes (issue 18), so P = 0.97 stands for
 * them. Every printed line, the table header and the JSON carry the P used; figures without it
 * are the engine's own selection. Several values (`--overlap 0,0.97`, Quest models) run every
 * HiSparse mode's points once per P on the same engine (columns `auto p=0.97`; the captured
 * graphs are dropped between values, as they hold P), `off` once.
 * The HiSparse modes share one device side (KV caches, pinned host tier, slot tables, graphs:
 * bench/hisparse_harness.ts rescheduleBenchEngine), each with its own scheduler, so the host
 * tier is pinned once per run. After the point table comes the peak table: each column's best
 * pure-decode tok/s over B against off's best, and batch 1 against off's batch 1.
 *
 * Filling contexts: prefills do not run the model (ModelRunner.fastPrefill): each prefill chunk
 * writes every layer's K/V and Quest digests from fixed random qkv rows, through the same kernels
 * a real prefill uses, and mirrors its pages to the host tier as a real prefill does (in `on`
 * the request then goes host-resident). A 128K-token context fills in about a second instead of
 * the tens of seconds a real prefill takes; decode steps then run the real model (graph replays),
 * over random keys, so Quest selects different pages from step to step (a miss-heavy workload).
 *
 * DSA models (`--config configs/glm-5 --num-layers 8`: GLM-5's per-layer shape cut to 8 layers
 * and 16 routed experts, as bench/mla_bench.ts): the indexer selects (its top-k and the hot
 * buffer are derived, --topk / --buffer / --dense-layers do not apply), prefills fast-fill latent
 * rows and indexer keys, and `--overlap P` keeps each row of a request's previous selection (per
 * indexer) with probability P, the rest being the model's own picks (native/kernels/
 * hisparse_rows_overlap.cu; the paper's LRU miss rates at 2x and 4x top-k buffers correspond to
 * P = 0.87 and 0.93). `--indexer-share N`: one indexer per N layers (IndexShare; the other layers
 * reuse its top-k), and `--row-prefetch on,off` runs each HiSparse mode with the exact prefetch
 * of the sharing layers' row copies on and off, side by side (benchmark A/B).
 *
 * Per mode, one configuration sized for the longest context serves every point. Per (context,
 * batch B): add B requests of `context` prompt tokens, step until every
 * running request decodes (requests that do not fit wait, or are preempted by `off`, or spill in
 * `auto`), run 3 decode steps (graph capture), then time `--steps` decode steps with the host
 * clock (each step ends with device sampling, which waits for the GPU): tokens/s = decoded tokens
 * / seconds, over the pure decode steps only (a step that also prefills, as `off` admitting or
 * recomputing beyond its capacity, is not counted; such points carry a note and a * in the
 * table). Printed: one row per (context, B) with tok/s per mode, running requests, and the
 * on/off and auto/off ratios; then HiSparse hit rates and host-to-device GB/s.
 */
import { writeFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { CudaBackend } from "../src/backends/cuda/cuda_backend.js";
import {
  DIGEST_DTYPES,
  type DigestDtype,
  type HiSparseConfig,
  HOST_KV_CACHE_DTYPES,
  type HostKvCacheDtype,
  resolveHiSparseConfig,
} from "../src/config/hisparse_config.js";
import { derivedMaxModelLen, loadModelConfig } from "../src/config/model_config.js";
import { DummyWeights } from "../src/models/dummy.js";
import { DeepseekV3ForCausalLM } from "../src/models/llama.js";
import { loadModel, resolveModelDir } from "../src/models/registry.js";
import {
  abortAll,
  addRequests,
  type BenchEngine,
  createBenchEngine,
  isDecodeStep,
  rescheduleBenchEngine,
  setRowPrefetch,
  setSelectionOverlap,
  step,
} from "./hisparse_harness.js";
import { printThroughputTables, type Row } from "./hisparse_throughput_report.js";
import { cutGlm5 } from "./mla_bench_setup.js";
import {
  checkPrefetchRounds,
  parseOverlaps,
  parsePrefetches,
  type Round,
  roundLabel,
  roundLabelsOf,
  roundsOfMode,
  uniqueLabels,
} from "./throughput_rounds.js";

const arg = (name: string, d: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : d;
};
const GiB = 2 ** 30;
const BLOCK = 16;
/** Positions the model supports (YaRN: original x factor, as vLLM derives max_model_len); a context is capped so that its decode steps still fit. */
const maxPositions = derivedMaxModelLen(
  loadModelConfig(resolveModelDir(arg("config", "configs/llama-3.1-8b"))),
);
/** A context as run: capped at maxPositions - 1024 so that its decode steps fit (131072 runs at 130048). */
const capContext = (c: string) => Math.min(Number(c), maxPositions - 1024);
const contexts = arg("contexts", "32768,131072").split(",").map(capContext);
const batchSpec = arg("batches", "32768:1,4,8,16;131072:1,2,4");
/** `--off-batches`: off's batch sizes in the same form (default: --batches); off saturates early. */
const offBatchSpec = arg("off-batches", batchSpec);
type BenchMode = "off" | "on" | "auto" | "on-hybrid";
const BENCH_MODES: readonly BenchMode[] = ["off", "on", "auto", "on-hybrid"];
const modes = arg("modes", "off,on,auto").split(",") as BenchMode[];
for (const m of modes)
  if (!BENCH_MODES.includes(m)) throw new Error(`--modes: ${m} is not one of ${BENCH_MODES.join(", ")}`);
const STEPS = Number(arg("steps", "16"));
const budgetBytes = Math.floor(Number(arg("kv-budget-gib", "32")) * GiB);
const hostPoolBytes = Math.floor(Number(arg("host-pool-gib", "64")) * GiB);
const deadline = performance.now() + Number(arg("budget-s", "420")) * 1000;
const overlapArg = arg("overlap", "");
const overlaps = parseOverlaps(overlapArg);
const overlapTag = overlapArg === "" ? "" : `, selection overlap p=${overlapArg} (benchmark knob)`;
const prefetches = parsePrefetches(arg("row-prefetch", ""));
/** `--host-kv-cache-dtype auto|fp8`: host-tier pages as the device pool's, or fp8 (half the bytes per miss). */
const hostKvCacheDtype = arg("host-kv-cache-dtype", "auto");
if (!HOST_KV_CACHE_DTYPES.includes(hostKvCacheDtype as HostKvCacheDtype))
  throw new Error(
    `--host-kv-cache-dtype must be one of ${HOST_KV_CACHE_DTYPES.join(", ")}, got ${hostKvCacheDtype}`,
  );
const denseLayers = arg("dense-layers", "0,1")
  .split(",")
  .filter((x) => x !== "")
  .map(Number);
/** Quest digests (absent: the config's defaults): tokens per digest and element type (issue 18). */
const digestTokens = arg("digest-tokens", "");
const digestDtype = arg("digest-dtype", "");
if (digestDtype !== "" && !DIGEST_DTYPES.includes(digestDtype as DigestDtype))
  throw new Error(`--digest-dtype must be one of ${DIGEST_DTYPES.join(", ")}, got ${digestDtype}`);
const digestOptions = {
  ...(digestTokens !== "" ? { digestTokens: Number(digestTokens) } : {}),
  ...(digestDtype !== "" ? { digestDtype: digestDtype as DigestDtype } : {}),
};

/** Batch sizes per context: "C:b1,b2;C2:..." or one list for every context (`spec`: off's or the rest's). */
function batchesFor(ctx: number, spec = batchSpec): number[] {
  for (const part of spec.split(";")) {
    const [c, list] = part.includes(":") ? part.split(":") : [String(ctx), part];
    if (capContext(c!) === ctx) return list!.split(",").map(Number);
  }
  return [1];
}
/** Every batch size run at a context, ascending (the table's rows). */
const allBatchesFor = (ctx: number) =>
  [...new Set([...batchesFor(ctx), ...batchesFor(ctx, offBatchSpec)])].sort((a, b) => a - b);

function hisparseConfig(mode: Exclude<BenchMode, "off">, dsa: boolean): HiSparseConfig {
  // DSA models derive topk (index_topk), the hot buffer and dense layers (config/hisparse_dsa.ts).
  const quest = dsa
    ? {}
    : {
        topk: Number(arg("topk", "2048")),
        deviceBufferTokens: Number(arg("buffer", "4096")),
        denseLayers,
        ...digestOptions,
      };
  const cfg = resolveHiSparseConfig({
    mode: mode === "on-hybrid" ? "on" : mode,
    residency: mode === "on" ? "host" : "hybrid",
    ...quest,
    hostPoolBytes,
    minSparseTokens: 0,
    hostKvCacheDtype: hostKvCacheDtype as HostKvCacheDtype,
  });
  const p = overlaps[0] ?? null;
  return p === null ? cfg : { ...cfg, benchSelectionOverlap: p };
}

/** Steps until every running request decodes and nothing more gets admitted (or a step cap). */
function rampUp(e: BenchEngine, cap: number): void {
  let stable = 0;
  for (let i = 0; i < cap && stable < 3; i++) {
    const { so } = step(e);
    stable = isDecodeStep(so) ? stable + 1 : 0;
  }
}

function measure(
  e: BenchEngine,
  vocab: number,
  ctx: number,
  batch: number,
  mode: string,
  overlap: number | null,
): Row {
  const ids = addRequests(e, vocab, batch, ctx, 100_000);
  const fillSteps = Math.ceil(ctx / e.args.maxNumBatchedTokens) * batch + 50;
  rampUp(e, fillSteps);
  for (let i = 0; i < 3; i++) step(e); // graph capture of this bucket
  const pre0 = e.scheduler.makeStats().numPreemptions;
  // Only pure decode steps count (time, tokens, hits, misses, bytes): a step that also prefills
  // runs ModelRunner.fastPrefill for the whole batch (no model, zero logits), so it would flatter
  // the mode.
  let tokens = 0;
  let mixed = 0;
  let ms = 0;
  let hits = 0;
  let misses = 0;
  let h2dBytes = 0;
  let sparseDecodes = 0;
  for (let i = 0; i < STEPS; i++) {
    const before = e.hisparse?.stats();
    const t = performance.now();
    const { so, outs } = step(e);
    const dt = performance.now() - t;
    if (!isDecodeStep(so)) {
      mixed++;
      continue;
    }
    const after = e.hisparse?.stats();
    if (before && after) {
      hits += after.hitsTotal - before.hitsTotal;
      misses += after.missesTotal - before.missesTotal;
      h2dBytes += after.hostToDeviceBytesTotal - before.hostToDeviceBytesTotal;
      sparseDecodes += after.sparseDecodesTotal - before.sparseDecodesTotal;
    }
    ms += dt;
    for (const o of outs) tokens += o.newTokenIds.length;
  }
  const secs = ms / 1000;
  const s = e.scheduler.makeStats();
  const counted = STEPS - mixed;
  const row: Row = {
    context: ctx,
    mode,
    overlap,
    batch,
    tokPerS: counted > 0 ? tokens / secs : 0,
    stepMs: counted > 0 ? ms / counted : 0,
    running: s.numRunningReqs,
    waiting: s.numWaitingReqs,
    preemptions: s.numPreemptions - pre0,
    hitRate: hits + misses > 0 ? hits / (hits + misses) : null,
    h2dGBps: e.hisparse && counted > 0 ? h2dBytes / secs / 1e9 : null,
    sparseDecodes,
    note:
      mixed > 0
        ? `${mixed} of ${STEPS} steps also prefilled (admission or recompute after preemption), not counted`
        : "",
  };
  abortAll(e, ids);
  return row;
}

const backend = new CudaBackend({ workspaceBytes: 8 * GiB });

/** The MLA config of --config cut to `numLayers` layers, dummy weights on the device. */
function loadCut(numLayers: number, maxLen: number) {
  const cfg = cutGlm5(
    loadModelConfig(resolveModelDir(arg("config", "configs/glm-5"))),
    numLayers,
    Number(arg("num-experts", "16")),
    Number(arg("indexer-share", "1")),
  );
  const m = DeepseekV3ForCausalLM.load(
    cfg,
    new DummyWeights(cfg, { seed: 0, dtype: "bf16" }),
    backend,
    maxLen,
  );
  return { config: cfg, model: m };
}
const maxCtx = Math.max(...contexts);
const t0 = performance.now();
/** `--num-layers N`: an MLA config (GLM-5) cut to N layers and `--num-experts` routed experts (bench/mla_bench_setup.ts). */
const numLayersArg = arg("num-layers", "");
const { config, model } =
  numLayersArg === ""
    ? loadModel({
        modelDir: arg("config", "configs/llama-3.1-8b"),
        backend,
        loadFormat: "dummy",
        seed: 0,
        maxModelLen: maxCtx + 1024,
      })
    : loadCut(Number(numLayersArg), maxCtx + 1024);
const isDsa = config.mla?.indexer != null;
checkPrefetchRounds(prefetches, config.mla?.indexer?.layerTypes ?? null);
console.log(
  `loaded ${config.architecture} (dummy, ${config.numHiddenLayers} layers) in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
);
const knobs = isDsa
  ? `DSA: the indexer's top ${config.mla!.indexer!.topk}, hot buffer 2 x top-k rows`
  : `topk ${arg("topk", "2048")}, buffer ${arg("buffer", "4096")}, dense layers [${denseLayers}]`;
console.log(
  `device KV budget ${(budgetBytes / GiB).toFixed(1)} GiB for every mode; host pool ${(hostPoolBytes / GiB).toFixed(1)} GiB; ${knobs}${overlapTag}`,
);
const rows: Row[] = [];
const roundLabels = roundLabelsOf(modes);
const roundsOf = (mode: BenchMode): Round[] => roundsOfMode(mode === "off", overlaps, prefetches);
const labelOf = (round: string, r: Round) => roundLabel(round, r, overlaps.length > 1);
/** Per listed mode, its rounds' column labels, made unique (`#k` on repeats: --row-prefetch on,off,on,off). */
const roundLabelTable = uniqueLabels(
  modes.map((m, i) => roundsOf(m).map((r) => labelOf(roundLabels[i]!, r))),
);
const labels = roundLabelTable.flat();
if (isDsa && overlaps.length > 1)
  throw new Error("--overlap with several values is for Quest models (the DSA overlap is set at start-up)");
/**
 * One configuration per mode, sized for the longest context, serves every context (fewer pinned
 * allocations; graph buckets depend only on the batch size); the HiSparse modes share one device
 * side (rescheduleBenchEngine: one pinned host tier, the slowest part to allocate).
 */
let hsEngine: BenchEngine | null = null;
function engineFor(mode: BenchMode): BenchEngine {
  const opts = {
    blockSize: BLOCK,
    maxModelLen: maxCtx + 1024,
    maxNumSeqs: Math.max(...contexts.flatMap(allBatchesFor)),
    maxNumBatchedTokens: 8192,
    kvBudgetBytes: budgetBytes,
  };
  if (mode === "off") return createBenchEngine(backend, model, { ...opts, hisparse: null });
  const hs = hisparseConfig(mode, isDsa);
  hsEngine =
    hsEngine === null
      ? createBenchEngine(backend, model, { ...opts, hisparse: hs })
      : rescheduleBenchEngine(hsEngine, hs);
  return hsEngine;
}
outer: for (const [mi, mode] of modes.entries()) {
  let e: BenchEngine;
  try {
    e = engineFor(mode);
  } catch (err) {
    console.log(`${mode}: does not start: ${(err as Error).message}`);
    continue;
  }
  console.log(`${mode}: ${e.numGpuBlocks} device blocks, ${e.numHostBlocks} host blocks`);
  for (const [ri, round] of roundsOf(mode).entries()) {
    const { p } = round;
    const label = roundLabelTable[mi]![ri]!;
    if (p !== null && !isDsa) setSelectionOverlap(e, p);
    if (round.prefetch !== null) setRowPrefetch(e, round.prefetch);
    for (const ctx of contexts)
      for (const b of batchesFor(ctx, mode === "off" ? offBatchSpec : batchSpec)) {
        if (performance.now() > deadline) {
          console.log("time budget reached: remaining points skipped");
          if (e !== hsEngine) e.dispose();
          break outer;
        }
        const r = measure(e, config.vocabSize, ctx, b, label, p);
        rows.push(r);
        console.log(
          `  ${label} context ${ctx} B=${b}: ${r.tokPerS.toFixed(0)} tok/s, step ${r.stepMs.toFixed(2)} ms, running ${r.running}, waiting ${r.waiting}, preemptions ${r.preemptions}` +
            (r.hitRate === null
              ? ""
              : `, hit rate ${(100 * r.hitRate).toFixed(1)}%${p === null ? "" : ` (overlap p=${p})`}, H2D ${r.h2dGBps!.toFixed(1)} GB/s`) +
            (r.sparseDecodes > 0 ? `, sparse decodes ${r.sparseDecodes}` : "") +
            (r.note === "" ? "" : ` (${r.note})`),
        );
      }
  }
  if (e !== hsEngine) e.dispose();
  backend.resetWorkspace();
}
(hsEngine as BenchEngine | null)?.dispose();

/** The off column a label is compared with: off's round of the same number, else its first. */
const offOf = (label: string): string => {
  const k = label.includes("#") ? label.split("#")[1]!.split(" ")[0] : "1";
  const offs = labels.filter((l) => l === "off" || l.startsWith("off#"));
  return offs.find((l) => l === `off#${k}`) ?? offs[0] ?? "off";
};
const ratioLabels = labels.filter((l) => l !== "off" && !l.startsWith("off#"));
if (overlapArg !== "")
  console.log(`\nHiSparse columns use the benchmark's selection overlap p = ${overlapArg}`);
printThroughputTables(rows, { contexts, batchesFor: allBatchesFor, labels, ratioLabels, offOf });
const json = arg("json", "");
if (json !== "")
  writeFileSync(
    json,
    JSON.stringify({ budgetBytes, hostPoolBytes, denseLayers, selectionOverlap: overlaps, rows }, null, 2),
  );
backend.dispose();
