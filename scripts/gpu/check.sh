#!/usr/bin/env bash
# The one command that checks the CUDA backend on the GPU machine. It builds nothing.
#
# Prepare here (this machine has nvcc but no GPU):
#   npm run build && npm run build:native
#   bash ../shared/device/prepare.sh
#   mkdir -p .device/fixtures && cp ../shared/fixtures/hf-ref-small.json .device/fixtures/
# Run there, carrying .device, dist and build/Release:
#   source .device/prelude.sh && bash scripts/gpu/check.sh
# The addon needs glibc >= 2.34 and libstdc++ >= GCC 11 there. If it does not load, build it on
# the GPU machine instead (nvcc and cmake are there): prepare with `prepare.sh --dev` (carries
# cmake-js and node-addon-api) and run `node scripts/build-native.mjs &&` before this script.
#
# Steps: device and addon info; every test/native suite (compiled: dist/test/native/*.test.js),
# one process each; `compute-sanitizer --tool memcheck` over dist/scripts/gpu/op_sequence.js
# (non-caching allocator, one allocation per op output); then a summary table, last.
# Logs go to $OUT (tests.log, memcheck.log, summary.txt) when set, else /tmp/hisparse-gpu-check.
# Exit status: 0 when every suite passed and memcheck found no error.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-gpu-check}"
mkdir -p "$out"
: >"$out/tests.log"

fail() { echo "check.sh: $*" >&2; exit 2; }
command -v node >/dev/null || fail "node is not on PATH (source .device/prelude.sh first)"
[ -f build/Release/hisparse_native.node ] || fail "build/Release/hisparse_native.node is missing (npm run build:native here, carry build/Release)"
ls dist/test/native/*.test.js >/dev/null 2>&1 || fail "dist/test/native is missing (npm run build here, carry dist)"

echo "== device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader 2>&1 | head -2
node -e '
  import("./dist/src/backends/detect.js").then(({ detectCuda }) => {
    const d = detectCuda();
    console.log(JSON.stringify(d));
  });'

rows=()
total_fail=0
for f in dist/test/native/*.test.js; do
  name="$(basename "$f" .test.js)"
  echo "== test $name"
  start=$(date +%s.%N)
  node --test --test-reporter=tap "$f" >"$out/test-$name.tmp" 2>&1
  rc=$?
  secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  { echo "##### $name (exit $rc, ${secs}s)"; cat "$out/test-$name.tmp"; } >>"$out/tests.log"
  # TAP summary lines: "# pass N", "# fail N", "# skipped N"
  pass=$(grep -E '^# pass ' "$out/test-$name.tmp" | tail -1 | awk '{print $3}')
  failn=$(grep -E '^# fail ' "$out/test-$name.tmp" | tail -1 | awk '{print $3}')
  skipn=$(grep -E '^# skipped ' "$out/test-$name.tmp" | tail -1 | awk '{print $3}')
  suite_skips=$(grep -cE '# SKIP' "$out/test-$name.tmp")
  grep -E '^not ok|^    not ok|^        not ok|error:|relative error|greedy tokens' "$out/test-$name.tmp" | head -20
  rm -f "$out/test-$name.tmp"
  [ "$rc" -ne 0 ] && total_fail=$((total_fail + 1))
  rows+=("$(printf '%-22s %5s %6s %6s %8s %7s' "test:$name" "$rc" "${pass:-?}" "${failn:-?}" "$suite_skips" "$secs")")
done

echo "== compute-sanitizer memcheck: op_sequence"
mc_status="not run"
if command -v compute-sanitizer >/dev/null; then
  start=$(date +%s.%N)
  timeout 600 compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 50 \
    node dist/scripts/gpu/op_sequence.js >"$out/memcheck.log" 2>&1
  mrc=$?
  secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  tail -5 "$out/memcheck.log"
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$out/memcheck.log" | tail -1 | awk '{print $3}')
  ok=$(grep -c 'op-sequence: ok' "$out/memcheck.log")
  mc_status="errors=${errors:-?} sequence_ok=$ok"
  [ "$mrc" -ne 0 ] && total_fail=$((total_fail + 1))
  rows+=("$(printf '%-22s %5s %6s %6s %8s %7s' "memcheck:op_sequence" "$mrc" "$ok" "${errors:-?}" "-" "$secs")")
else
  echo "compute-sanitizer not found"
  total_fail=$((total_fail + 1))
  rows+=("$(printf '%-22s %5s %6s %6s %8s %7s' "memcheck:op_sequence" "n/a" "-" "-" "-" "-")")
fi

{
  echo
  echo "== summary (tests: exit, passed, failed, skipped suites/tests, seconds; memcheck: exit, ok, errors)"
  printf '%-22s %5s %6s %6s %8s %7s\n' "what" "exit" "pass" "fail" "skipped" "secs"
  for r in "${rows[@]}"; do echo "$r"; done
  echo "memcheck: $mc_status"
  if [ "$total_fail" -eq 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($total_fail failing steps; see $out/tests.log, $out/memcheck.log)"; fi
} | tee "$out/summary.txt"
[ "$total_fail" -eq 0 ]
