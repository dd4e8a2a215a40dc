#!/usr/bin/env bash
# MoE benchmarks on the GPU machine (issue 14), about a minute and a half:
#  1. build/moe_check/moe_test --bench: the grouped path's kernels on Qwen3-30B-A3B layer shapes
#     (T = 1, 32, 128, 8192, every GEMM tile config);
#  2. build/moe_check/moe_decode_test --bench: the small-batch path (native/kernels/moe_decode.h)
#     against the grouped path, whole layer as a graph, at T = 1, 2, 4, 8, 16 (the new path's
#     column includes its router GEMV, the grouped one leaves the router's cuBLAS linear out);
#  3. bench/moe_bench.js on the Qwen3-30B-A3B shape cut to NUM_LAYERS layers (default 4; figures per
#     layer and scaled to 48): decode at batch 1, 8, 32, 128 (context 8192) with the default
#     small-batch path for T <= 8, and prefill 8192 / 32768;
#  4. the same decode at batch 1, 2, 4, 8 with the small-batch path off (--moe-small-batch 0: the
#     grouped path), for the comparison.
# Both binaries are built by moe_check.sh --compile-only when absent. Prepare and carry as for
# scripts/gpu/moe_check.sh (no model needed), then:
#   bash scripts/device/unpack.sh && source .device/prelude.sh && bash scripts/gpu/moe_bench.sh
# Logs and JSON go to $OUT (or /tmp/hisparse-moe-bench).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-moe-bench}"
mkdir -p "$out"
layers="${NUM_LAYERS:-4}"
status=0
{ [ -x build/moe_check/moe_test ] && [ -x build/moe_check/moe_decode_test ]; } ||
  bash scripts/gpu/moe_check.sh --compile-only || exit 1
timeout 120 build/moe_check/moe_test --bench 2>&1 | tee "$out/moe_kernels.log" || status=1
timeout 120 build/moe_check/moe_decode_test --quick --bench 2>&1 | tee "$out/moe_decode_kernels.log" || status=1
timeout 150 node dist/bench/moe_bench.js --num-layers "$layers" --batches 1,8,32,128 --json "$out/moe_bench.json" 2>&1 |
  tee "$out/moe_bench.log" || status=1
timeout 150 node dist/bench/moe_bench.js --num-layers "$layers" --moe-small-batch 0 --batches 1,2,4,8 --prefill "" \
  --json "$out/moe_bench_grouped.json" 2>&1 | tee "$out/moe_bench_grouped.log" || status=1
exit $status
