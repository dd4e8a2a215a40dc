#!/usr/bin/env bash
# The Quest resolver's swap-in microbenchmark on the GPU machine (issue 18; needs only nvcc,
# ~30 s): builds native/tests/resolver_bench.cu with the resolver kernels and prints, for batch
# 1, 8 and 32, the swap-in GB/s of the fused resolver, the split one (plan + SM-wide copy pass)
# and the split one over fp8 host pages, every selected slice a miss (Llama-3.1-8B head geometry),
# and after each split bf16 line the same selection again, all hits ("all hits": the plan and the
# launches alone, the fixed cost in the swap-in figure); then "split vs fused B=1|8 ... target >= 46 GB/s: PASS|FAIL", the fp8 bytes per miss line and
# "RESULT: PASS|FAIL" (exit 0 on PASS). Usage: bash scripts/gpu/resolver_bench.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
NVCC="${NVCC:-nvcc}"
command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
mkdir -p build/resolver_bench
"$NVCC" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o build/resolver_bench/resolver_bench \
  native/tests/resolver_bench.cu native/kernels/hisparse_resolve.cu native/kernels/hisparse_resolve_copy.cu
build/resolver_bench/resolver_bench
