/**
 * Model loading time to first use (issue 20 item 3, issue 14 item 4), GPU machine:
 *   node dist/bench/load_bench.js [--config configs/llama-3.1-8b] [--dir DIR] [--reuse]
 *       [--buffers 8] [--buffer-mib 32] [--threads 8] [--max-model-len N] [--json FILE]
 * (a) dummy weights: CudaBackend creation, loadModel with --load-format dummy (every weight
 *     generated on the device), RoPE table, and the first forward (a 16-token prefill to logits).
 * (b) safetensors: writes an HF-format checkpoint of the config to DIR (default
 *     $TMPDIR/hisparse-load-bench: shards of at most 5 GB, model.safetensors.index.json,
 *     config.json; bf16 tensors holding the dummy weights, generated on the device per HF tensor
 *     and read back), reads every shard once so it sits in the page cache (and reports that
 *     single-thread read rate), then times the same steps loading from it on a new backend,
 *     shows the progress (bytes, GB/s), and checks sampled rows of every weight and the first
 *     logits against the dummy model's: they must be the same bits.
 * Prints one table; writes JSON to --json FILE, else to $OUT/load_bench.json when $OUT is set.
 * --reuse keeps a checkpoint already in DIR written for the same config and seed.
 */
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { DensePagedAttention } from "../src/attention/backend.js";
import type { Tensor } from "../src/backends/backend.js";
import { CudaBackend } from "../src/backends/cuda/cuda_backend.js";
import type { CudaTensor } from "../src/backends/cuda/tensor.js";
import { formatLoadProgress } from "../src/cli/progress.js";
import { loadModelConfig } from "../src/config/model_config.js";
import type { LlamaForCausalLM } from "../src/models/llama.js";
import { loadModel } from "../src/models/registry.js";
import { buildCosSinCache, computeInvFreq } from "../src/models/rope.js";
import { stageAttentionMetadata } from "../src/worker/input_batch.js";
import { readCheckpointOnce, writeDummyCheckpoint } from "./load_checkpoint.js";

const arg = (name: string, d: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : d;
};
const configDir = resolve(arg("config", "configs/llama-3.1-8b"));
const dir = resolve(arg("dir", join(tmpdir(), "hisparse-load-bench", basename(configDir))));
const SEED = 0;
const config = loadModelConfig(configDir);
const maxModelLen = Number(arg("max-model-len", String(config.maxPositionEmbeddings)));
const weightStreaming = {
  buffers: Number(arg("buffers", "8")),
  bufferBytes: Number(arg("buffer-mib", "32")) * 2 ** 20,
  threads: Number(arg("threads", "8")),
};
const GB = 1e9;
const BLOCK = 16;
const PROMPT = 16;
const seconds = (t0: number) => (performance.now() - t0) / 1e3;

/** Times of one load: backend, weights (+ RoPE table), first forward; the model and its weights in allocation order. */
interface Load {
  backend: CudaBackend;
  model: LlamaForCausalLM;
  weights: Tensor[];
  weightBytes: number;
  backendS: number;
  weightsS: number;
  firstForwardS: number;
  logits: Float32Array;
}

function timedLoad(modelDir: string, loadFormat: "dummy" | "safetensors"): Load {
  const t0 = performance.now();
  const backend = new CudaBackend({ weightStreaming });
  const backendS = seconds(t0);
  const weights: Tensor[] = [];
  const alloc = backend.allocateWeight.bind(backend);
  backend.allocateWeight = (shape) => {
    const t = alloc(shape);
    weights.push(t);
    return t;
  };
  let weightBytes = 0;
  let quarter = 1;
  const t1 = performance.now();
  const { model } = loadModel({
    modelDir,
    backend,
    loadFormat,
    seed: SEED,
    maxModelLen,
    onProgress: (done, total) => {
      weightBytes = total;
      if (loadFormat === "safetensors" && done >= (quarter * total) / 4) {
        console.log(`  progress ${formatLoadProgress(done, total, done, seconds(t1))}`);
        quarter++;
      }
    },
  });
  backend.synchronize();
  const weightsS = seconds(t1);
  backend.allocateWeight = alloc; // later allocations (the checkpoint writer's scratch) are not weights
  const t2 = performance.now();
  const logits = firstForward(backend, model);
  return { backend, model, weights, weightBytes, backendS, weightsS, firstForwardS: seconds(t2), logits };
}

/** A 16-token prefill of one request over a 1-block KV cache per layer; returns the last row's logits. */
function firstForward(backend: CudaBackend, model: LlamaForCausalLM): Float32Array {
  const kvCaches = backend.allocateKvCache({
    numLayers: config.numHiddenLayers,
    numBlocks: 1,
    blockSize: BLOCK,
    numKvHeads: config.numKeyValueHeads,
    headDim: config.headDim,
    dtype: "bf16",
  });
  const attention = new DensePagedAttention(backend, model.layout, BLOCK);
  const positions = Int32Array.from({ length: PROMPT }, (_, i) => i);
  const meta = stageAttentionMetadata(backend, {
    queryStartLoc: Int32Array.from([0, PROMPT]),
    seqLens: Int32Array.from([PROMPT]),
    blockTables: Int32Array.from([0]),
    maxBlocksPerReq: 1,
    slotMapping: positions,
    positions,
    maxQueryLen: PROMPT,
    maxSeqLen: PROMPT,
  });
  const ids = backend.stage(
    Int32Array.from(positions, (p) => (p * 7919 + 1) % config.vocabSize),
    [PROMPT],
    "i32",
  );
  const last = backend.stage(Int32Array.from([PROMPT - 1]), [1], "i32");
  const logits = model.forward(
    ids,
    backend.stage(positions, [PROMPT], "i32"),
    { meta, attention, kvCaches },
    last,
  );
  const out = backend.toHost(logits) as Float32Array;
  backend.resetWorkspace();
  for (const t of kvCaches) backend.free(t);
  return out;
}

