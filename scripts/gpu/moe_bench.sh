#!/usr/bin/env bash
# MoE benchmarks on the GPU machine (issue 14), about a minute: the kernel timings of
# build/moe_check/moe_test --bench (built by moe_check.sh --compile-only when absent; Qwen3-30B-A3B
# layer shapes at T = 1, 32, 128, 8192, every GEMM tile config), then bench/moe_bench.js on the Qwen3-30B-A3B shape cut to NUM_LAYERS layers
# (default 4; figures per layer and scaled to 48) with the fused gate_up + silu_and_mul, and
# again unfused. Prepare and carry as for scripts/gpu/moe_check.sh (no model needed), then:
#   bash scripts/device/unpack.sh && source .device/prelude.sh && bash scripts/gpu/moe_bench.sh
# Logs and JSON go to $OUT (or /tmp/hisparse-moe-bench).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-moe-bench}"
mkdir -p "$out"
layers="${NUM_LAYERS:-4}"
status=0
[ -x build/moe_check/moe_test ] || bash scripts/gpu/moe_check.sh --compile-only || exit 1
timeout 120 build/moe_check/moe_test --bench 2>&1 | tee "$out/moe_kernels.log" || status=1
timeout 150 node dist/bench/moe_bench.js --num-layers "$layers" --json "$out/moe_bench.json" 2>&1 | tee "$out/moe_bench.log" || status=1
timeout 150 node dist/bench/moe_bench.js --num-layers "$layers" --unfused --prefill 8192 \
  --json "$out/moe_bench_unfused.json" 2>&1 | tee "$out/moe_bench_unfused.log" || status=1
exit $status
