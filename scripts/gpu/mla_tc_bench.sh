#!/usr/bin/env bash
# The tensor-core MLA decode attention (native/kernels/mla_attention_tc.cu) on one H200, one device
# call of about 3.5 minutes, summary last:
#  1. check: build/mla_tc/mla_test --only attention_tc (the tensor-core kernel against the float64
#     expanded reference and against the SIMT kernel, its oracle: GLM-5's 64 heads x 576-wide
#     rows, 20 / 128 heads, dense and DSA top-k, split and not; hsMlaAttention picks it), then
#     --only attention (the SIMT kernel still exact to 1e-4), compute-sanitizer racecheck and
#     memcheck over --quick --only attention_tc;
#  2. microbench: build/mla_tc/mla_attention_bench, tensor cores vs SIMT at B = 1, 8, 32, 64 x
#     dense 32K / 128K and top-2048 of 32K / 128K: us per call, GB/s, TFLOP/s, % of 4.3 TB/s,
#     max relative difference (PASS line);
#  3. engine: bench/hisparse_throughput.js at selection overlap p = 0.87 (benchmark knob), GLM-5
#     per-layer shape cut to 8 layers / 16 experts as scripts/gpu/dsa_bench.sh, off and auto,
#     32K x B = 1, 24, 64 and 128K x B = 1, 4, 16, then the peak tok/s of each mode and auto's
#     peak over off's (issue 15's target: >= 3x) and batch-1 auto/off (target >= 0.98).
#     MLA_TC_AB=1 also runs the sweep with HISPARSE_MLA_ATTENTION=simt (the old kernel; ~80 s more).
# Prepare here (nvcc, no GPU):
#   npm run build && npm run build:native && bash scripts/gpu/mla_tc_bench.sh --compile-only && bash scripts/device/pack.sh
# Run there, carrying .device, dist, build/Release and build/mla_tc:
#   source .device/prelude.sh && bash scripts/gpu/mla_tc_bench.sh
# Options: --compile-only (build the two binaries and stop; works without a GPU); --no-engine
# (steps 1-2 only, about a minute); --no-sanitize (skip the two compute-sanitizer runs). Logs and JSON in $OUT (when set) or /tmp/hisparse-mla-tc.
# Exit 0 iff the check and the microbench passed and the sweep ran.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
compile_only=0; engine=1; sanitize=1
for a in "$@"; do
  case "$a" in
    --compile-only) compile_only=1 ;;
    --no-engine) engine=0 ;;
    --no-sanitize) sanitize=0 ;;
    *) echo "mla_tc_bench.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
