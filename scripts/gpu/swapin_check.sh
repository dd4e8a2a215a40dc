#!/usr/bin/env bash
# Builds and runs the HiSparse swap-in microbenchmark/test (native/tests/swapin_bench.cu) on the
# GPU machine (needs only nvcc). Usage: bash scripts/gpu/swapin_check.sh [pageKiB...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
NVCC="${NVCC:-nvcc}"
command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
mkdir -p build/swapin
"$NVCC" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o build/swapin/swapin_bench \
  native/tests/swapin_bench.cu native/kernels/hisparse_swapin.cu
for kib in "${@:-16}"; do build/swapin/swapin_bench "$kib"; done
