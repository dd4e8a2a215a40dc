/**
 * Micro-benchmark of the CPU backend (run: `npx tsx bench/cpu_ops.ts [--quick] [--only ops|model]`):
 * per-op timings at ref-small shapes (hidden 256, 4 heads / 2 kv heads, head_dim 64, ffn 768,
 * vocab 16384) on 1 and 2 threads, then whole-model decode and prefill rates of ref-small (real weights from
 * models/ref-small) through LlamaForCausalLM and the paged cache. Each figure is the median of
 * several timed repetitions. Other processes may share the cores: the last column gives the
 * largest share of the machine's CPU time they used during the row's measurement (machine busy
 * time minus this process's own), so contended rows can be told apart.
 */
import { cpus, loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { DensePagedAttention } from "../src/attention/backend.js";
import type { QkvLayout, Tensor } from "../src/backends/backend.js";
import { argmaxRow, CpuBackend } from "../src/backends/cpu/index.js";
import { loadModelConfig } from "../src/config/model_config.js";
import { LlamaForCausalLM } from "../src/models/llama.js";
import { SafetensorsCheckpoint } from "../src/models/safetensors.js";
import { buildMetadata, makeRand, randF32 } from "../test/unit/backends/cpu/helpers.js";

const quick = process.argv.includes("--quick");
/** `--only ops` or `--only model` runs one of the two tables. */
const only = process.argv[process.argv.indexOf("--only") + 1];
const REPS = quick ? 3 : 5;
const rand = makeRand(1);
const lines: string[] = [];
const out = (s: string) => {
  lines.push(s);
  console.log(s);
};

/** Busy CPU time of the whole machine in ms (all cores), from os.cpus(). */
function machineBusyMs(): number {
  let busy = 0;
  for (const c of cpus()) busy += c.times.user + c.times.nice + c.times.sys + c.times.irq;
  return busy;
}

/** Largest share of the machine (0..1) that other processes used during a measurement so far. */
let othersMax = 0;

/**
 * Runs fn and records how much of the machine other processes used meanwhile: machine busy time
 * minus this process's CPU time (all threads), over wall time x cores.
 */
function watchOthers<T>(fn: () => T): T {
  const busy0 = machineBusyMs();
  const own0 = process.cpuUsage();
  const t0 = performance.now();
  const r = fn();
  const wall = performance.now() - t0;
  const own = process.cpuUsage(own0);
  const others = machineBusyMs() - busy0 - (own.user + own.system) / 1000;
  if (wall > 50) othersMax = Math.max(othersMax, others / (wall * cpus().length));
  return r;
}

/**
 * Median milliseconds per call of fn, over `reps` timed batches of `inner` calls each, after one
 * untimed batch (JIT warm-up of the calling thread and of the worker threads).
 */
function median(fn: () => void, inner: number, reps = REPS): number {
  for (let i = 0; i < Math.max(inner, 3); i++) fn();
  const times: number[] = [];
  watchOthers(() => {
    for (let r = 0; r < reps; r++) {
      const t0 = performance.now();
      for (let i = 0; i < inner; i++) fn();
      times.push((performance.now() - t0) / inner);
    }
  });
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)]!;
}

const pct = (x: number) => `${Math.max(0, Math.round(x * 100))}%`;
const fmt = (ms: number) => (ms < 1 ? `${(ms * 1000).toFixed(0)} us` : `${ms.toFixed(2)} ms`);

