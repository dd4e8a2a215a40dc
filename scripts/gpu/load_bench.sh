#!/usr/bin/env bash
# Weight loading on the GPU machine (issue 20 item 3, issue 14 item 4): correctness first, then
# the benchmark. It builds nothing. Prepare here:
#   npm run build && npm run build:native && bash scripts/device/pack.sh
# Run there, carrying .device, dist and build/Release:
#   bash scripts/device/unpack.sh && source .device/prelude.sh && bash scripts/gpu/load_bench.sh
# Steps (about a minute in all; ~16 GB of disk under $TMPDIR for the 8B checkpoint):
# 1. test/native/weight_load.test.ts: dummy weights generated on the GPU == the CPU generator
#    (every weight of ref-small's shape, the raw launcher's edge cases, spot ranges of the 8B
#    embedding); ref-small streamed from safetensors == the CPU load, every weight; a shard cut
#    short fails with one sentence;
# 2. native/tests/dummy_init_test.cu compiled with nvcc: the kernel against values pinned from
#    the TypeScript rule (skipped when nvcc is absent);
# 3. bench/load_bench.ts on configs/llama-3.1-8b (extra arguments go to it and win, e.g. --reuse,
#    --dir DIR, --config configs/qwen3-30b-a3b: its 61 GB checkpoint needs a machine with the disk
#    for it, e.g. nvidia-h200-x2, or --dir /dev/shm/hs on one with the RAM).
# Logs and load_bench.json go to $OUT when set, else /tmp/hisparse-load-bench-out.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-load-bench-out}"
mkdir -p "$out"
status=0
echo "== test/native/weight_load"
node --test dist/test/native/weight_load.test.js 2>&1 | tee "$out/weight_load_test.log" | grep -E "^# (pass|fail|skipped)|^not ok|SKIP" || true
grep -q "^# fail 0" "$out/weight_load_test.log" || status=1
echo "== native/tests/dummy_init_test (nvcc)"
if command -v nvcc >/dev/null; then
  nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -o /tmp/hs_dummy_init_test \
    native/tests/dummy_init_test.cu native/kernels/dummy_init.cu &&
    /tmp/hs_dummy_init_test --quick | tail -1 | tee "$out/dummy_init_test.log"
  grep -q "^PASS" "$out/dummy_init_test.log" || status=1
else
  echo "nvcc not found: skipped"
fi
echo "== bench/load_bench"
node dist/bench/load_bench.js --config configs/llama-3.1-8b --json "$out/load_bench.json" "$@" 2>&1 | tee "$out/load_bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
exit $status
