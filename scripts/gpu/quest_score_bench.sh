#!/usr/bin/env bash
# The Quest scorer alone on the GPU machine (issue 18, 4-token digests), < 2 min, no addon or model:
#   bash scripts/gpu/quest_score_bench.sh        (logs in $OUT, else /tmp/quest-score-bench)
# 1. nvcc-build native/tests/hisparse_test and native/tests/quest_score_bench (sm_90a);
# 2. hisparse_test --only select: hsQuestSelect's selections and score keys = the C++ oracle's
#    (S = 1, 2, 3, 4, 8; bf16 and fp8; ties; the grid-stride loop);
# 3. quest_score_bench: us per hsQuestSelect call at Llama-8B shape, 32K-token rows (2,048 pages,
#    8 KV heads), B = 1, 8, 16; at B = 16 S = 4 bf16 and fp8, sub-pages 4 at once (default) and one
#    at a time (the scorer before 620dc2e), with "ms / 32 layers" the step-equivalent cost.
# Success: every select case "ok", "selection = oracle" on the checked bench lines; the figure to
# report is "B=16, S=4 fp8, 4 sub-pages at once" against "one at a time" and "S=1 bf16".
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/quest-score-bench}"
mkdir -p "$out" build/quest_score
NVCC="${NVCC:-nvcc}"
command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
F=(-std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a)
K=native/kernels
T=native/tests
"$NVCC" "${F[@]}" -o build/quest_score/hisparse_test $T/hisparse_test.cu $T/hisparse_test_kv.cu \
  $T/hisparse_test_select.cu $T/hisparse_test_resolve.cu $T/hisparse_test_attention.cu $K/hisparse_digest.cu \
  $K/hisparse_select.cu $K/hisparse_resolve.cu $K/hisparse_resolve_copy.cu $K/hisparse_mirror.cu \
  $K/attention_decode.cu $K/attention_prefill.cu >"$out/nvcc_hisparse.log" 2>&1 &
p1=$!
"$NVCC" "${F[@]}" -o build/quest_score/quest_score_bench $T/quest_score_bench.cu $K/hisparse_select.cu \
  >"$out/nvcc_bench.log" 2>&1 &
p2=$!
status=0
wait $p1 || { echo "nvcc hisparse_test failed (see $out/nvcc_hisparse.log)"; status=1; }
wait $p2 || { echo "nvcc quest_score_bench failed (see $out/nvcc_bench.log)"; status=1; }
[ $status = 0 ] || exit 1
timeout 300 build/quest_score/hisparse_test --quick --only select 2>&1 | tee "$out/select.log" || status=1
timeout 300 build/quest_score/quest_score_bench "$@" 2>&1 | tee "$out/bench.log" || status=1
exit $status
