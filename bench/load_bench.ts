/**
 * Model loading time to first use (issue 20 item 3, issue 14 item 4), GPU machine:
 *   node dist/bench/load_bench.js [--config configs/llama-3.1-8b] [--dir DIR] [--reuse]
 *       [--buffers 8] [--buffer-mib 32] [--threads 8] [--max-model-len N] [--json FILE]
 * Each timed load runs in a fresh process (this script with --phase), like a user's first
 * command: CUDA context, cuBLAS, weights, RoPE table, first forward (a 16-token prefill to logits).
 * (a) --phase dummy: --load-format dummy, every weight generated on the device.
 * (b) between the two, this process writes an HF-format checkpoint of the config to DIR (default
 *     $TMPDIR/hisparse-load-bench/<config>: shards of at most 5 GB, model.safetensors.index.json,
 *     config.json; bf16 tensors holding the dummy weights, generated on the device per HF tensor
 *     and read back) and reads every shard once, so it sits in the page cache (that single-thread
 *     read rate is reported too);
 * (c) --phase safetensors: loads that checkpoint (progress lines with GB/s), then, untimed, the
 *     dummy model in the same process, and checks sampled rows of every weight and the first
 *     logits against it: they must be the same bits.
 * Prints one table; writes JSON to --json FILE, else to $OUT/load_bench.json when $OUT is set.
 * --reuse keeps a checkpoint already in DIR written for the same config and seed.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { DensePagedAttention } from "../src/attention/backend.js";
import type { Tensor } from "../src/backends/backend.js";
import { offsetPtr } from "../src/backends/cuda/addon.js";
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
  const i = process.argv.lastIndexOf(`--${name}`); // the last one wins (scripts/gpu/load_bench.sh passes defaults first)
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
/** Elements compared at each end of a long row (compareRows). */
const COMPARE_SPAN = 65536;
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
    // Rows of stacked experts are whole [2I, H] matrices: compare their first and last 64 Ki elements.
    const spans =
      rowElems <= 2 * COMPARE_SPAN
        ? [[0, rowElems]]
        : [
            [0, COMPARE_SPAN],
            [rowElems - COMPARE_SPAN, COMPARE_SPAN],
          ];
    for (const r of new Set([
      0,
      n - 1,
      1 % n,
      Math.floor(n / 3),
      Math.floor(n / 2),
      Math.floor((2 * n) / 3),
    ])) {
      for (const [start, len] of spans) {
        const x = new Uint16Array(len!);
        const y = new Uint16Array(len!);
        a.backend.downloadBytes(x, offsetPtr(ta.ptr, (r * rowElems + start!) * 2));
        b.backend.downloadBytes(y, offsetPtr(tb.ptr, (r * rowElems + start!) * 2));
        for (let k = 0; k < len!; k++)
          if (x[k] !== y[k])
            throw new Error(`weight ${i} [${ta.shape}] row ${r} element ${start! + k} differs`);
      }
      rows++;
    }
  }
  return rows;
}

/** One timed load as the parent reports it (seconds; processS since the child process started). */
interface Row {
  name: string;
  backendS: number;
  weightsS: number;
  weightsGBps: number;
  firstForwardS: number;
  totalS: number;
  processS: number;
  weightBytes: number;
}

function rowOf(name: string, l: Load): Row {
  return {
    name,
    backendS: l.backendS,
    weightsS: l.weightsS,
    weightsGBps: l.weightBytes / GB / l.weightsS,
    firstForwardS: l.firstForwardS,
    totalS: l.backendS + l.weightsS + l.firstForwardS,
    processS: performance.now() / 1e3, // performance's time origin is the process start
    weightBytes: l.weightBytes,
  };
}

const RESULT = "RESULT ";
const phase = arg("phase", "");
if (phase === "dummy") {
  const l = timedLoad(configDir, "dummy");
  console.log(
    RESULT +
      JSON.stringify({ row: rowOf("dummy (generated on the device)", l), device: l.backend.deviceName }),
  );
  l.backend.dispose();
} else if (phase === "safetensors") {
  const l = timedLoad(dir, "safetensors");
  const row = rowOf("safetensors (page cache)", l);
  const dummy = timedLoad(configDir, "dummy");
  const rows = compareRows(dummy, l);
  let maxDiff = 0;
  for (let i = 0; i < dummy.logits.length; i++)
    maxDiff = Math.max(maxDiff, Math.abs(dummy.logits[i]! - l.logits[i]!));
  console.log(
    `checkpoint load == dummy load: ${rows} sampled rows identical; first logits max |diff| ${maxDiff}`,
  );
  console.log(RESULT + JSON.stringify({ row, sampledRowsIdentical: rows, firstLogitsMaxAbsDiff: maxDiff }));
  dummy.backend.dispose();
  l.backend.dispose();
} else {
  runAll();
}

