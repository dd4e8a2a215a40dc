#!/usr/bin/env bash
# The mixture-of-experts checks of the CUDA backend (issue 14), GPU machine, summary last.
#
# Prepare here (nvcc, no GPU):
#   npm run build && npm run build:native && bash scripts/device/pack.sh
# Run there, carrying .device, dist and build/Release (moe_test is built there, step 1: its 2.7 MB
# would not fit the 64 MiB next to node and the tracked files):
#   bash scripts/device/unpack.sh && source .device/prelude.sh && bash scripts/gpu/moe_check.sh
# The tiny checkpoints need not travel (22 MB of the 64 MiB): without them in .device/models,
# step 0 makes checkpoints of the same configs there (scripts/gpu/make_tiny_fixture.py: seeded
# random weights, ref-small's tokenizer), plus tiny-glm4-moe-grouped (16 experts in 4 groups, a
# nonzero correction bias, scaling 2.5: the group-limited noaux_tc rule).
#
# Steps (each under `timeout`; an estimated 4-5 minutes in all, under 2 without sanitizers and step 4):
#  0. the tiny checkpoints (above);
#  1. kernels: nvcc-build build/moe_check/moe_test (native/tests/moe_test.cu: every MoE kernel against the C++
#     port of the CPU oracle; route/permute/unpermute exact, grouped GEMM configs within bf16
#     tolerance and bitwise equal to each other, fused silu_and_mul bitwise the unfused pair, a
#     layer's graph replay == eager); compute-sanitizer memcheck over --quick and racecheck over
#     the GEMM cases; then its --bench (Qwen3-30B-A3B layer shapes, per kernel);
#     build/moe_check/moe_decode_test (native/tests/moe_decode_test.cu: the small-batch path of
#     moe_decode.h against the oracle's routing, a float64 reference and the grouped path, batch
#     invariance, graph replay, the sync buffer left zero), and memcheck over its --quick;
#  2. dist/test/native/{moe,moe_decode,ops,attention,hisparse_moe}.test.js: Backend.moe through CudaBackend
#     against the CPU backend on identical inputs (whole layer, graph replays), partial rotary,
#     attention with head_dim 32 (the tiny MoE checkpoints), HiSparse `on` == `off` on
#     tiny-qwen3-moe;
#  3. HF parity: scripts/gpu/hf_reference.py on the three checkpoints (bf16 and fp32 logits, greedy
#     runs with top-2 gaps), then compare_hf.js: logits within bf16 tolerance of HF fp32 and of
#     our CPU backend, greedy tokens equal HF fp32's except at near-ties (gap < 0.1);
#  4. engine_checks.js on tiny-qwen3-moe and tiny-glm4-moe: batch invariance with chunked prefill
#     and preemption (tie-aware), CUDA graphs == --enforce-eager, seeded sampling reproducible.
# Options: --compile-only (build moe_test and stop; works without a GPU); --no-sanitize, --skip-hf, --skip-engine
# leave out the sanitizer runs, step 3, step 4.
# Logs go to $OUT (when set) or /tmp/hisparse-moe-check. Exit 0 iff every step passed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
compile_only=0; skip_hf=0; skip_engine=0; sanitize=1
for a in "$@"; do
  case "$a" in
    --compile-only) compile_only=1 ;;
    --skip-hf) skip_hf=1 ;;
    --skip-engine) skip_engine=1 ;;
    --no-sanitize) sanitize=0 ;;
    *) echo "moe_check.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
out="${OUT:-/tmp/hisparse-moe-check}"
mkdir -p "$out" build/moe_check
bin=build/moe_check/moe_test
K=native/kernels

dbin=build/moe_check/moe_decode_test

# nvcc build of moe_test and moe_decode_test, the eight translation units in parallel (~30 s on the GPU machine).
if [ ! -x "$bin" ] || [ ! -x "$dbin" ] || [ "${MOE_REBUILD:-0}" = 1 ] || [ "$compile_only" = 1 ]; then
  NVCC="${NVCC:-nvcc}"
  command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
  echo "== compiling $bin $dbin"
  flags=(-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xcompiler -pthread)
  pids=()
  for src in native/tests/moe_test.cu native/tests/moe_decode_test.cu $K/moe_route.cu $K/moe_permute.cu \
    $K/moe_gemm.cu $K/activation.cu $K/moe_decode.cu $K/moe_decode_route.cu; do
    "$NVCC" "${flags[@]}" -c "$src" -o "build/moe_check/$(basename "$src" .cu).o" & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "moe_check.sh: compiling moe_test failed" >&2; exit 1; }; done
  o=build/moe_check
  "$NVCC" "${flags[@]}" $o/moe_test.o $o/moe_route.o $o/moe_permute.o $o/moe_gemm.o $o/activation.o -o "$bin" ||
    { echo "moe_check.sh: linking moe_test failed" >&2; exit 1; }
  "$NVCC" "${flags[@]}" $o/moe_decode_test.o $o/moe_decode.o $o/moe_decode_route.o $o/moe_route.o $o/moe_permute.o \
    $o/moe_gemm.o -o "$dbin" || { echo "moe_check.sh: linking moe_decode_test failed" >&2; exit 1; }
