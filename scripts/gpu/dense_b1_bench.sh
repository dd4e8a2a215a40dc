#!/usr/bin/env bash
# Batch-1 / small-batch dense decode on the GPU machine (issue 20 item 1), about a minute:
#  1. native/tests/gemv_test (hsDenseGemv against a float64 reference, determinism, batch
#     invariance, the fused silu_and_mul = hsSiluAndMul bit for bit): built here by
#     `bash scripts/gpu/dense_b1_bench.sh --compile-only` (nvcc, no GPU needed) and carried, or
#     built there when absent;
#  2. bench/gemv_bench.js: weight-read GB/s of the skinny GEMM vs cuBLAS for the Llama-3.1-8B
#     linears at M = 1, 2, 4, 8, 16;
#  3. bench/cuda_bench.js at batch 1 x 1K / 8K / 32K and batch 64 x 1K / 8K (64 x 32K does not
#     fit), new path (linears of <= 8 rows through the skinny GEMM, fused silu_and_mul) and old
#     path (cuBLAS for every linear) in one process, with % of the HBM roofline; then the new path
#     with decode-attention splits of >= 128 and >= 64 tokens (new:128, new:64; default 256).
# Prepare here: npm run build && npm run build:native && bash scripts/gpu/dense_b1_bench.sh --compile-only
#   && bash ../shared/device/prepare.sh; carry .device dist build/Release build/gemv_test. Run there:
#   source .device/prelude.sh && bash scripts/gpu/dense_b1_bench.sh
# Success: "gemv_test: 29 passed, 0 failed", the GB/s table, the decode table with rows for
# both paths, and "RESULT: PASS" last. Logs and JSON go to $OUT (or /tmp/hisparse-dense-b1).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-dense-b1}"
mkdir -p "$out" build/gemv_test
bin=build/gemv_test/gemv_test
NVCC="${NVCC:-nvcc}"
command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
build() {
  timeout 240 "$NVCC" -std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a -o "$bin" \
    native/tests/gemv_test.cu native/kernels/gemv.cu native/kernels/activation.cu native/kernels/rope.cu
}
if [ "${1:-}" = "--compile-only" ]; then
  build && echo "built $bin"
  exit $?
fi
fails=0
[ -x "$bin" ] || build || { echo "RESULT: FAIL (build of gemv_test)"; exit 1; }
echo "== gemv_test"
timeout 60 "$bin" 2>&1 | tee "$out/gemv_test.log" | tail -4
grep -q "gemv_test: [0-9]* passed, 0 failed" "$out/gemv_test.log" || fails=$((fails + 1))
echo "== gemv_bench"
timeout 90 node dist/bench/gemv_bench.js --json "$out/gemv_bench.json" 2>&1 | tee "$out/gemv_bench.log" ||
  fails=$((fails + 1))
echo "== cuda_bench (decode, new and old path)"
timeout 180 node dist/bench/cuda_bench.js --config configs/llama-3.1-8b --batches 1,64 \
  --contexts 1024,8192,32768 --paths new,old,new:128,new:64 --no-prefill --json "$out/cuda_bench.json" 2>&1 |
  tee "$out/cuda_bench.log" || fails=$((fails + 1))
if [ "$fails" -eq 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($fails failing steps)"; fi
[ "$fails" -eq 0 ]
