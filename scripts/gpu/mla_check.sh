#!/usr/bin/env bash
# The MLA / DSA checks of the CUDA backend (issue 21), GPU machine, summary last; about 2 minutes.
#
# Prepare here (nvcc, no GPU):
#   npm run build && npm run build:native && bash scripts/device/pack.sh
# Run there, carrying .device, dist and build/Release (the vocabulary-pruned tiny checkpoints in
# test/fixtures/models travel with the tree; the full ../shared ones are checked too when carried
# in .device/models with `pack.sh --model tiny-glm5-dsa ...`):
#   source .device/prelude.sh && bash scripts/gpu/mla_check.sh
#
# Steps (each under `timeout`):
#  1. kernels: nvcc-build build/mla_check/mla_test (native/tests/mla_test.cu: every MLA kernel
#     against the C++ port of the CPU oracle, mla_ref.h: row writes, RoPE, LayerNorm, absorbed
#     attention vs the expanded float64 reference (dense, DSA, split-KV, GLM-5's 512 + 64 rows),
#     DSA over every position == dense, indexer logits, top-k identical with ties / NaN / -0), run
#     it in full, then compute-sanitizer memcheck and racecheck over --quick; likewise
#     build/mla_check/prefill/mla_prefill_test (native/tests/mla_prefill_test.cu: the expanded
#     prefill's gather and masked softmax kernels), memcheck over --quick;
#  2. dist/test/native/mla.test.js: Backend.mla through CudaBackend against the CPU backend op by
#     op (tiny and GLM-5 shapes), the DSA layer sequence replayed from a CUDA graph == eager, and
#     the tiny DeepSeek-V3 / V3.2 / GLM-5 checkpoints vs HF fp32 (test/fixtures/hf-tiny-*-pv.json):
#     logits within bf16 tolerance, the engine's 24 greedy tokens (CUDA graphs on, and eager)
#     equal HF's up to a near-tie;
#     dist/test/native/mla_prefill.test.js: the expanded-form prefill (cuBLAS GEMMs + the softmax
#     kernel) vs the CPU oracle, dense and DSA, two chunks around a decode, tight scratch bounds;
#  3. dist/test/native/hisparse_kernels.test.js: the Quest selection, whose radix select moved to
#     native/kernels/radix_select.cuh (shared with the DSA top-k), unchanged.
# Options: --compile-only (build mla_test and stop; works without a GPU); --no-sanitize.
# Logs go to $OUT (when set) or /tmp/hisparse-mla-check. Exit 0 iff every step passed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
compile_only=0; sanitize=1
for a in "$@"; do
  case "$a" in
    --compile-only) compile_only=1 ;;
    --no-sanitize) sanitize=0 ;;
    *) echo "mla_check.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
out="${OUT:-/tmp/hisparse-mla-check}"
mkdir -p "$out" build/mla_check
bin=build/mla_check/mla_test
K=native/kernels
if [ ! -x "$bin" ] || [ "${MLA_REBUILD:-0}" = 1 ] || [ "$compile_only" = 1 ]; then
  NVCC="${NVCC:-nvcc}"
  command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
  echo "== compiling $bin"
  flags=(-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xcompiler -pthread)
  pids=()
  for src in native/tests/mla_test.cu $K/mla_rows.cu $K/mla_attention.cu $K/mla_attention_tc.cu $K/mla_project.cu \
    $K/mla_indexer.cu $K/mla_topk.cu; do
    "$NVCC" "${flags[@]}" -c "$src" -o "build/mla_check/$(basename "$src" .cu).o" & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "mla_check.sh: compiling mla_test failed" >&2; exit 1; }; done
  "$NVCC" "${flags[@]}" build/mla_check/*.o -o "$bin" || { echo "mla_check.sh: linking mla_test failed" >&2; exit 1; }
fi
pbin=build/mla_check/prefill/mla_prefill_test
if [ ! -x "$pbin" ] || [ "${MLA_REBUILD:-0}" = 1 ] || [ "$compile_only" = 1 ]; then
  mkdir -p build/mla_check/prefill
  NVCC="${NVCC:-nvcc}"
  command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
  echo "== compiling $pbin"
  "$NVCC" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xcompiler -pthread \
    native/tests/mla_prefill_test.cu $K/mla_prefill.cu -o "$pbin" || { echo "mla_check.sh: building mla_prefill_test failed" >&2; exit 1; }
fi
[ "$compile_only" = 1 ] && { echo "built $bin"; exit 0; }
[ -f scripts/device/unpack.sh ] && [ -f .device/node_modules.tar.xz ] && bash scripts/device/unpack.sh
command -v node >/dev/null || { echo "mla_check.sh: node is not on PATH (source .device/prelude.sh first)" >&2; exit 2; }
[ -z "${HISPARSE_MODELS:-}" ] && [ -d .device/models ] && export HISPARSE_MODELS=$PWD/.device/models
rows=()
fails=0
step() {  # name timeout_s command...
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s)
  echo "== $name: $*"
  timeout "$limit" "$@" > >(tee "$out/$name.log") 2>&1
  local rc=$?
  rows+=("$(printf '%-18s %-8s %4ss' "$name" "$([ $rc = 0 ] && echo ok || echo FAIL:$rc)" $(( $(date +%s) - t0 )))")
  [ $rc = 0 ] || fails=$((fails + 1))
}
step mla_test 90 "$bin"
step mla_prefill_test 60 "$pbin"
if [ "$sanitize" = 1 ]; then
  san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  step mla_memcheck 120 "$san" --tool memcheck --error-exitcode 1 --print-limit 20 "$bin" --quick
  step mla_prefill_memcheck 120 "$san" --tool memcheck --error-exitcode 1 --print-limit 20 "$pbin" --quick
  step mla_racecheck 120 "$san" --tool racecheck --error-exitcode 1 --print-limit 20 "$bin" --quick --only attention
fi
step native_mla 240 node --test --test-reporter=spec dist/test/native/mla.test.js
step native_mla_prefill 120 node --test --test-reporter=spec dist/test/native/mla_prefill.test.js
step native_quest 120 node --test --test-reporter=spec dist/test/native/hisparse_kernels.test.js
echo "== summary"
grep -h "mla_test:\|mla_prefill_test:\|ERROR SUMMARY\|^# pass\|^# fail\|^# .*rel err\|first divergence" "$out"/*.log
printf '%s\n' "${rows[@]}"
exit $(( fails > 0 ))
