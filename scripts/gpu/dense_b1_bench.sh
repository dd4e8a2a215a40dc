#!/usr/bin/env bash
# Batch-1 / small-batch dense decode on the GPU machine (issue 20 item 1): checks, then the
# decode table, in one device call of about 3 minutes:
#  1. native/tests/gemv_test (hsDenseGemv against a float64 reference, determinism, batch
#     invariance, the fused epilogues bit for bit, and a chain of 32 dependent launches equal bit
#     for bit with and without programmatic dependent launch, eager and in a CUDA graph) and
#     native/tests/attention_test --quick (decode + prefill attention against the CPU oracle; the small-
#     batch head-dim-128 decode cases with the default launch options and with none): both built
#     here by `bash scripts/gpu/dense_b1_bench.sh --compile-only` (nvcc, no GPU needed) and
#     carried, or built there when absent;
#  2. test/native suites through the engine's default launch options (PDL + deep decode
#     pipeline): linear, attention, graphs, model (ref-small vs HF, greedy graph decode == eager;
#     needs .device/fixtures/hf-ref-small.json);
#  3. bench/cuda_bench.js at batch 1 x 1K / 8K / 32K and batch 64 x 1K / 8K (64 x 32K does not
#     fit), in one process, one row per path:
#       new     the default: skinny GEMM for <= 8 rows + launch options 3 (PDL + deep decode)
#       new@1   PDL only;  new@2  deep decode attention only
#       new@0   main before this branch: skinny GEMM, serialized launches, 2-stage decode
#       old@0   cuBLAS for every linear, serialized launches
#     with % of the HBM roofline ((weights + KV read) / 4.3 TB/s).
# Prepare here: npm run build && npm run build:native && bash scripts/gpu/dense_b1_bench.sh --compile-only
#   && bash /work/shared/device/prepare.sh && mkdir -p .device/fixtures
#   && cp /work/shared/fixtures/hf-ref-small.json .device/fixtures/;
#   carry .device dist build/Release build/gemv_test. Run there:
#   source .device/prelude.sh && bash scripts/gpu/dense_b1_bench.sh
# Success: "gemv_test: N passed, 0 failed", "attention_test: N passed, 0 failed", "# fail 0" for
# each test/native suite, the decode table with a row per path, and "RESULT: PASS" last.
# Logs and JSON go to $OUT (or /tmp/hisparse-dense-b1).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-dense-b1}"
mkdir -p "$out" build/gemv_test
gemv=build/gemv_test/gemv_test
attn=build/gemv_test/attention_test
NVCC="${NVCC:-nvcc}"
command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
K=native/kernels
nvflags=(-std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a)
build_gemv() {
  timeout 300 "$NVCC" "${nvflags[@]}" -o "$gemv" native/tests/gemv_test.cu $K/gemv.cu $K/activation.cu $K/rope.cu \
    $K/norm.cu $K/launch_options.cu
}
build_attn() {
  timeout 400 "$NVCC" "${nvflags[@]}" -o "$attn" native/tests/attention_test.cu $K/attention_decode.cu \
    $K/attention_prefill.cu $K/copy.cu $K/launch_options.cu
}
if [ "${1:-}" = "--compile-only" ]; then
  build_gemv && echo "built $gemv" && build_attn && echo "built $attn"
  exit $?
fi
fails=0
[ -x "$gemv" ] || build_gemv || { echo "RESULT: FAIL (build of gemv_test)"; exit 1; }
[ -x "$attn" ] || build_attn || { echo "RESULT: FAIL (build of attention_test)"; exit 1; }
echo "== gemv_test"
timeout 60 "$gemv" 2>&1 | tee "$out/gemv_test.log" | tail -3
grep -q "gemv_test: [0-9]* passed, 0 failed" "$out/gemv_test.log" || fails=$((fails + 1))
echo "== attention_test"
timeout 90 "$attn" --quick 2>&1 | tee "$out/attention_test.log" | grep -E "FAIL|launch options|attention_test:"
grep -q "attention_test: [0-9]* passed, 0 failed" "$out/attention_test.log" || fails=$((fails + 1))
for t in linear attention graphs model; do
  echo "== test/native/$t"
  timeout 120 node --test "dist/test/native/$t.test.js" >"$out/native_$t.log" 2>&1
  rc=$?
  grep -E "^# (pass|fail|skipped)" "$out/native_$t.log" | tr '\n' ' '
  echo
  [ "$rc" -eq 0 ] || { fails=$((fails + 1)); grep -E "not ok|Error" "$out/native_$t.log" | head -5; }
done
echo "== cuda_bench (decode; paths side by side)"
timeout 200 node dist/bench/cuda_bench.js --config configs/llama-3.1-8b --batches 1,64 \
  --contexts 1024,8192,32768 --paths new,new@1,new@2,new@0,old@0 --no-prefill --json "$out/cuda_bench.json" 2>&1 |
  tee "$out/cuda_bench.log" || fails=$((fails + 1))
if [ "$fails" -eq 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($fails failing steps)"; fi
[ "$fails" -eq 0 ]
