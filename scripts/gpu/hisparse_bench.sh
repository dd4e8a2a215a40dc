#!/usr/bin/env bash
# HiSparse figures on the GPU machine (issue 6), a call of its own (about 9 minutes):
#   bash scripts/device/unpack.sh && source .device/prelude.sh && bash scripts/gpu/hisparse_bench.sh
# 1. bench/hisparse_throughput: decode tok/s vs concurrency at 32K and 128K for off / on / auto,
#    same device KV budget (32 GiB), 64 GiB pinned host pool, Llama-3.1-8B shape, dummy weights;
# 2. bench/hisparse_capacity: 128K-token requests decoding at once without preemption, off / auto
#    / on, 32 GiB of device KV memory and an 80 GiB host pool; then the same with no dense layers.
# JSON and logs in $OUT (or /tmp/hisparse-bench); tables last. Commit the figures under
# bench/results/ with these commands.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-bench}"
mkdir -p "$out"
timeout 330 node dist/bench/hisparse_throughput.js --budget-s 310 --json "$out/hisparse_throughput.json" \
  2>&1 | tee "$out/throughput.log"
timeout 150 node dist/bench/hisparse_capacity.js --json "$out/hisparse_capacity.json" 2>&1 | tee "$out/capacity.log"
timeout 80 node dist/bench/hisparse_capacity.js --modes off,on --dense-layers "" --max-requests 16 \
  --json "$out/hisparse_capacity_nodense.json" 2>&1 | tee "$out/capacity_nodense.log"
echo
echo "== throughput"; grep -E '^\|' "$out/throughput.log"
echo "== capacity (dense layers 0,1)"; grep -E '^\||^plan' "$out/capacity.log"
echo "== capacity (no dense layer)"; grep -E '^\||^plan' "$out/capacity_nodense.log"
