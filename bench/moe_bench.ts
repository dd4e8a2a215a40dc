/**
 * Mixture-of-experts speed of the CUDA backend (issue 14), GPU machine:
 *   node dist/bench/moe_bench.js [--config configs/qwen3-30b-a3b] [--num-layers N]
 *     [--batches 1,32,128] [--context 8192] [--prefill 8192,32768] [--unfused]
 *     [--moe-small-batch N] [--json FILE]
 * Dummy weights of the config (bench/moe_bench_setup.ts FastDummyWeights: random embedding,
 * attention and routers, constant experts and lm_head, so the load takes seconds).
 * 1. decode: one step at batch B over a context of C tokens per request, replayed from its CUDA
 *    graph (mean of 20 replays after warm-up), against the HBM roofline at 4.3 TB/s of the bytes
 *    the step must read: every non-expert weight, the routed experts the step activates (counted
 *    per layer from the permutation's expert offsets during the eager warm-up), lm_head and the
 *    KV cache (B * C tokens per layer; it holds zeros, the attention kernels read every byte).
 * 2. prefill: one prompt of T tokens in chunks of 8192 (as --max-num-batched-tokens 8192).
 * --num-layers N keeps the first N layers (until GPU-side dummy weights land, a 48-layer load
 * takes minutes). Every figure is then also given per layer, and SCALED to the full depth as
 * L * per-layer time + lm_head time (per layer = (step - lm_head) / N; lm_head timed alone).
 * --unfused runs gate_up and silu_and_mul as two launches (CudaBackendOptions.moeFusedActivation).
 * --moe-small-batch N: MoE layers of up to N tokens take the small-batch path (default: the
 * backend's, 8; 0: always the grouped path, for the comparison; CudaBackendOptions.moeSmallBatchMaxTokens).
 * Prints markdown tables; --json writes the figures.
 */
import { writeFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { DensePagedAttention } from "../src/attention/backend.js";
import type { Tensor } from "../src/backends/backend.js";
import { CudaBackend } from "../src/backends/cuda/cuda_backend.js";
import { loadModelConfig } from "../src/config/model_config.js";
import { asRequestId, type RequestId } from "../src/core/ids.js";
import { modelKVCacheGroups } from "../src/core/kv/kv_cache_interface.js";
import { bytesPerToken } from "../src/core/kv/kv_memory.js";
import { LlamaForCausalLM } from "../src/models/llama.js";
import { CudaGraphRunner } from "../src/worker/cuda_graph_runner.js";
import { type PreparedInputs, stageAttentionMetadata } from "../src/worker/input_batch.js";
import {
  cutLayers,
  ExpertCounter,
  expertBytes,
  FastDummyWeights,
  layerBytesWithoutExperts,
  lmHeadMs,
} from "./moe_bench_setup.js";

const arg = (name: string, d: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : d;
};
const HBM_BPS = 4.3e12;
const BLOCK = 16;
const CHUNK = 8192;
const batches = arg("batches", "1,32,128").split(",").map(Number);
const C = Number(arg("context", "8192"));
const prefills = arg("prefill", "8192,32768").split(",").filter(Boolean).map(Number);
const unfused = process.argv.includes("--unfused");
const smallArg = arg("moe-small-batch", "");
const smallBatch = smallArg === "" ? undefined : Number(smallArg);

const full = loadModelConfig(arg("config", "configs/qwen3-30b-a3b"));
const nArg = arg("num-layers", "");
const config = cutLayers(full, nArg === "" ? undefined : Number(nArg));
const N = config.numHiddenLayers;
const L = full.numHiddenLayers;
const maxLen = Math.max(C, ...prefills) + BLOCK;

const backend = new CudaBackend({
  workspaceBytes: 8 * 2 ** 30,
  moeFusedActivation: !unfused,
  ...(smallBatch === undefined ? {} : { moeSmallBatchMaxTokens: smallBatch }),
});
const smallMax = backend.moe.smallBatch?.maxTokens ?? 0;
const counter = new ExpertCounter(backend, () => backend.graphs.isCapturing);
const t0 = performance.now();
const model = LlamaForCausalLM.load(config, new FastDummyWeights(config, 0), backend, maxLen);
const loadS = (performance.now() - t0) / 1e3;
console.log(`loaded ${config.architecture}, ${N} of ${L} layers (dummy) in ${loadS.toFixed(1)} s`);
const kvPerTokLayer = bytesPerToken(modelKVCacheGroups(config, { elementBytes: 2 })) / N;
const needBlocks = Math.max(
  Math.max(...batches) * Math.ceil(C / BLOCK),
  Math.ceil(Math.max(...prefills) / BLOCK),
);
const kvCaches = backend.allocateKvCache({
  numLayers: N,
  numBlocks: needBlocks,
  blockSize: BLOCK,
  numKvHeads: config.numKeyValueHeads,
  headDim: config.headDim,
  dtype: "bf16",
});
const attention = new DensePagedAttention(backend, model.layout, BLOCK);
const runner = new CudaGraphRunner(
  backend,
  backend.graphs,
  model,
  kvCaches,
  () => attention,
  BLOCK,
  maxLen,
  Math.max(...batches),
);
const probe = backend.upload(new Int32Array(1), [1], "i32");
const sync = () => backend.toHost(probe);
const layerBytes = (l: number) => layerBytesWithoutExperts(config, l);
const headBytes = config.vocabSize * config.hiddenSize * 2;

function decodeInputs(B: number): PreparedInputs {
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
    inputIds: Int32Array.from({ length: B }, (_, i) => (i * 7919 + 13) % config.vocabSize),
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
  batch: number;
  experts: number; // distinct routed experts per MoE layer (mean)
  stepMs: number; // measured, N layers
  headMs: number;
  layerMs: number;
  layerRooflineMs: number;
  pctRoofline: number; // per layer
  scaledStepMs: number; // L layers
  scaledRooflineMs: number;
  scaledTokPerS: number;
}
const decodeRows: DecodeRow[] = [];
for (const B of batches) {
  const inputs = decodeInputs(B);
  const counts = counter.count(() => runner.run(inputs)); // eager warm-up (counted), then capture
  for (let i = 0; i < 3; i++) runner.run(inputs);
  sync();
  const R = 20;
  const t = performance.now();
  for (let i = 0; i < R; i++) runner.run(inputs);
  sync();
  const stepMs = (performance.now() - t) / R;
  const experts = counts.length > 0 ? counts.reduce((a, b) => a + b, 0) / counts.length : 0;
  let bytesN = 0;
  for (let l = 0; l < N; l++) bytesN += layerBytes(l) + B * C * kvPerTokLayer;
  bytesN += experts * counts.length * expertBytes(config);
  const hMs = lmHeadMs(backend, config, B, sync);
  const layerMs = (stepMs - hMs) / N;
  const layerRooflineMs = (bytesN / N / HBM_BPS) * 1e3;
  const scaledStepMs = L * layerMs + hMs;
  const scaledRooflineMs = (((bytesN / N) * L + headBytes) / HBM_BPS) * 1e3;
  decodeRows.push({
    batch: B,
    experts,
    stepMs,
    headMs: hMs,
    layerMs,
    layerRooflineMs,
    pctRoofline: (100 * layerRooflineMs) / layerMs,
    scaledStepMs,
    scaledRooflineMs,
    scaledTokPerS: (B * 1000) / scaledStepMs,
  });
}
runner.dispose();

/** FLOPs of one token's linear layers in layer l (routed experts: topK of them). */
function layerLinearFlops(l: number): number {
  const moe = config.moe;
  const k = moe?.routing.topK ?? 0;
  const routed = moe?.moeLayers.includes(l) ? k * expertBytes(config) : 0;
  return layerBytes(l) + routed; // 2 FLOPs per bf16 weight element = 1 FLOP per byte
}

const prefillRows: {
  tokens: number;
  seconds: number;
  layerMs: number;
  tflops: number;
  scaledTokPerS: number;
}[] = [];
for (const T of prefills) {
  const run = () => {
    const nb = Math.ceil(T / BLOCK);
    const table = Int32Array.from({ length: nb }, (_, i) => i);
    let logits: Tensor | null = null;
    for (let start = 0; start < T; start += CHUNK) {
      const n = Math.min(CHUNK, T - start);
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
  let flops = 0;
  for (let l = 0; l < N; l++) flops += T * layerLinearFlops(l);
  flops += 2 * N * config.numAttentionHeads * config.headDim * T * T; // causal: 4 * T^2 / 2 * Hq * D
  const layerMs = (seconds * 1e3) / N;
  prefillRows.push({
    tokens: T,
    seconds,
    layerMs,
    tflops: flops / seconds / 1e12,
    scaledTokPerS: T / ((layerMs * L) / 1e3),
  });
}

const cut = N < L ? ` (CUT to ${N} of ${L} layers: "scaled" = ${L} x per-layer + lm_head)` : "";
console.log(
  `\n${config.architecture} decode, context ${C}, ${unfused ? "unfused" : "fused"} gate_up+silu, MoE small-batch path for T <= ${smallMax}${cut}`,
);
console.log(
  `expert ${(expertBytes(config) / 1e6).toFixed(2)} MB; non-expert weights ${(layerBytes(0) / 1e6).toFixed(1)} MB/layer; lm_head ${(headBytes / 1e6).toFixed(0)} MB; KV ${kvPerTokLayer} B/token/layer; ${HBM_BPS / 1e12} TB/s`,
);
console.log(
  "\n| batch | experts/layer | step ms (N layers) | lm_head ms | per-layer ms | per-layer roofline ms | % of roofline | scaled step ms | scaled roofline ms | scaled tok/s |\n|---|---|---|---|---|---|---|---|---|---|",
);
for (const r of decodeRows)
  console.log(
    `| ${r.batch} | ${r.experts.toFixed(1)} | ${r.stepMs.toFixed(3)} | ${r.headMs.toFixed(3)} | ${r.layerMs.toFixed(4)} | ${r.layerRooflineMs.toFixed(4)} | ${r.pctRoofline.toFixed(1)}% | ${r.scaledStepMs.toFixed(2)} | ${r.scaledRooflineMs.toFixed(2)} | ${r.scaledTokPerS.toFixed(0)} |`,
  );
console.log(
  "\n| prompt tokens | seconds (N layers) | per-layer ms | TFLOP/s | scaled tok/s |\n|---|---|---|---|---|",
);
for (const r of prefillRows)
  console.log(
    `| ${r.tokens} | ${r.seconds.toFixed(3)} | ${r.layerMs.toFixed(2)} | ${r.tflops.toFixed(0)} | ${r.scaledTokPerS.toFixed(0)} |`,
  );
const json = arg("json", "");
if (json !== "")
  writeFileSync(
    json,
    JSON.stringify(
      {
        config: config.architecture,
        layers: N,
        fullLayers: L,
        unfused,
        smallBatchMaxTokens: smallMax,
        loadS,
        decodeRows,
        prefillRows,
      },
      null,
      2,
    ),
  );
backend.dispose();
