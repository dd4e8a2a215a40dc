/**
 * Tensor-parallel checks on the GPU machine (issue 16), run by scripts/gpu/tp_check.sh:
 *  A. one GPU: `--tensor-parallel-size 1` through the NCCL path (distributedExecutorBackend
 *     "threads": one rank thread, a one-rank NCCL communicator, every all-reduce and the logits
 *     gather called, inside the decode CUDA graphs) against the single-GPU path ("uni"):
 *     greedy tokens identical on ref-small (real weights), and the median decode step time of
 *     Llama-3.1-8B (dummy weights, batch 8) within 2%;
 *  B. with G >= 2 GPUs: TP = 2, 4, 8 (<= G) against TP = 1 on Llama-3.1-8B (dummy weights): greedy
 *     tokens equal except after a step whose TP=1 top-2 logprob gap is below GAP_TOL (bf16
 *     partial sums round differently); then a scaling table (decode step ms and tokens/s at
 *     batch 1 and 32) for Llama-3.1-8B and the Llama-3.1-70B shape (dummy weights).
 * Prints one line per check ("PASS ..." / "FAIL ...") and the table; writes $OUT/tp_check.json.
 * Exit 0 iff every check passed. Options: --quick (part A only); --repeat K (K alternating
 * rounds of the timing, default 1); --device cpu (a smoke run of
 * part A on the CPU backend with ref-small for the timing too, the shared-memory collectives in
 * place of NCCL; the 2% bound is then reported, not required).
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { makeEngineArgs } from "../../src/config/engine_args.js";
import { makeSamplingParams } from "../../src/core/sampling_params.js";
import { LLMEngine } from "../../src/engine/llm_engine.js";

const quick = process.argv.includes("--quick");
const device = process.argv.includes("cpu") ? "cpu" : "cuda";
const GAP_TOL = 0.05;
const results: Record<string, unknown> = {};
let failed = 0;

function report(ok: boolean, what: string): void {
  console.log(`${ok ? "PASS" : "FAIL"} ${what}`);
  if (!ok) failed++;
}

/** Seeded prompts of random token ids in [100, 10000). */
function prompts(n: number, len: number, seed: number): number[][] {
  let x = seed >>> 0 || 1;
  const next = () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % 9900;
  };
  return Array.from({ length: n }, () => Array.from({ length: len }, () => 100 + next()));
}

interface RunResult {
  tokens: number[][];
  /** Per request and step: TP=1's gap between the top-2 logprobs (for tie-aware comparison). */
  gaps: number[][];
  /** Median wall time of the pure decode steps, ms. */
  decodeStepMs: number;
  decodeTokensPerS: number;
  devices: string[];
  communicator: string | null;
}

/** Runs `ps` to completion (greedy, ignore EOS) on a fresh engine and measures its decode steps. */
async function run(opts: Record<string, unknown>, ps: number[][], maxTokens: number): Promise<RunResult> {
  const args = makeEngineArgs({ device, blockSize: 16, gpuMemoryUtilization: 0.85, ...opts });
  const engine = await LLMEngine.create(args);
  try {
    const params = makeSamplingParams({ temperature: 0, maxTokens, ignoreEos: true, logprobs: 2 });
    for (const [i, p] of ps.entries())
      engine.addRequest(`r${i}`, { promptTokenIds: p }, params, { outputKind: "final_only" });
    const stepMs: number[] = [];
    let decodeTokens = 0;
    const done = new Map<string, { tokens: number[]; gaps: number[] }>();
    while (engine.hasPendingWork()) {
      const t0 = performance.now();
      const outs = await engine.step();
      const dt = performance.now() - t0;
      const st = engine.stats;
      if (st !== null && st.numPromptTokens === 0 && st.numGenerationTokens > 0) {
        stepMs.push(dt);
        decodeTokens += st.numGenerationTokens;
      }
      for (const o of outs) {
        if (!o.finished) continue;
        const c = o.outputs[0]!;
        const gaps = (c.logprobs ?? []).map((l) => (l.topLogprobs[0] ?? 0) - (l.topLogprobs[1] ?? -Infinity));
        done.set(o.requestId, { tokens: c.tokenIds, gaps });
      }
    }
    const sorted = [...stepMs].sort((a, b) => a - b);
    const median = sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
    const total = stepMs.reduce((a, b) => a + b, 0);
    const ids = ps.map((_, i) => done.get(`r${i}`)!);
    return {
      tokens: ids.map((d) => d.tokens),
      gaps: ids.map((d) => d.gaps),
      decodeStepMs: median,
      decodeTokensPerS: (decodeTokens / total) * 1000,
      devices: engine.info.tensorParallel.devices,
      communicator: engine.info.tensorParallel.communicator,
    };
  } finally {
    await engine.shutdown();
  }
}