/** Compares the first, last and 4 more rows of every weight of two loads; returns rows compared, or throws. */
function compareRows(a: Load, b: Load): number {
  if (a.weights.length !== b.weights.length)
    throw new Error(`${a.weights.length} vs ${b.weights.length} weights`);
  let rows = 0;
  for (let i = 0; i < a.weights.length; i++) {
    const ta = a.weights[i] as CudaTensor;
    const tb = b.weights[i] as CudaTensor;
    const rowElems = ta.shape.slice(1).reduce((x, y) => x * y, 1);
    const n = ta.shape[0]!;
    for (const r of new Set([
      0,
      n - 1,
      1 % n,
      Math.floor(n / 3),
      Math.floor(n / 2),
      Math.floor((2 * n) / 3),
    ])) {
      const x = new Uint16Array(rowElems);
      const y = new Uint16Array(rowElems);
      a.backend.downloadBytes(x, ta.ptr + r * rowElems * 2);
      b.backend.downloadBytes(y, tb.ptr + r * rowElems * 2);
      for (let k = 0; k < rowElems; k++)
        if (x[k] !== y[k]) throw new Error(`weight ${i} [${ta.shape}] row ${r} element ${k} differs`);
      rows++;
    }
  }
  return rows;
}

const tStart = performance.now();
console.log(
  `config ${configDir}: ${config.architecture}, ${config.numHiddenLayers} layers, max model len ${maxModelLen}`,
);
const dummy = timedLoad(configDir, "dummy");
const device = dummy.backend.deviceName;
console.log(`dummy: loaded in ${(dummy.backendS + dummy.weightsS + dummy.firstForwardS).toFixed(2)} s`);

const written = writeDummyCheckpoint({
  dir,
  configDir,
  config,
  seed: SEED,
  backend: dummy.backend,
  reuse: process.argv.includes("--reuse"),
});
console.log(
  `checkpoint ${dir}: ${written.shards.length} shards, ${(written.totalBytes / GB).toFixed(2)} GB ${written.reused ? "(reused)" : `written in ${written.writeS.toFixed(1)} s`}`,
);
const warm = readCheckpointOnce(dir, written.shards);
console.log(
  `page cache: read every shard once in ${warm.seconds.toFixed(2)} s (${warm.gbps.toFixed(2)} GB/s, one thread)`,
);

const ckpt = timedLoad(dir, "safetensors");
const rows = compareRows(dummy, ckpt);
let maxDiff = 0;
for (let i = 0; i < dummy.logits.length; i++)
  maxDiff = Math.max(maxDiff, Math.abs(dummy.logits[i]! - ckpt.logits[i]!));
console.log(
  `checkpoint load == dummy load: ${rows} sampled rows identical; first logits max |diff| ${maxDiff}`,
);

const row = (name: string, l: Load) => {
  const total = l.backendS + l.weightsS + l.firstForwardS;
  return {
    name,
    backendS: l.backendS,
    weightsS: l.weightsS,
    weightsGBps: l.weightBytes / GB / l.weightsS,
    firstForwardS: l.firstForwardS,
    totalS: total,
    weightBytes: l.weightBytes,
  };
};
const results = [row("dummy (generated on the device)", dummy), row("safetensors (page cache)", ckpt)];
console.log(
  `\n${device}, ${(dummy.weightBytes / GB).toFixed(2)} GB of weights\n\n| load | backend s | weights s | weights GB/s | first forward s | to first use s |\n|---|---|---|---|---|---|`,
);
for (const r of results)
  console.log(
    `| ${r.name} | ${r.backendS.toFixed(2)} | ${r.weightsS.toFixed(2)} | ${r.weightsGBps.toFixed(1)} | ${r.firstForwardS.toFixed(2)} | ${r.totalS.toFixed(2)} |`,
  );
const tRope = performance.now();
buildCosSinCache(computeInvFreq(config.rope, config.headDim), maxModelLen);
const ropeS = seconds(tRope);
console.log(
  `\n(weights s includes building the RoPE table of ${maxModelLen} positions on the host: ${ropeS.toFixed(2)} s alone; streaming: ${weightStreaming.buffers} buffers of ${weightStreaming.bufferBytes / 2 ** 20} MiB, ${weightStreaming.threads} reader threads; bench ran ${seconds(tStart).toFixed(1)} s)`,
);

const json = {
  device,
  config: configDir,
  maxModelLen,
  weightStreaming,
  results,
  ropeTableS: ropeS,
  checkpoint: {
    dir,
    shards: written.shards.length,
    bytes: written.totalBytes,
    writeS: written.writeS,
    reused: written.reused,
    warmReadS: warm.seconds,
    warmReadGBps: warm.gbps,
  },
  sampledRowsIdentical: rows,
  firstLogitsMaxAbsDiff: maxDiff,
};
const out = arg("json", process.env.OUT ? join(process.env.OUT, "load_bench.json") : "");
if (out !== "") {
  if (process.env.OUT && !existsSync(process.env.OUT)) mkdirSync(process.env.OUT, { recursive: true });
  writeFileSync(out, `${JSON.stringify(json, null, 2)}\n`);
  console.log(`wrote ${out}`);
}
dummy.backend.dispose();
ckpt.backend.dispose();
