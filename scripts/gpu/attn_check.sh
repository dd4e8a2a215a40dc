#!/usr/bin/env bash
# Builds and runs the CUDA attention + sampler checks (native/tests/) on the GPU machine:
# attention_test, sampling_test, then attention_bench; prints a summary table last.
# Needs only nvcc and a GPU (no Node). Budget: well under 3 minutes on one H200.
#
# Usage (repository root or anywhere):
#   bash scripts/gpu/attn_check.sh [--compile-only] [--quick] [--sanitize]
#     --compile-only  build everything (works on a machine without a GPU) and stop
#     --quick         small test subset and fewer benchmark sizes
#     --sanitize      also run compute-sanitizer memcheck + racecheck on the quick test subsets
# Outputs go to build/attn_check/ (override with HS_ATTN_BUILD); when $OUT is set (device runs),
# the log, the ptxas resource report and the SASS of the kernels are copied there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

compile_only=0; quick=""; sanitize=0
for arg in "$@"; do
  case "$arg" in
    --compile-only) compile_only=1 ;;
    --quick) quick="--quick" ;;
    --sanitize) sanitize=1 ;;
    *) echo "unknown option: $arg" >&2; exit 2 ;;
  esac
done

NVCC="${NVCC:-nvcc}"
command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
BUILD="${HS_ATTN_BUILD:-build/attn_check}"
mkdir -p "$BUILD"
GENCODE="-gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=compute_90"
FLAGS="-std=c++17 -O3 $GENCODE -Xcompiler -pthread"
K=native/kernels
T=native/tests

# name|source|extra flags  (variants rename their C entry points with HS_ATTN_SUFFIX)
objects=(
  "attention_decode|$K/attention_decode.cu|"
  "attention_prefill|$K/attention_prefill.cu|"
  "sampling|$K/sampling.cu|"
  "copy|$K/copy.cu|"
  "attention_decode_s2|$K/attention_decode.cu|-DHS_ATTN_SUFFIX=_s2 -DHS_DECODE_STAGES_128=3"
  "attention_decode_s4|$K/attention_decode.cu|-DHS_ATTN_SUFFIX=_s4 -DHS_DECODE_STAGES_128=4"
  "attention_prefill_k64|$K/attention_prefill.cu|-DHS_ATTN_SUFFIX=_k64 -DHS_PREFILL_KEYS_128=32 -DHS_PREFILL_STAGES_128=3"
  "attention_test|$T/attention_test.cu|"
  "sampling_test|$T/sampling_test.cu|"
  "attention_bench|$T/attention_bench.cu|"
)
echo "== compiling with $("$NVCC" --version | tail -1)"
t0=$(date +%s)
pids=()
for spec in "${objects[@]}"; do
  IFS='|' read -r name src extra <<<"$spec"
  # shellcheck disable=SC2086
  "$NVCC" $FLAGS $extra -Xptxas -v -c "$src" -o "$BUILD/$name.o" >"$BUILD/$name.ptxas.txt" 2>&1 &
  pids+=("$!:$name")
done
fail=0
for entry in "${pids[@]}"; do
  if ! wait "${entry%%:*}"; then
    echo "compile failed: ${entry#*:}"; cat "$BUILD/${entry#*:}.ptxas.txt"; fail=1
  fi
done
[ $fail = 0 ] || exit 1
"$NVCC" $FLAGS "$BUILD/attention_test.o" "$BUILD/attention_decode.o" "$BUILD/attention_prefill.o" "$BUILD/copy.o" \
  -o "$BUILD/attention_test"
"$NVCC" $FLAGS "$BUILD/sampling_test.o" "$BUILD/sampling.o" -o "$BUILD/sampling_test"
"$NVCC" $FLAGS "$BUILD/attention_bench.o" "$BUILD/attention_decode.o" "$BUILD/attention_prefill.o" \
  "$BUILD/attention_decode_s2.o" "$BUILD/attention_decode_s4.o" "$BUILD/attention_prefill_k64.o" -o "$BUILD/attention_bench"
echo "== built in $(( $(date +%s) - t0 )) s: $BUILD/{attention_test,sampling_test,attention_bench}"

# Resource report (sm_90a): registers, spills, shared memory per kernel.
report="$BUILD/ptxas_report.txt"
: >"$report"
for name in attention_decode attention_prefill sampling attention_decode_s2 attention_decode_s4 attention_prefill_k64; do
  awk -v obj="$name" '
    /Compiling entry function/ {
      arch = ($0 ~ /sm_90a/); fn = "?"
      if (match($0, /[A-Za-z]+Kernel(ILi[0-9]+E)?/)) { fn = substr($0, RSTART, RLENGTH); sub(/ILi/, "<", fn); sub(/E$/, ">", fn) }
    }
    /spill stores/ { sp = $0; sub(/^ */, "", sp) }
    /Used [0-9]+ registers/ && arch { u = $0; sub(/.*Used/, "Used", u); printf "%-22s %-24s %s | %s\n", obj, fn, u, sp }
  ' "$BUILD/$name.ptxas.txt" >>"$report"
done
echo "== ptxas (sm_90a): registers / spills per kernel"
cat "$report"
[ $compile_only = 1 ] && exit 0

log="$BUILD/attn_check.log"
: >"$log"
status=0
run() { echo "== $*" | tee -a "$log"; set +e; "$@" 2>&1 | tee -a "$log"; local rc=${PIPESTATUS[0]}; set -e; [ "$rc" = 0 ] || status=1; return 0; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv 2>&1 | tee -a "$log" || true
run "$BUILD/attention_test" $quick
run "$BUILD/sampling_test" $quick
if [ $sanitize = 1 ] && command -v compute-sanitizer >/dev/null 2>&1; then
  run compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/attention_test" --quick
  run compute-sanitizer --tool racecheck --error-exitcode 3 "$BUILD/attention_test" --quick
  run compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/sampling_test" --quick
fi
run "$BUILD/attention_bench" $quick

if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
  cp "$log" "$report" "$OUT/" || true
  if command -v cuobjdump >/dev/null 2>&1; then
    cuobjdump -sass "$BUILD/attention_decode.o" "$BUILD/attention_prefill.o" >"$OUT/sass_attention.txt" 2>&1 || true
  fi
fi

echo
echo "================ summary ================"
grep -E "^(attention_test|sampling_test): " "$log" || echo "(tests did not finish)"
grep -E "^(FAIL|ERROR|CUDA error|=========.*ERROR)" "$log" | head -20 || true
grep -E "^(random|timing) " "$log" || true
awk '/^kernel +shape +variant/ {p=1} p' "$log"
echo "overall: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