out="${OUT:-/tmp/hisparse-mla-tc}"
bdir=build/mla_tc
mkdir -p "$out" "$bdir"
K=native/kernels
if [ "$compile_only" = 1 ] || [ ! -x "$bdir/mla_test" ] || [ ! -x "$bdir/mla_attention_bench" ]; then
  NVCC="${NVCC:-nvcc}"
  command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
  flags=(-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xcompiler -pthread)
  echo "== compiling $bdir/mla_test and $bdir/mla_attention_bench"
  pids=()
  for src in native/tests/mla_test.cu native/tests/mla_attention_bench.cu $K/mla_rows.cu $K/mla_attention.cu \
    $K/mla_attention_tc.cu $K/mla_project.cu $K/mla_indexer.cu $K/mla_topk.cu; do
    "$NVCC" "${flags[@]}" -c "$src" -o "$bdir/$(basename "$src" .cu).o" & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "mla_tc_bench.sh: compiling failed" >&2; exit 1; }; done
  kern=("$bdir/mla_rows.o" "$bdir/mla_attention.o" "$bdir/mla_attention_tc.o" "$bdir/mla_project.o" "$bdir/mla_indexer.o" "$bdir/mla_topk.o")
  "$NVCC" "${flags[@]}" "$bdir/mla_test.o" "${kern[@]}" -o "$bdir/mla_test" &&
    "$NVCC" "${flags[@]}" "$bdir/mla_attention_bench.o" "${kern[@]}" -o "$bdir/mla_attention_bench" ||
    { echo "mla_tc_bench.sh: linking failed" >&2; exit 1; }
  rm -f "$bdir"/*.o
fi
[ "$compile_only" = 1 ] && { echo "built $bdir/mla_test $bdir/mla_attention_bench"; exit 0; }

rows=()
fails=0
step() {  # name timeout_s command...
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s)
  echo "== $name: $*"
  timeout "$limit" "$@" > >(tee "$out/$name.log") 2>&1
  local rc=$?
  rows+=("$(printf '%-16s %-8s %4ss' "$name" "$([ $rc = 0 ] && echo ok || echo FAIL:$rc)" $(( $(date +%s) - t0 )))")
  [ $rc = 0 ] || fails=$((fails + 1))
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1 | head -1
step tc_test 90 "$bdir/mla_test" --only attention_tc
step simt_test 60 "$bdir/mla_test" --only attention
if [ "$sanitize" = 1 ]; then
  san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  step tc_racecheck 50 "$san" --tool racecheck --error-exitcode 1 --print-limit 10 "$bdir/mla_test" --quick --only attention_tc
  step tc_memcheck 50 "$san" --tool memcheck --error-exitcode 1 --print-limit 10 "$bdir/mla_test" --quick --only attention_tc
fi
step tc_bench 60 "$bdir/mla_attention_bench"

peaks() {  # json label
  node -e '
    const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    for (const ctx of [...new Set(j.rows.map((r) => r.context))]) {
      const rs = j.rows.filter((r) => r.context === ctx);
      const peak = (m) => Math.max(0, ...rs.filter((r) => r.mode === m).map((r) => r.tokPerS));
      const b1 = (m) => rs.find((r) => r.mode === m && r.batch === 1)?.tokPerS ?? NaN;
      const [po, pa] = [peak("off"), peak("auto")];
      console.log(`${process.argv[2]} context ${ctx}: peak off ${po.toFixed(0)} tok/s, peak auto ${pa.toFixed(0)} tok/s, ` +
        `auto/off peak ${(pa / po).toFixed(2)}x (target 3x), batch-1 auto/off ${(b1("auto") / b1("off")).toFixed(2)}x (target 0.98x)`);
    }' "$1" "$2"
}
if [ "$engine" = 1 ]; then
  [ -f scripts/device/unpack.sh ] && [ -f .device/node_modules.tar.xz ] && bash scripts/device/unpack.sh
  command -v node >/dev/null || { echo "mla_tc_bench.sh: node is not on PATH (source .device/prelude.sh first)" >&2; exit 2; }
  common=(--config configs/glm-5 --num-layers 8 --num-experts 16 --contexts 32768,131072 --kv-budget-gib 8
    --host-pool-gib 24 --steps 8 --batches "32768:1,24,64;131072:1,4,16" --modes off,auto --overlap 0.87)
  step dsa_tc 125 node dist/bench/hisparse_throughput.js "${common[@]}" --budget-s 95 --json "$out/dsa_tc.json"
  if [ "${MLA_TC_AB:-0}" = 1 ]; then
    step dsa_simt 125 env HISPARSE_MLA_ATTENTION=simt node dist/bench/hisparse_throughput.js "${common[@]}" \
      --budget-s 95 --json "$out/dsa_simt.json"
  fi
fi
echo "== summary"
grep -h "^mla_test:\|ERROR SUMMARY\|RACECHECK SUMMARY\|mla_attention_bench:" "$out"/tc_*.log "$out"/simt_test.log 2>/dev/null
grep -h "^  tc " "$out/tc_test.log" 2>/dev/null
[ -f "$out/tc_bench.log" ] && grep -E "^\|" "$out/tc_bench.log"
[ -f "$out/dsa_tc.json" ] && peaks "$out/dsa_tc.json" "tensor cores:"
[ -f "$out/dsa_simt.json" ] && peaks "$out/dsa_simt.json" "SIMT (A/B):"
printf '%s\n' "${rows[@]}"
exit $(( fails > 0 ))
