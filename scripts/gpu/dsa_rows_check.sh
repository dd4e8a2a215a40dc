#!/usr/bin/env bash
# DSA HiSparse hot rows on the GPU (issue 15), about a minute: nvcc-builds native/tests/hisparse_rows_test
# (hsRowResolve + hsRowCopy against the C++ port of the CPU oracle LruHotRowResolver), runs the full
# 200-step sequence, compute-sanitizer memcheck and racecheck over --quick, then the copy bandwidth.
# Needs only the source tree and nvcc on the GPU machine:
#   source .device/prelude.sh && bash scripts/gpu/dsa_rows_check.sh
# Success: "hisparse_rows_test: 2 passed, 0 failed", "ERROR SUMMARY: 0 errors" twice (memcheck,
# racecheck: "RACECHECK SUMMARY: 0 hazards"), an "hsRowCopy: ... GB/s" line, and "RESULT: PASS" last.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
NVCC="${NVCC:-nvcc}"
command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
mkdir -p build/hisparse_rows_test
bin=build/hisparse_rows_test/hisparse_rows_test
fails=0
timeout 240 "$NVCC" -std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a -o "$bin" \
  native/tests/hisparse_rows_test.cu native/kernels/hisparse_rows.cu native/kernels/hisparse_rows_overlap.cu || { echo "RESULT: FAIL (build)"; exit 1; }
timeout 120 "$bin" || fails=$((fails + 1))
if command -v compute-sanitizer >/dev/null; then
  timeout 180 compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 "$bin" --quick || fails=$((fails + 1))
  timeout 180 compute-sanitizer --tool racecheck --error-exitcode 99 --print-limit 20 "$bin" --quick || fails=$((fails + 1))
else
  echo "compute-sanitizer not found"
  fails=$((fails + 1))
fi
timeout 60 "$bin" --bench
if [ "$fails" -eq 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($fails failing steps)"; fi
[ "$fails" -eq 0 ]
