/**
 * Dense-path speed of the CUDA backend (issue 4's benchmark), GPU machine:
 *   node dist/bench/cuda_bench.js [--config configs/llama-3.1-8b] [--json FILE]
 * With seeded dummy weights of the config (bf16):
 * 1. decode step time (captured CUDA graph of one decode step, median-free mean of 20 back-to-back
 *    replays after warm-up) at batch {1, 16, 64} × context {1K, 8K, 32K}, against the HBM
 *    roofline: (weight bytes + KV bytes read) / 4.3 TB/s (the device copy bandwidth measured on
 *    this H200, shared/device/README.md). The KV cache holds zeros (a full-context prefill of
 *    every grid point would take minutes); the attention kernels read every byte regardless.
 * 2. prefill tokens/s for one 8K and one 32K prompt (chunks of 8192 tokens, as the engine runs it
 *    with --max-num-batched-tokens 8192), and model FLOP/s against the cuBLAS bf16 GEMM rate
 *    measured here on an 8192 × 4096 × 28672 GEMM (the gate/up projection's shape).
 * Prints markdown tables; --json writes the figures (and loadSeconds: the dummy load, bench/peers).
 * --paths new,old: decode measured for each path in one run: "new" is the default backend
 * (linears of <= 8 rows through the skinny GEMM, native/kernels/gemv.h), "old" cuBLAS for every
 * linear (denseGemvMaxTokens = 0); default "new". A path may end in ":N" (e.g. new:128): decode
 * attention splits of at least N tokens (addon.setDecodeMinSplitTokens; default 256), and in
 * "@N" (e.g. new@0): the kernel launch options N (addon.setKernelLaunchOptions, kernels.h: 1 =
 * programmatic dependent launch, 2 = deeper decode-attention pipeline at small batch; default 3);
 * both suffixes may be combined (new:128@1).
 * --no-prefill skips part 2.
 */
import { writeFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import type { Tensor } from "../src/backends/backend.js";
import { CudaBackend } from "../src/backends/cuda/cuda_backend.js";
import { makeEngineArgs } from "../src/config/engine_args.js";
import { countParameters } from "../src/config/parameter_count.js";
import { asRequestId, type RequestId } from "../src/core/ids.js";
import { bytesPerToken } from "../src/core/kv/kv_memory.js";
import { loadModel } from "../src/models/registry.js";
import { CudaGraphRunner } from "../src/worker/cuda_graph_runner.js";
import { type PreparedInputs, stageAttentionMetadata } from "../src/worker/input_batch.js";
import { createKVCacheSetup } from "../src/worker/kv_cache_registry.js";

const arg = (name: string, d: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : d;
};
const HBM_BPS = 4.3e12;
const BLOCK = 16;
const batches = arg("batches", "1,16,64").split(",").map(Number);
const contexts = arg("contexts", "1024,8192,32768").split(",").map(Number);
const maxCtx = Math.max(...contexts);
const memBudget = Number(arg("kv-gib", "72")) * 2 ** 30;
const paths = arg("paths", "new").split(",");
const withPrefill = !process.argv.includes("--no-prefill");

const backend = new CudaBackend({ workspaceBytes: 8 * 2 ** 30 });
const t0 = performance.now();
const { config, model } = loadModel({
  modelDir: arg("config", "configs/llama-3.1-8b"),
  backend,
  loadFormat: "dummy",
  seed: 0,
  maxModelLen: maxCtx + BLOCK,
});
const loadSeconds = (performance.now() - t0) / 1000;
console.log(`loaded ${config.architecture} (dummy) in ${loadSeconds.toFixed(1)} s`);
// The dense engine's KV set-up (as Worker.create builds it): floor(budget / block bytes) blocks.
const kv = createKVCacheSetup(backend, {
  model,
  args: makeEngineArgs({ device: "cuda", blockSize: BLOCK, maxModelLen: maxCtx + BLOCK }),
  kvCacheDtype: "bf16",
  deviceBudgetBytes: memBudget,
  maxModelLen: maxCtx + BLOCK,
});
const { kvCaches, attention, numGpuBlocks: numBlocks } = kv;
const kvPerTok = bytesPerToken(kv.groups);
const params = countParameters(config);
// Bytes a decode step must read: every weight once (the embedding table only for B rows, ignored).
const embedBytes = config.vocabSize * config.hiddenSize * 2;
const weightBytes = params * 2 - (config.tieWordEmbeddings ? 0 : embedBytes);
const defaultGemvMaxTokens = backend.denseGemvMaxTokens;
const probe = backend.upload(new Int32Array(1), [1], "i32");
const sync = () => backend.toHost(probe);

function decodeInputs(B: number, C: number): PreparedInputs {
  const nb = Math.ceil(C / BLOCK);
  const reqIds: RequestId[] = [];
  const blockTables = new Int32Array(B * nb);
  const slotMapping = new Int32Array(B);
  for (let r = 0; r < B; r++) {
    reqIds.push(asRequestId(`r${r}`));
    for (let j = 0; j < nb; j++) blockTables[r * nb + j] = r * nb + j;
    slotMapping[r] = (r * nb + Math.floor((C - 1) / BLOCK)) * BLOCK + ((C - 1) % BLOCK);
  }
  return {
    reqIds,
    inputIds: Int32Array.from({ length: B }, (_, i) => (i * 7919) % config.vocabSize),
    positions: new Int32Array(B).fill(C - 1),
    slotMapping,
    queryStartLoc: Int32Array.from({ length: B + 1 }, (_, i) => i),
    seqLens: new Int32Array(B).fill(C),
    blockTables,
    maxBlocksPerReq: nb,
    maxQueryLen: 1,
    maxSeqLen: C,
    logitsIndices: Int32Array.from({ length: B }, (_, i) => i),
    logitsReqIdx: Int32Array.from({ length: B }, (_, i) => i),
  };
}

interface DecodeRow {
  path: string;
  batch: number;
  context: number;
  stepMs: number | null;
  rooflineMs: number;
  pctRoofline: number | null;
  tokPerS: number | null;
}
const decodeRows: DecodeRow[] = [];
const defaultMinSplit = backend.addon.setDecodeMinSplitTokens(0);
const defaultLaunch = backend.addon.setKernelLaunchOptions(-1);
for (const path of paths) {
  const m = /^(new|old)(?::(\d+))?(?:@(\d+))?$/.exec(path);
  if (m === null) throw new Error(`--paths: "new" or "old" (optionally :N and @N), got ${path}`);
  const [, kind, split, launch] = m;
  backend.denseGemvMaxTokens = kind === "old" ? 0 : defaultGemvMaxTokens;
  backend.addon.setDecodeMinSplitTokens(split === undefined ? defaultMinSplit : Number(split));
  backend.addon.setKernelLaunchOptions(launch === undefined ? defaultLaunch : Number(launch));
  const runner = new CudaGraphRunner(
    backend,
    backend.graphs,
    model,
    kvCaches,
    () => attention,
    BLOCK,
    maxCtx + BLOCK,
    Math.max(...batches),
  );
  for (const C of contexts) for (const B of batches) decodeRows.push(decodeRow(runner, path, B, C));
  runner.dispose();
}
backend.denseGemvMaxTokens = defaultGemvMaxTokens;
backend.addon.setDecodeMinSplitTokens(defaultMinSplit);
backend.addon.setKernelLaunchOptions(defaultLaunch);

/** One grid point: mean step time of 20 graph replays after 3 warm-up steps. */
function decodeRow(runner: CudaGraphRunner, path: string, B: number, C: number): DecodeRow {
  const kvRead = B * C * kvPerTok;
  const rooflineMs = ((weightBytes + kvRead) / HBM_BPS) * 1e3;
  if (B * Math.ceil(C / BLOCK) > numBlocks) {
    return { path, batch: B, context: C, stepMs: null, rooflineMs, pctRoofline: null, tokPerS: null };
  }
  const inputs = decodeInputs(B, C);
  for (let i = 0; i < 3; i++) runner.run(inputs);
  sync();
  const N = 20;
  const t = performance.now();
  for (let i = 0; i < N; i++) runner.run(inputs);
  sync();
  const stepMs = (performance.now() - t) / N;
  return {
    path,
    batch: B,
    context: C,
    stepMs,
    rooflineMs,
    pctRoofline: (100 * rooflineMs) / stepMs,
    tokPerS: (B * 1000) / stepMs,
  };
}

// cuBLAS GEMM rate on the gate/up shape, through the backend's linear.
const M = 8192;
const K = config.hiddenSize;
const Nn = 2 * config.intermediateSize;
const gemmTflops = withPrefill ? measureGemmTflops() : 0;
function measureGemmTflops(): number {
  const w = backend.uploadWeight({ data: randomBf16(Nn * K), dtype: "bf16", shape: [Nn, K] });
  backend.resetWorkspace();
  const x = backend.stage(randomF32(M * K), [M, K], "bf16");
  backend.linear(x, w, null);
  sync();
  const G = 10;
  const tg = performance.now();
  for (let i = 0; i < G; i++) backend.linear(x, w, null);
  sync();
  backend.free(w);
  backend.resetWorkspace();
  return (2 * M * K * Nn * G) / ((performance.now() - tg) / 1e3) / 1e12;
}

// Prefill: one request, chunks of 8192 tokens.
const prefillRows: { tokens: number; seconds: number; tokPerS: number; tflops: number; pctGemm: number }[] =
  [];
for (const T of [8192, 32768].filter((t) => withPrefill && t <= maxCtx)) {
  const run = () => {
    const CH = 8192;
    const nb = Math.ceil(T / BLOCK);
    const table = Int32Array.from({ length: nb }, (_, i) => i);
    let logits: Tensor | null = null;
    for (let start = 0; start < T; start += CH) {
      const n = Math.min(CH, T - start);
      backend.resetWorkspace();
      const positions = Int32Array.from({ length: n }, (_, i) => start + i);
      const slots = Int32Array.from(positions, (p) => table[Math.floor(p / BLOCK)]! * BLOCK + (p % BLOCK));
      const meta = stageAttentionMetadata(backend, {
        queryStartLoc: Int32Array.from([0, n]),
        seqLens: Int32Array.from([start + n]),
        blockTables: table,
        maxBlocksPerReq: nb,
        slotMapping: slots,
        positions,
        maxQueryLen: n,
        maxSeqLen: start + n,
      });
      const ids = backend.stage(
        Int32Array.from(positions, (p) => (p * 31) % config.vocabSize),
        [n],
        "i32",
      );
      const last = start + n >= T ? backend.stage(Int32Array.from([n - 1]), [1], "i32") : null;
      logits = model.forward(ids, backend.stage(positions, [n], "i32"), { meta, attention, kvCaches }, last);
    }
    backend.toHost(logits!);
  };
  run(); // warm-up
  const t = performance.now();
  run();
  const seconds = (performance.now() - t) / 1e3;
  const L = config.numHiddenLayers;
  // Embedding lookups cost no FLOPs and lm_head runs for the last row only.
  const vh = config.vocabSize * config.hiddenSize;
  const linearFlops = 2 * (params - vh * (config.tieWordEmbeddings ? 1 : 2)) * T;
  const attnFlops = 2 * L * config.numAttentionHeads * config.headDim * T * T; // causal: 4·T²/2·H·D
  const tflops = (linearFlops + attnFlops) / seconds / 1e12;
  prefillRows.push({
    tokens: T,
    seconds,
    tokPerS: T / seconds,
    tflops,
    pctGemm: (100 * tflops) / gemmTflops,
  });
}

console.log(
  `\nweights ${(weightBytes / 1e9).toFixed(2)} GB read per step; KV ${kvPerTok} B/token; roofline at ${HBM_BPS / 1e12} TB/s`,
);
console.log(
  "\n| path | batch | context | step ms | roofline ms | % of roofline | tokens/s |\n|---|---|---|---|---|---|---|",
);
for (const r of decodeRows) {
  console.log(
    r.stepMs === null
      ? `| ${r.path} | ${r.batch} | ${r.context} | does not fit (${((r.batch * r.context * kvPerTok) / 2 ** 30).toFixed(0)} GiB of KV) | ${r.rooflineMs.toFixed(2)} | - | - |`
      : `| ${r.path} | ${r.batch} | ${r.context} | ${r.stepMs.toFixed(2)} | ${r.rooflineMs.toFixed(2)} | ${r.pctRoofline!.toFixed(1)}% | ${r.tokPerS!.toFixed(0)} |`,
  );
}
if (withPrefill) {
  console.log(`\ncuBLAS bf16 GEMM ${M}x${K}x${Nn} through linear(): ${gemmTflops.toFixed(0)} TFLOP/s`);
  console.log(
    "\n| prompt tokens | seconds | tokens/s | model TFLOP/s | % of GEMM rate |\n|---|---|---|---|---|",
  );
  for (const r of prefillRows) {
    console.log(
      `| ${r.tokens} | ${r.seconds.toFixed(3)} | ${r.tokPerS.toFixed(0)} | ${r.tflops.toFixed(0)} | ${r.pctGemm.toFixed(1)}% |`,
    );
  }
}
const json = arg("json", "");
if (json !== "")
  writeFileSync(
    json,
    JSON.stringify(
      { config: config.architecture, loadSeconds, decodeRows, gemmTflops, prefillRows },
      null,
      2,
    ),
  );
backend.dispose();

function randomF32(n: number): Float32Array {
  const a = new Float32Array(n);
  let s = 12345;
  for (let i = 0; i < n; i++) {
    s = (s * 1103515245 + 12345) >>> 0;
    a[i] = (s / 2 ** 32 - 0.5) * 0.1;
  }
  return a;
}
function randomBf16(n: number): Uint16Array {
  const f = new Uint32Array(randomF32(n).buffer);
  const out = new Uint16Array(n);
  for (let i = 0; i < n; i++) out[i] = f[i]! >>> 16; // truncate f32 to bf16
  return out;
}
