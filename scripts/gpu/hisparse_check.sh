#!/usr/bin/env bash
# The one command that checks HiSparse on the GPU machine (issue 6): correctness, sanitizer,
# swap-in bandwidth, throughput and capacity, in under 8 minutes, with a summary table last.
#
# Prepare here (this machine has nvcc but no GPU):
#   npm run build && npm run build:native && bash scripts/device/pack.sh
# Run there, carrying .device, dist and build/Release:
#   bash scripts/device/unpack.sh && source .device/prelude.sh && bash scripts/gpu/hisparse_check.sh
# (ref-base is tested too when present: carry it in .device/models via `pack.sh --model ref-base`
#  and export HISPARSE_MODELS=$PWD/.device/models, in a second call if the first is too large.)
#
# Steps, each under `timeout`:
#  1. nvcc-build native/tests/hisparse_test (hisparse_test*.cu) and run it: every HiSparse kernel
#     against C++ ports of the CPU oracles (digests, selection, resolver, mirror: exact; sparse attention: bits equal
#     to dense with dense tables, float64 reference otherwise; the resolver fused, split and split
#     over fp8 host pages); then scripts/gpu/resolver_bench.sh: the resolver's swap-in bandwidth
#     with every selected slice a miss, fused vs split, bf16 vs fp8 host pages (target >= 46 GB/s);
#  2. dist/test/native/hisparse_kernels.test.js, hisparse_resolver.test.js and
#     hisparse_host_tier.test.js: the same kernels through CudaBackend against the TypeScript
#     oracles (QuestSelector, LruHotBufferResolver) on identical inputs, and the host tier;
#  3. dist/test/native/hisparse_engine.test.js: greedy tokens of ref-small (and ref-base) with
#     `on` and `auto` (topk >= context) equal `off` on CUDA; graphs equal eager;
#  4. dist/test/native/attention.test.js: dense attention through the backend, unchanged;
#  5. compute-sanitizer memcheck over hisparse_test --quick and over
#     dist/scripts/gpu/hisparse_sequence.js (engine runs: on graphs / eager, auto with spills);
#  6. the swap-in microbenchmark (hsSwapInPages, target >= 46 GB/s);
#  7. reduced runs of bench/hisparse_throughput (32K, batch 1 and 8, off/on/auto) and
#     bench/hisparse_capacity (128K, off/auto), with what time is left (the full grids are
#     scripts/gpu/hisparse_bench.sh, a second call).
# QUICK=1 runs the correctness steps only (1-5, about 2 minutes): re-validation after a change.
# Logs and JSON go to $OUT (when set) or /tmp/hisparse-check. Exit 0 when every correctness step
# passed (1-5); the benchmarks report figures.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-check}"
mkdir -p "$out" build/hisparse_test
start_all=$(date +%s)
rows=()
fails=0

fail() { echo "hisparse_check.sh: $*" >&2; exit 2; }
command -v node >/dev/null || fail "node is not on PATH (source .device/prelude.sh first)"
[ -f build/Release/hisparse_native.node ] || fail "build/Release/hisparse_native.node is missing (npm run build:native here, carry build/Release)"
[ -f dist/test/native/hisparse_kernels.test.js ] || fail "dist is missing (npm run build here, carry dist)"
NVCC="${NVCC:-nvcc}"
command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc

# run NAME LIMIT_S CMD...: runs a step, logs to $out/NAME.log, records exit code and seconds.
run() {
  local name=$1 limit=$2; shift 2
  echo "== $name"
  local t0; t0=$(date +%s.%N)
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local secs; secs=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN { printf "%.0f", e - s }')
  tail -n 12 "$out/$name.log"
  LAST_RC=$rc
  LAST_SECS=$secs
}
tap() {  # pass/fail counts of a node --test TAP log
  local p f
  p=$(grep -E '^# pass ' "$1" | tail -1 | awk '{print $3}')
  f=$(grep -E '^# fail ' "$1" | tail -1 | awk '{print $3}')
  echo "${p:-?}/${f:-?}"
}
row() { rows+=("$(printf '%-26s %5s %8s %6s  %s' "$1" "$2" "$3" "$4" "$5")"); }

echo "== device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
free -g 2>/dev/null | head -2

# 1. standalone kernel test
run build_kernel_test 240 "$NVCC" -std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a \
  -o build/hisparse_test/hisparse_test native/tests/hisparse_test.cu native/tests/hisparse_test_kv.cu \
  native/tests/hisparse_test_select.cu native/tests/hisparse_test_resolve.cu native/tests/hisparse_test_attention.cu \
  native/kernels/hisparse_digest.cu native/kernels/hisparse_select.cu native/kernels/hisparse_resolve.cu native/kernels/hisparse_resolve_copy.cu \
  native/kernels/hisparse_mirror.cu native/kernels/attention_decode.cu native/kernels/attention_prefill.cu
[ "$LAST_RC" -ne 0 ] && fails=$((fails + 1))
row "nvcc hisparse_test" "$LAST_RC" "-" "$LAST_SECS" ""
if [ -x build/hisparse_test/hisparse_test ]; then
  run kernel_test 180 build/hisparse_test/hisparse_test
  [ "$LAST_RC" -ne 0 ] && fails=$((fails + 1))
  row "kernels vs C++ oracles" "$LAST_RC" "$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$out/kernel_test.log" | tail -1 | awk '{print $1"/"$3}')" "$LAST_SECS" ""