function opTable(): void {
  const b1 = new CpuBackend({ numThreads: 1 });
  const b2 = new CpuBackend({ numThreads: 2 });
  out("| op | shape | 1 thread | 2 threads | other processes' CPU share |");
  out("|---|---|---|---|---|");
  const row = (name: string, shape: string, make: (b: CpuBackend) => () => void, inner: number) => {
    othersMax = 0;
    const t = [b1, b2].map((b) => {
      const fn = make(b);
      return median(() => {
        fn();
        b.resetWorkspace();
      }, inner);
    });
    out(`| ${name} | ${shape} | ${fmt(t[0]!)} | ${fmt(t[1]!)} | ${pct(othersMax)} |`);
  };
  const linear = (T: number, N: number, K: number) => (b: CpuBackend) => {
    const w = b.upload(randF32(rand, N * K, 0.05), [N, K], "f32");
    const x = randF32(rand, T * K);
    return () => void b.linear(b.stage(x, [T, K], "f32"), w, null);
  };
  for (const T of [1, 64]) {
    row("linear qkv", `[${T},256]x[512,256]`, linear(T, 512, 256), T === 1 ? 200 : 5);
    row("linear o_proj", `[${T},256]x[256,256]`, linear(T, 256, 256), T === 1 ? 200 : 5);
    row("linear gate_up", `[${T},256]x[1536,256]`, linear(T, 1536, 256), T === 1 ? 100 : 3);
    row("linear down", `[${T},768]x[256,768]`, linear(T, 256, 768), T === 1 ? 100 : 3);
  }
  row("linear lm_head", "[1,256]x[16384,256]", linear(1, 16384, 256), 10);
  const layout: QkvLayout = { numHeads: 4, numKvHeads: 2, headDim: 64 };
  const W = 8 * 64;
  const attention = (ctx: number, qLen: number) => (b: CpuBackend) => {
    const bs = 16;
    const nb = Math.ceil(ctx / bs);
    const kv = b.allocateKvCache({
      numLayers: 1,
      numBlocks: nb,
      blockSize: bs,
      numKvHeads: 2,
      headDim: 64,
      dtype: "f32",
    })[0]!;
    const blockIds = Array.from({ length: nb }, (_, i) => nb - 1 - i);
    const qkv = randF32(rand, qLen * W);
    return () => {
      const { meta } = buildMetadata(b, [{ numComputed: ctx - qLen, numNew: qLen, blockIds }], bs);
      b.pagedAttention(b.stage(qkv, [qLen, W], "f32"), layout, kv, meta, bs);
    };
  };
  row("pagedAttention decode", "ctx 128", attention(128, 1), 200);
  row("pagedAttention decode", "ctx 1024", attention(1024, 1), 50);
  row("pagedAttention decode", "ctx 4096", attention(4096, 1), 20);
  row("pagedAttention prefill", "512 tokens", attention(512, 512), 2);
  if (!quick) row("pagedAttention prefill", "2048 tokens", attention(2048, 2048), 1);
  const elementwise = (T: number) => (b: CpuBackend) => {
    const x = randF32(rand, T * 256);
    const w = b.upload(randF32(rand, 256), [256], "f32");
    return () => void b.rmsNorm(b.stage(x, [T, 256], "f32"), w, 1e-5);
  };
  row("rmsNorm", "[64,256]", elementwise(64), 200);
  const rope = (b: CpuBackend) => {
    const cs = b.upload(randF32(rand, 4096 * 64), [4096, 64], "f32");
    const pos = Int32Array.from({ length: 64 }, (_, i) => i);
    const x = randF32(rand, 64 * W);
    return () => b.rotaryEmbedding(b.stage(x, [64, W], "f32"), layout, b.stage(pos, [64], "i32"), cs);
  };
  row("rotaryEmbedding", "64 tokens", rope, 200);
  const silu = (b: CpuBackend) => {
    const x = randF32(rand, 64 * 1536);
    return () => void b.siluAndMul(b.stage(x, [64, 1536], "f32"));
  };
  row("siluAndMul", "[64,1536]", silu, 100);
  b1.dispose();
  b2.dispose();
}

/** ref-small decode and prefill through the model, on `numThreads` threads. */
function modelRates(numThreads: number): void {
  const dir = fileURLToPath(new URL("../models/ref-small", import.meta.url));
  const cfg = loadModelConfig(dir);
  const b = new CpuBackend({ numThreads });
  const bs = 16;
  const maxPos = 4096 + 64;
  const model = LlamaForCausalLM.load(cfg, SafetensorsCheckpoint.open(dir), b, maxPos);
  const numBlocks = maxPos / bs;
  const kvCaches: Tensor[] = b.allocateKvCache({
    numLayers: cfg.numHiddenLayers,
    numBlocks,
    blockSize: bs,
    numKvHeads: cfg.numKeyValueHeads,
    headDim: cfg.headDim,
    dtype: "f32",
  });
  const attention = new DensePagedAttention(b, model.layout, bs);
  const blockIds = Array.from({ length: numBlocks }, (_, i) => i);
  const forward = (ids: number[], numComputed: number): Float32Array => {
    const { meta, positions } = buildMetadata(b, [{ numComputed, numNew: ids.length, blockIds }], bs);
    const input = b.stage(Int32Array.from(ids), [ids.length], "i32");
    const idx = b.stage(Int32Array.from([ids.length - 1]), [1], "i32");
    const logits = b.toHost(
      model.forward(input, positions, { meta, attention, kvCaches }, idx),
    ) as Float32Array;
    b.resetWorkspace();
    return logits;
  };
  const prompt = Array.from({ length: 4096 }, () => 1 + Math.floor(rand() * (cfg.vocabSize - 1)));
  for (const T of quick ? [512] : [512, 2048]) {
    othersMax = 0;
    const ms = median(() => void forward(prompt.slice(0, T), 0), 1, 3);
    const rate = `${((T / ms) * 1000).toFixed(0)} tokens/s`;
    out(
      `| ${numThreads} | prefill ${T} tokens (one step) | ${(ms / 1000).toFixed(2)} s | ${rate} | ${pct(othersMax)} |`,
    );
  }
  for (const ctx of quick ? [128] : [128, 1024, 4000]) {
    forward(prompt.slice(0, ctx), 0);
    let next = 1;
    othersMax = 0;
    const ms = median(() => {
      // Rewrites position ctx - 1 each time, so every step attends over exactly ctx tokens.
      const logits = forward([next], ctx - 1);
      next = argmaxRow(logits, 0, cfg.vocabSize);
    }, 20);
    const rate = `${(1000 / ms).toFixed(0)} tokens/s`;
    const what = `decode at context ${ctx} (batch 1, incl. lm_head)`;
    out(`| ${numThreads} | ${what} | ${ms.toFixed(2)} ms/step | ${rate} | ${pct(othersMax)} |`);
  }
  model.dispose();
  b.dispose();
}

out(
  `CPU backend micro-benchmark (node ${process.version}, load average before: ${loadavg()
    .map((x) => x.toFixed(2))
    .join(" ")})`,
);
out("");
if (only !== "model") {
  opTable();
  out("");
}
if (only !== "ops") {
  out("| threads | ref-small step | time | rate | other processes' CPU share |");
  out("|---|---|---|---|---|");
  modelRates(1);
  modelRates(2);
  out("");
}
out(
  `load average after: ${loadavg()
    .map((x) => x.toFixed(2))
    .join(" ")}`,
);
