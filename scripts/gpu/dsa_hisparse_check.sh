#!/usr/bin/env bash
# Hybrid HiSparse for DSA models on CUDA (issue 15), GPU machine, about a minute:
#  1. dist/test/native/dsa_hisparse.test.js: greedy tokens of `on` (host residency; CUDA graphs and
#     --enforce-eager) and of `auto` under forced pressure equal the dense-resident CUDA engine's,
#     for the tiny GLM-5 (with and without "shared" indexer layers) and DeepSeek-V3.2 (the
#     vocabulary-pruned copies in test/fixtures/models; the full ../shared ones too when carried);
#  2. the same test's short case (HISPARSE_DSA_QUICK=1: GLM-5 with shared layers, `on`, 4 tokens)
#     in one process under compute-sanitizer --tool memcheck.
# Prepare here (nvcc, no GPU):
#   npm run build && npm run build:native && bash scripts/device/pack.sh
# Run there, carrying .device, dist and build/Release:
#   source .device/prelude.sh && bash scripts/gpu/dsa_hisparse_check.sh
# Success: "# pass N" / "# fail 0" for step 1, "ERROR SUMMARY: 0 errors" for step 2, and
# "RESULT: PASS" last. Logs go to $OUT (when set) or /tmp/hisparse-dsa-check. Exit 0 iff both passed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-dsa-check}"
mkdir -p "$out"
fail() { echo "dsa_hisparse_check.sh: $*" >&2; echo "RESULT: FAIL ($*)"; exit 2; }
command -v node >/dev/null || fail "node is not on PATH (source .device/prelude.sh first)"
[ -f build/Release/hisparse_native.node ] || fail "build/Release/hisparse_native.node is missing (npm run build:native here, carry build/Release)"
test_js=dist/test/native/dsa_hisparse.test.js
[ -f "$test_js" ] || fail "$test_js is missing (npm run build here, carry dist)"
fails=0

echo "== exactness (node --test)"
t0=$(date +%s)
timeout 180 node --test --test-reporter=tap "$test_js" >"$out/exactness.log" 2>&1
rc=$?
grep -E '^# (tests|pass|fail|skipped) |^# tiny|^not ok' "$out/exactness.log" | head -40
pass=$(grep -E '^# pass ' "$out/exactness.log" | tail -1 | awk '{print $3}')
nfail=$(grep -E '^# fail ' "$out/exactness.log" | tail -1 | awk '{print $3}')
[ "$rc" -eq 0 ] && [ "${nfail:-1}" = 0 ] && [ "${pass:-0}" -gt 0 ] || fails=$((fails + 1))
echo "exactness: rc $rc, pass ${pass:-?}, fail ${nfail:-?}, $(( $(date +%s) - t0 )) s"

echo "== memcheck (short case, one process)"
t0=$(date +%s)
if command -v compute-sanitizer >/dev/null; then
  HISPARSE_DSA_QUICK=1 timeout 240 compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 \
    node "$test_js" >"$out/memcheck.log" 2>&1
  rc=$?
  grep -E 'ERROR SUMMARY|^# (pass|fail) |^not ok' "$out/memcheck.log" | tail -5
  errs=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$out/memcheck.log" | tail -1 | awk '{print $3}')
  mpass=$(grep -E '^# pass ' "$out/memcheck.log" | tail -1 | awk '{print $3}')
  [ "$rc" -eq 0 ] && [ "${errs:-1}" = 0 ] && [ "${mpass:-0}" -gt 0 ] || fails=$((fails + 1))
  echo "memcheck: rc $rc, errors ${errs:-?}, pass ${mpass:-?}, $(( $(date +%s) - t0 )) s"
else
  echo "compute-sanitizer not found"
  fails=$((fails + 1))
fi

if [ "$fails" -eq 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($fails failing steps; logs in $out)"; fi
[ "$fails" -eq 0 ]
