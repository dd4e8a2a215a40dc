#!/usr/bin/env bash
# fp8 KV cache and the Quest scoring kernel on the GPU machine (issue 18 items 1, 3 and 5), < 3 min.
# Prepare here: npm run build && npm run build:native && bash ../shared/device/prepare.sh --model ref-base
# Run there (carry .device, dist, build/Release):
#   source .device/prelude.sh && bash scripts/gpu/fp8_check.sh
# Steps (logs and a summary in $OUT, else /tmp/fp8-check):
#  1. nvcc: attention_test (the fp8 cases: reshape_and_cache e4m3 codes = host rounding, fp8
#     attention = bf16 attention over the dequantised cache bit for bit), hisparse_test (Quest
#     selection = the C++ oracle, f32 tree order; grid-stride loop; overlap knob) and
#     quest_score_bench, compiled in parallel;
#  2. attention_test --quick, hisparse_test --quick --only select;
#  3. node --test dist/test/native/fp8_kv.test.js (CUDA fp8 vs the CPU backend's e4m3 oracle);
#  4. quest_score_bench: hsQuestSelect at Llama-8B shape, 32K rows, B = 1 and 8 (us, GB/s of digests);
#  5. perplexity of ref-base, dense, bf16 vs fp8 KV, through the decode path (eval ppl, 4 windows of
#     4096 tokens, 1024 scored each, on C headers as in hisparse_quality.sh).
# Success: every row of the summary reads ok; "selection = oracle" on both bench lines; in the
# perplexity table (columns bf16, fp8), the fp8 column's "vs bf16" row within +0.5%.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/fp8-check}"
mkdir -p "$out" build/fp8
NVCC="${NVCC:-nvcc}"
command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
F=(-std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a)
K=native/kernels
T=native/tests
rows=()
row() { rows+=("$(printf '%-34s %-6s %s' "$1" "$2" "$3")"); }
t0=$(date +%s)
echo "== compiling (parallel)"
"$NVCC" "${F[@]}" -o build/fp8/attention_test $T/attention_test.cu $K/attention_decode.cu $K/attention_prefill.cu \
  $K/copy.cu >"$out/nvcc_attention.log" 2>&1 &
p1=$!
"$NVCC" "${F[@]}" -o build/fp8/hisparse_test $T/hisparse_test.cu $T/hisparse_test_kv.cu $T/hisparse_test_select.cu \
  $T/hisparse_test_resolve.cu $T/hisparse_test_attention.cu $K/hisparse_digest.cu $K/hisparse_select.cu \
  $K/hisparse_resolve.cu $K/hisparse_resolve_copy.cu $K/hisparse_mirror.cu $K/attention_decode.cu $K/attention_prefill.cu \
  >"$out/nvcc_hisparse.log" 2>&1 &
p2=$!
"$NVCC" "${F[@]}" -o build/fp8/quest_score_bench $T/quest_score_bench.cu $K/hisparse_select.cu \
  >"$out/nvcc_bench.log" 2>&1 &
p3=$!
for p in $p1 $p2 $p3; do wait $p || echo "compile failed (see $out/nvcc_*.log)"; done
echo "== compiled in $(( $(date +%s) - t0 )) s"

run() {  # name timeout cmd...
  local name=$1 limit=$2; shift 2
  echo "== $name"
  timeout "$limit" "$@" 2>&1 | tee "$out/$name.log"
  return "${PIPESTATUS[0]}"
}
if [ -x build/fp8/attention_test ]; then
  run attention_test 120 build/fp8/attention_test --quick
  row "attention_test (fp8 cases)" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -c '^fp8 .* ok$' "$out/attention_test.log") fp8 cases ok"
else row "attention_test" "FAIL" "did not compile"; fi
if [ -x build/fp8/hisparse_test ]; then
  run hisparse_select 120 build/fp8/hisparse_test --quick --only select
  row "hisparse_test --only select" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -cE ' ok$' "$out/hisparse_select.log") cases ok"
else row "hisparse_test" "FAIL" "did not compile"; fi
run fp8_kv 120 node --test --test-reporter=tap dist/test/native/fp8_kv.test.js
row "test/native/fp8_kv (CUDA vs CPU)" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -E '^# (pass|fail|skipped) ' "$out/fp8_kv.log" | tr '\n' ' ')"
if [ -x build/fp8/quest_score_bench ]; then
  run quest_score_bench 60 build/fp8/quest_score_bench
  row "quest_score_bench" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -E '^B=8 ' "$out/quest_score_bench.log" | head -1 | awk '{print $2" us at B=8"}')"
else row "quest_score_bench" "FAIL" "did not compile"; fi

model="${HISPARSE_MODELS:-$PWD/.device/models}/ref-base"
[ -f "$model/config.json" ] || model="$PWD/../shared/models/ref-base"
if [ -f "$model/config.json" ]; then
  if ls /usr/include/*.h >/dev/null 2>&1; then cat /usr/include/*.h >"$out/text.txt"; else cat native/kernels/* native/addon/* >"$out/text.txt"; fi
  run ppl 150 node bin/hisparse.js eval ppl --model "$model" --device cuda --max-model-len 8192 \
    --file "$out/text.txt" --ctx 4096 --prefix-tokens 3072 --max-windows 4 \
    --compare "bf16: --kv-cache-dtype bf16" "fp8: --kv-cache-dtype fp8" --json "$out/ppl_fp8.json"
  row "ppl ref-base bf16 vs fp8 (dense)" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(grep -E '^\| (perplexity|vs bf16) ' "$out/ppl.log" | tr -s ' ' | tr '\n' ' ')"
else
  row "ppl ref-base" "skip" "ref-base not carried (prepare.sh --model ref-base)"
fi
{
  echo
  echo "== summary ($(( $(date +%s) - t0 )) s)"
  printf '%-34s %-6s %s\n' step result detail
  printf '%s\n' "${rows[@]}"
} | tee "$out/summary.txt"
! grep -q FAIL "$out/summary.txt"
