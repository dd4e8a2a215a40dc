#!/usr/bin/env bash
# MoE benchmarks on the GPU machine (issue 14). Default: the batch-1 decode check + bench, about
# 2.5-3.5 minutes, fit for one device call of <= 4 minutes:
#  1. build/moe_check/moe_decode_test (the small-batch path of native/kernels/moe_decode.h
#     against the CPU oracle's routing, a float64 reference and the grouped path; batch invariance,
#     graph replay; prints "moe_decode_test: 64 passed, 0 failed"; then memcheck over --quick:
#     "ERROR SUMMARY: 0 errors"), and its --bench: Qwen3-30B-A3B's
#     MoE layer at T = 1, 2, 4, 8, 16, per kernel (route, gate_up, down) and as one graph;
#  2. bench/moe_bench.js on the Qwen3-30B-A3B shape cut to NUM_LAYERS layers (default 4): decode at
#     batch 1, 2, 4 (context 8192), per layer and scaled to 48 layers, with % of the roofline;
#  3. the same at batch 1 with HISPARSE_MOE_PDL=0 (the three kernels without programmatic
#     dependent launch), for the comparison;
#  4. (PROFILE=0 skips it) Nsight Compute per kernel of the batch-1 decode steps of step 2
#     (scripts/gpu/kernel_profile.sh: average ns per kernel over the last 200 launches, cold caches);
#  5. a summary: the b1 line of each run (% of roofline).
# --full adds the older, longer runs (another ~2 minutes): build/moe_check/moe_test --bench (grouped
# path kernels), decode at batch 8, 32, 128 and prefill 8192 / 32768, and batches 1-8 on the grouped
# path (--moe-small-batch 0).
# Both binaries are built by moe_check.sh --compile-only when absent (MOE_REBUILD=1 rebuilds; ~40 s).
# Prepare and carry as for scripts/gpu/moe_check.sh (no model needed: .device, dist, build/Release),
# then:
#   bash scripts/device/unpack.sh && source .device/prelude.sh && bash scripts/gpu/moe_bench.sh
# Logs and JSON go to $OUT (or /tmp/hisparse-moe-bench).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-moe-bench}"
mkdir -p "$out"
layers="${NUM_LAYERS:-4}"
full=0
[ "${1:-}" = "--full" ] && full=1
status=0
{ [ "${MOE_REBUILD:-0}" != 1 ] && [ -x build/moe_check/moe_test ] && [ -x build/moe_check/moe_decode_test ]; } ||
  bash scripts/gpu/moe_check.sh --compile-only || exit 1
echo "== 1. small-batch path: correctness (all cases, then memcheck over --quick) and per-kernel bench"
timeout 90 build/moe_check/moe_decode_test --bench 2>&1 | tee "$out/moe_decode_kernels.log" || status=1
SAN="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
timeout 60 "$SAN" --tool memcheck --error-exitcode 3 build/moe_check/moe_decode_test --quick 2>&1 | tail -3 |
  tee "$out/moe_decode_memcheck.log" || status=1
echo "== 2. decode, batch 1, 2, 4 (PDL on)"
timeout 60 node dist/bench/moe_bench.js --num-layers "$layers" --batches 1,2,4 --prefill "" \
  --json "$out/moe_bench_b1.json" 2>&1 | tee "$out/moe_bench_b1.log" || status=1
echo "== 3. decode, batch 1, HISPARSE_MOE_PDL=0"
HISPARSE_MOE_PDL=0 timeout 50 node dist/bench/moe_bench.js --num-layers "$layers" --batches 1 --prefill "" \
  --json "$out/moe_bench_b1_nopdl.json" 2>&1 | tee "$out/moe_bench_b1_nopdl.log" || status=1
if [ "${PROFILE:-1}" != 0 ]; then
  echo "== 4. ncu per kernel, batch-1 decode (cold caches: each kernel timed alone)"
  OUT="$out" TIMEOUT=90 TAIL=200 bash scripts/gpu/kernel_profile.sh moe_b1 -- \
    node dist/bench/moe_bench.js --num-layers "$layers" --batches 1 --prefill "" 2>&1 | tee "$out/moe_b1_ncu.log" ||
    status=1
fi
if [ "$full" = 1 ]; then
  timeout 120 build/moe_check/moe_test --bench 2>&1 | tee "$out/moe_kernels.log" || status=1
  timeout 150 node dist/bench/moe_bench.js --num-layers "$layers" --batches 8,32,128 --json "$out/moe_bench.json" 2>&1 |
    tee "$out/moe_bench.log" || status=1
  timeout 150 node dist/bench/moe_bench.js --num-layers "$layers" --moe-small-batch 0 --batches 1,2,4,8 --prefill "" \
    --json "$out/moe_bench_grouped.json" 2>&1 | tee "$out/moe_bench_grouped.log" || status=1
fi
echo "== 5. summary (batch-1 decode, % of roofline; the issue's aim is >= 70%)"
grep -h "^| 1 |" "$out/moe_bench_b1.log" | sed 's/^/PDL on:  /'
grep -h "^| 1 |" "$out/moe_bench_b1_nopdl.log" | sed 's/^/PDL off: /'
grep -h "moe_decode_test:" "$out/moe_decode_kernels.log"
grep -h "ERROR SUMMARY" "$out/moe_decode_memcheck.log"
exit $status