/** Runs this script with --phase in a child process; echoes its output; returns its RESULT object. */
function child(p: string): Record<string, unknown> {
  const script = fileURLToPath(import.meta.url);
  const r = spawnSync(
    process.execPath,
    [...process.execArgv, script, ...process.argv.slice(2), "--phase", p],
    {
      stdio: ["ignore", "pipe", "inherit"],
      encoding: "utf8",
      maxBuffer: 64 * 2 ** 20,
    },
  );
  let result: Record<string, unknown> | null = null;
  for (const line of r.stdout.split("\n")) {
    if (line.startsWith(RESULT)) result = JSON.parse(line.slice(RESULT.length)) as Record<string, unknown>;
    else if (line !== "") console.log(`  ${line}`);
  }
  if (r.status !== 0 || result === null) throw new Error(`--phase ${p} failed (exit ${r.status})`);
  return result;
}

function runAll(): void {
  const tStart = performance.now();
  console.log(
    `config ${configDir}: ${config.architecture}, ${config.numHiddenLayers} layers, max model len ${maxModelLen}`,
  );
  const a = child("dummy");
  const dummyRow = a.row as Row;
  console.log(`dummy: first use ${dummyRow.processS.toFixed(2)} s after the process started`);

  const writer = new CudaBackend();
  const written = writeDummyCheckpoint({
    dir,
    configDir,
    config,
    seed: SEED,
    backend: writer,
    reuse: process.argv.includes("--reuse"),
  });
  writer.dispose();
  console.log(
    `checkpoint ${dir}: ${written.shards.length} shards, ${(written.totalBytes / GB).toFixed(2)} GB ${written.reused ? "(reused)" : `written in ${written.writeS.toFixed(1)} s`}`,
  );
  const warm = readCheckpointOnce(dir, written.shards);
  console.log(
    `page cache: read every shard once in ${warm.seconds.toFixed(2)} s (${warm.gbps.toFixed(2)} GB/s, one thread)`,
  );

  const b = child("safetensors");
  const ckptRow = b.row as Row;
  const results = [dummyRow, ckptRow];
  console.log(
    `\n${a.device as string}, ${(dummyRow.weightBytes / GB).toFixed(2)} GB of weights\n\n| load | backend s | weights s | weights GB/s | first forward s | in-process total s | since process start s |\n|---|---|---|---|---|---|---|`,
  );
  for (const r of results)
    console.log(
      `| ${r.name} | ${r.backendS.toFixed(2)} | ${r.weightsS.toFixed(2)} | ${r.weightsGBps.toFixed(1)} | ${r.firstForwardS.toFixed(2)} | ${r.totalS.toFixed(2)} | ${r.processS.toFixed(2)} |`,
    );
  const tRope = performance.now();
  buildCosSinCache(computeInvFreq(config.rope, config.headDim), maxModelLen);
  const ropeS = seconds(tRope);
  console.log(
    `\n(weights s includes building the RoPE table of ${maxModelLen} positions on the host: ${ropeS.toFixed(2)} s alone; streaming: ${weightStreaming.buffers} buffers of ${weightStreaming.bufferBytes / 2 ** 20} MiB, ${weightStreaming.threads} reader threads; bench ran ${seconds(tStart).toFixed(1)} s)`,
  );
  const json = {
    device: a.device,
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
    sampledRowsIdentical: b.sampledRowsIdentical,
    firstLogitsMaxAbsDiff: b.firstLogitsMaxAbsDiff,
  };
  const out = arg("json", process.env.OUT ? join(process.env.OUT, "load_bench.json") : "");
  if (out !== "") {
    if (process.env.OUT && !existsSync(process.env.OUT)) mkdirSync(process.env.OUT, { recursive: true });
    writeFileSync(out, `${JSON.stringify(json, null, 2)}\n`);
    console.log(`wrote ${out}`);
  }
}
