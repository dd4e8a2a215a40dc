#!/usr/bin/env bash
# Tensor-parallel checks on the GPU machine (issue 16); see scripts/gpu/tp_check.ts for what each
# check compares.
#
# Prepare here (nvcc, no GPU):
#   npm run build && npm run build:native && bash ../shared/device/prepare.sh
# Run there, carrying .device, dist and build/Release:
#   source .device/prelude.sh && bash scripts/gpu/tp_check.sh [--quick]
# One GPU: part A (NCCL path at TP=1 == the single-GPU path: greedy identical, decode step time
# within 2%). Two or more GPUs: part B too (TP=2/4/8 exactness vs TP=1 and the scaling table of
# Llama-3.1-8B and the Llama-3.1-70B shape, dummy weights).
# Before anything: `hisparse info --tensor-parallel-size N` (GPUs, NCCL version, the split).
# Logs go to $OUT (when set) or /tmp/hisparse-tp-check. Exit 0 iff every check passed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-tp-check}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off (the addon sets it too, before NCCL loads)
node bin/hisparse.js info --model configs/llama-3.1-8b --tensor-parallel-size 1 2>&1 | tail -3 | tee "$out/info.log"
OUT="$out" timeout 900 node dist/scripts/gpu/tp_check.js "$@" 2>&1 | tee "$out/tp_check.log"
exit "${PIPESTATUS[0]}"
