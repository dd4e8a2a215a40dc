/**
 * Skinny-GEMM benchmark (issue 20 item 1), GPU machine:
 *   node dist/bench/gemv_bench.js [--config configs/llama-3.1-8b] [--tokens 1,2,4,8,16] [--json FILE]
 * For each linear of one decoder layer of the config (fused qkv, o, gate_up, down; and lm_head)
 * and each row count M, the time of `CudaBackend.linear` through the skinny GEMM
 * (native/kernels/gemv.h; denseGemvMaxTokens = 16) and through cuBLAS(Lt) (denseGemvMaxTokens =
 * 0), bf16 in and out (lm_head: f32 out as the model runs it), and the weight-read bandwidth
 * (weight bytes / time, GB/s; x and y are a few KB). The gate_up row also times the fused
 * silu_and_mul epilogue (linearSiluAndMul) against cuBLAS + the siluAndMul kernel.
 * Each figure: one CUDA graph of REPS launches, replayed after a warm-up, over enough copies of
 * the weight (>= 256 MB in all) that no launch finds its weight in the 50 MB L2.
 */
import { writeFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import type { Tensor } from "../src/backends/backend.js";
import { CudaBackend } from "../src/backends/cuda/cuda_backend.js";
import { loadModelConfig } from "../src/config/model_config.js";

const arg = (name: string, d: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : d;
};
const config = loadModelConfig(arg("config", "configs/llama-3.1-8b"));
const tokens = arg("tokens", "1,2,4,8,16").split(",").map(Number);
const REPS = 40;
const ROTATE_BYTES = 256e6;
const { hiddenSize: H, intermediateSize: I, headDim: D } = config;
const shapes: { name: string; n: number; k: number; f32?: boolean; silu?: boolean }[] = [
  { name: "qkv", n: (config.numAttentionHeads + 2 * config.numKeyValueHeads) * D, k: H },
  { name: "o", n: H, k: config.numAttentionHeads * D },
  { name: "gate_up", n: 2 * I, k: H },
  { name: "gate_up+silu", n: 2 * I, k: H, silu: true },
  { name: "down", n: H, k: I },
  { name: "lm_head", n: config.vocabSize, k: H, f32: true },
];

const backend = new CudaBackend({ workspaceBytes: 1 << 30 });
const probe = backend.upload(new Int32Array(1), [1], "i32");
const sync = () => backend.toHost(probe);

/** Mean µs per launch of `op` over REPS launches in one graph, cycling through the weight copies. */
function timeOp(op: (w: Tensor) => void, copies: readonly Tensor[]): number {
  backend.resetWorkspace();
  const g = backend.graphs.capture(() => {
    for (let r = 0; r < REPS; r++) op(copies[r % copies.length]!);
  });
  backend.graphs.replay(g);
  sync();
  const t = performance.now();
  const N = 5;
  for (let i = 0; i < N; i++) backend.graphs.replay(g);
  sync();
  const us = ((performance.now() - t) * 1e3) / (N * REPS);
  backend.graphs.dispose(g);
  return us;
}

interface Row {
  shape: string;
  m: number;
  gemvUs: number;
  cublasUs: number;
  gemvGBs: number;
  cublasGBs: number;
}
const rows: Row[] = [];
for (const s of shapes) {
  const bytes = s.n * s.k * 2;
  const nCopies = Math.max(2, Math.ceil(ROTATE_BYTES / bytes));
  const copies = Array.from({ length: nCopies }, () => backend.allocateWeight([s.n, s.k]));
  for (const c of copies) backend.fillRange(c, 0, s.n * s.k, 0x3c); // bf16 0x3c3c ≈ 0.0115
  for (const m of tokens) {
    backend.resetWorkspace();
    const x = backend.upload(new Float32Array(m * s.k).fill(0.01), [m, s.k], "bf16");
    const op = (w: Tensor) => {
      if (s.silu) backend.linearSiluAndMul(x, w, null);
      else backend.linear(x, w, null, s.f32 ? "f32" : "bf16");
    };
    backend.denseGemvMaxTokens = 16;
    const gemvUs = timeOp(op, copies);
    backend.denseGemvMaxTokens = 0;
    const cublasUs = timeOp(op, copies);
    backend.free(x);
    rows.push({
      shape: `${s.name} ${s.n}x${s.k}`,
      m,
      gemvUs,
      cublasUs,
      gemvGBs: bytes / gemvUs / 1e3,
      cublasGBs: bytes / cublasUs / 1e3,
    });
  }
  for (const c of copies) backend.free(c);
}

console.log(
  `\n${config.architecture}: weight-read GB/s of the skinny GEMM vs cuBLAS (bf16; ${REPS} launches per graph)`,
);
console.log(
  "\n| linear | M | gemv µs | cuBLAS µs | gemv GB/s | cuBLAS GB/s | speed-up |\n|---|---|---|---|---|---|---|",
);
for (const r of rows) {
  console.log(
    `| ${r.shape} | ${r.m} | ${r.gemvUs.toFixed(1)} | ${r.cublasUs.toFixed(1)} | ${r.gemvGBs.toFixed(0)} | ${r.cublasGBs.toFixed(0)} | ${(r.cublasUs / r.gemvUs).toFixed(2)}x |`,
  );
}
const json = arg("json", "");
if (json !== "") writeFileSync(json, JSON.stringify({ config: config.architecture, rows }, null, 2));
backend.dispose();