fi
[ -n "${QUICK:-}" ] || run resolver_swapin 120 bash scripts/gpu/resolver_bench.sh
[ -n "${QUICK:-}" ] || row "resolver swap-in (misses)" "$LAST_RC" "-" "$LAST_SECS" "$(grep -E '^split vs fused B=' "$out/resolver_swapin.log" | awk '{print $4$5}' | paste -sd' ') GB/s split"

# 2-4. node tests
for t in hisparse_kernels hisparse_resolver hisparse_host_tier hisparse_engine attention; do
  run "test_$t" 300 node --test --test-reporter=tap "dist/test/native/$t.test.js"
  [ "$LAST_RC" -ne 0 ] && fails=$((fails + 1))
  row "test:$t" "$LAST_RC" "$(tap "$out/test_$t.log")" "$LAST_SECS" "$(grep -c '# SKIP' "$out/test_$t.log") skipped"
done

# 5. compute-sanitizer
if command -v compute-sanitizer >/dev/null; then
  run memcheck_kernels 240 compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 \
    build/hisparse_test/hisparse_test --quick
  [ "$LAST_RC" -ne 0 ] && fails=$((fails + 1))
  row "memcheck hisparse_test" "$LAST_RC" "$(grep -oE 'ERROR SUMMARY: [0-9]+' "$out/memcheck_kernels.log" | tail -1 | awk '{print $3}') err" "$LAST_SECS" ""
  run racecheck_kernels 240 compute-sanitizer --tool racecheck --error-exitcode 99 --print-limit 20 \
    build/hisparse_test/hisparse_test --quick --only "select"
  [ "$LAST_RC" -ne 0 ] && fails=$((fails + 1))
  row "racecheck select" "$LAST_RC" "$(grep -oE '(ERROR|RACECHECK) SUMMARY: [0-9]+' "$out/racecheck_kernels.log" | tail -1 | awk '{print $3}') err" "$LAST_SECS" ""
  run memcheck_engine 300 compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 \
    node dist/scripts/gpu/hisparse_sequence.js
  [ "$LAST_RC" -ne 0 ] && fails=$((fails + 1))
  row "memcheck engine sequence" "$LAST_RC" "$(grep -oE 'ERROR SUMMARY: [0-9]+' "$out/memcheck_engine.log" | tail -1 | awk '{print $3}') err" "$LAST_SECS" "$(grep -c 'hisparse-sequence: ok' "$out/memcheck_engine.log") ok"
else
  echo "compute-sanitizer not found"
  fails=$((fails + 1))
  row "compute-sanitizer" "n/a" "-" "-" "not found"
fi

# 6. swap-in bandwidth
[ -n "${QUICK:-}" ] || run swapin 120 bash scripts/gpu/swapin_check.sh 16
[ -n "${QUICK:-}" ] || row "swap-in 16 KiB pages" "$LAST_RC" "-" "$LAST_SECS" "$(grep -oE 'hsSwapInPages \(UVA gather\) +[0-9.]+ GB/s' "$out/swapin.log" | awk '{print $(NF-1)" GB/s"}')"

# 7. benchmarks, reduced (they must start and run; the full figures: scripts/gpu/hisparse_bench.sh)
left=$(( 450 - ($(date +%s) - start_all) ))
[ -n "${QUICK:-}" ] && left=0
if [ "$left" -gt 90 ]; then
  run throughput "$left" node dist/bench/hisparse_throughput.js --budget-s $((left - 10)) --steps 8 \
    --contexts 32768 --batches "32768:1,8" --kv-budget-gib 16 --host-pool-gib 24 --json "$out/hisparse_throughput.json"
  row "bench throughput (reduced)" "$LAST_RC" "-" "$LAST_SECS" "see table"
else
  row "bench throughput" "skip" "-" "-" "$([ -n "${QUICK:-}" ] && echo QUICK || echo "no time left")"
fi
left=$(( 470 - ($(date +%s) - start_all) ))
[ -n "${QUICK:-}" ] && left=0
if [ "$left" -gt 60 ]; then
  run capacity "$left" node dist/bench/hisparse_capacity.js --max-requests 6 --modes off,auto --kv-budget-gib 24 \
    --host-pool-gib 40 --json "$out/hisparse_capacity.json"
  row "bench capacity (reduced)" "$LAST_RC" "-" "$LAST_SECS" "see table"
else
  row "bench capacity" "skip" "-" "-" "$([ -n "${QUICK:-}" ] && echo QUICK || echo "no time left")"
fi

{
  echo
  echo "== throughput (tok/s, running requests in parentheses)"
  grep -E '^\|' "$out/throughput.log" 2>/dev/null
  echo
  echo "== capacity"
  grep -E '^\||^plan' "$out/capacity.log" 2>/dev/null
  echo
  echo "== summary (step, exit, pass/fail or errors, seconds, note); logs in $out"
  printf '%-26s %5s %8s %6s  %s\n' "step" "exit" "result" "secs" "note"
  for r in "${rows[@]}"; do echo "$r"; done
  echo "total $(( $(date +%s) - start_all )) s"
  if [ "$fails" -eq 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($fails failing correctness steps)"; fi
} | tee "$out/summary.txt"
[ "$fails" -eq 0 ]