fi
[ "$compile_only" = 1 ] && { echo "built $bin $dbin"; exit 0; }
command -v node >/dev/null || { echo "moe_check.sh: node is not on PATH (source .device/prelude.sh first)" >&2; exit 2; }
carried="${HISPARSE_MODELS:-$PWD/.device/models}"
gen=/tmp/moe-models
export PYTHONUNBUFFERED=1
rows=()
fails=0
step() {  # name timeout_s command...
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s)
  echo "== $name: $*"
  timeout "$limit" "$@" > >(tee "$out/$name.log") 2>&1
  local rc=$?
  rows+=("$(printf '%-22s %-6s %4ss' "$name" "$([ $rc = 0 ] && echo ok || echo FAIL:$rc)" $(( $(date +%s) - t0 )))")
  [ $rc = 0 ] || fails=$((fails + 1))
}

# The tiny checkpoints: ../shared/models/tiny-{qwen3,glm4}-moe when carried in .device/models,
# else made here with the same configs (scripts/gpu/make_tiny_fixture.py: random weights, ref-small's
# tokenizer); tiny-glm4-moe-grouped (16 experts in 4 groups, correction bias, scaling 2.5) always.
dirs=()
names=(tiny-qwen3-moe tiny-glm4-moe tiny-glm4-moe-grouped)
make=()
for m in "${names[@]}"; do
  if [ -f "$carried/$m/config.json" ]; then dirs+=("$carried/$m"); else dirs+=("$gen/$m"); make+=("$m"); fi
done
if [ ${#make[@]} -gt 0 ]; then
  step make_models 240 bash -c 'for m in "$@"; do python3 scripts/gpu/make_tiny_fixture.py --name "$m" \
    --out-models /tmp/moe-models --out-fixtures /tmp/moe-models/fixtures --lengths 7 --tokens 1 --seed 11 || exit 1; done' _ "${make[@]}"
fi
export HISPARSE_MODELS
HISPARSE_MODELS=$(dirname "${dirs[0]}")  # where tiny-qwen3-moe is (hisparse_moe.test.js)

step moe_test 120 "$bin"
if [ "$sanitize" = 1 ]; then
  san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  step moe_memcheck 180 "$san" --tool memcheck --error-exitcode 1 --print-limit 20 "$bin" --quick
  step moe_racecheck 180 "$san" --tool racecheck --error-exitcode 1 --print-limit 20 "$bin" --quick --only gemm
fi
step moe_bench_kernels 120 "$bin" --bench
step moe_decode_test 120 "$dbin"
[ "$sanitize" = 1 ] && step moe_decode_memcheck 180 "$san" --tool memcheck --error-exitcode 1 --print-limit 20 "$dbin" --quick
step native_tests 240 node --test --test-reporter=spec dist/test/native/moe.test.js \
  dist/test/native/moe_decode.test.js dist/test/native/ops.test.js \
  dist/test/native/attention.test.js dist/test/native/hisparse_moe.test.js
if [ "$skip_hf" = 0 ]; then
  ref=/tmp/hfref-moe
  step hf_reference 240 python3 scripts/gpu/hf_reference.py --out "$ref" --only --tokens 24 --ref "${dirs[@]}"
  files=()
  for m in "${names[@]}"; do files+=("$ref/$m.json"); done
  step compare_hf 240 node dist/scripts/gpu/compare_hf.js "${files[@]}" --assert-greedy="$(IFS=,; echo "${names[*]}")"
fi
if [ "$skip_engine" = 0 ]; then
  for i in 0 1; do
    step "engine_${names[$i]}" 240 node dist/scripts/gpu/engine_checks.js --model "${dirs[$i]}"
  done
fi

echo "== summary"
grep -h "moe_test:\|moe_decode_test:\|RESULT\|ERROR SUMMARY\|^# pass\|^# fail" "$out"/*.log
printf '%s\n' "${rows[@]}"
exit $(( fails > 0 ))