/** Tokens equal, or equal up to a step whose reference top-2 gap is below GAP_TOL (then not compared further). */
function tieAwareEqual(ref: RunResult, got: RunResult): { ok: boolean; nearTies: number } {
  let nearTies = 0;
  for (let r = 0; r < ref.tokens.length; r++) {
    const [a, b] = [ref.tokens[r]!, got.tokens[r]!];
    const k = a.findIndex((t, i) => t !== b[i]);
    if (k < 0) continue;
    if ((ref.gaps[r]![k] ?? 0) >= GAP_TOL) return { ok: false, nearTies };
    nearTies++;
  }
  return { ok: true, nearTies };
}

// ---- A: one GPU, N = 1 through NCCL == the single-GPU path ------------------------------------
{
  const small = prompts(8, 24, 1);
  const common = { maxModelLen: 256 };
  const uni = await run({ ...common, distributedExecutorBackend: "uni" }, small, 32);
  const nccl = await run({ ...common, distributedExecutorBackend: "threads" }, small, 32);
  const same = JSON.stringify(uni.tokens) === JSON.stringify(nccl.tokens);
  report(same, `ref-small: TP=1 over ${nccl.communicator} gives the single-GPU greedy tokens (8 x 32)`);
  results.refSmall = { uni: uni.tokens, nccl: nccl.tokens, communicator: nccl.communicator };

  const big =
    device === "cuda"
      ? { model: "llama-3.1-8b", loadFormat: "dummy", maxModelLen: 1024 }
      : { maxModelLen: 512 };
  const ps = prompts(8, 128, 2);
  // The median decode step of each path (128 steps each); `--repeat K` alternates K rounds and
  // keeps each path's best median.
  const times = { uni: [] as number[], nccl: [] as number[] };
  const k = process.argv.indexOf("--repeat");
  const rounds = k >= 0 ? Number(process.argv[k + 1]) : 1;
  for (let i = 0; i < rounds; i++) {
    times.uni.push((await run({ ...big, distributedExecutorBackend: "uni" }, ps, 128)).decodeStepMs);
    times.nccl.push((await run({ ...big, distributedExecutorBackend: "threads" }, ps, 128)).decodeStepMs);
  }
  const [u, n] = [Math.min(...times.uni), Math.min(...times.nccl)];
  const ratio = n / u;
  report(
    ratio <= 1.02 || device === "cpu",
    `${device === "cuda" ? "llama-3.1-8b" : "ref-small"} batch 8: decode step ${n.toFixed(3)} ms over NCCL (TP=1) vs ${u.toFixed(3)} ms single-GPU (ratio ${ratio.toFixed(4)}, limit 1.02)`,
  );
  results.overhead = { uniMs: times.uni, ncclMs: times.nccl, ratio };
}

// ---- B: several GPUs --------------------------------------------------------------------------
const { detectCuda } = await import("../../src/backends/detect.js");
const gpus = detectCuda().deviceCount;
if (!quick && device === "cuda" && gpus >= 2) {
  const sizes = [1, 2, 4, 8].filter((n) => n <= gpus);
  const ps = prompts(4, 64, 3);
  const base = { model: "llama-3.1-8b", loadFormat: "dummy", maxModelLen: 512 };
  const ref = await run({ ...base, tensorParallelSize: 1 }, ps, 64);
  for (const n of sizes.filter((s) => s > 1)) {
    const got = await run({ ...base, tensorParallelSize: n }, ps, 64);
    const cmp = tieAwareEqual(ref, got);
    report(
      cmp.ok,
      `llama-3.1-8b TP=${n}: greedy tokens equal TP=1 (${cmp.nearTies} near-ties, gap < ${GAP_TOL})`,
    );
  }
  const table: { model: string; tp: number; batch: number; stepMs: number; tokPerS: number }[] = [];
  for (const model of ["llama-3.1-8b", "llama-3.1-70b"]) {
    for (const n of sizes) {
      if (model === "llama-3.1-70b" && n === 1) continue; // 141 GB of bf16 weights: not on one H200
      for (const batch of [1, 32]) {
        const r = await run(
          { model, loadFormat: "dummy", maxModelLen: 1024, tensorParallelSize: n },
          prompts(batch, 128, 4),
          128,
        );
        table.push({ model, tp: n, batch, stepMs: r.decodeStepMs, tokPerS: r.decodeTokensPerS });
      }
    }
  }
  console.log("\n| model | TP | batch | decode step ms | decode tok/s |\n|---|---|---|---|---|");
  for (const t of table)
    console.log(`| ${t.model} | ${t.tp} | ${t.batch} | ${t.stepMs.toFixed(3)} | ${t.tokPerS.toFixed(1)} |`);
  results.scaling = table;
} else console.log(`(${gpus} GPU${gpus === 1 ? "" : "s"} present: the multi-GPU part is skipped)`);

const out = process.env.OUT;
if (out) writeFileSync(join(out, "tp_check.json"), JSON.stringify(results, null, 2));
console.log(failed === 0 ? "tp_check: all passed" : `tp_check: ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
