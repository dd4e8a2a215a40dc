#!/usr/bin/env bash
# Every figure of bench/results/plan_glm5_tp8.md: `hisparse plan` for GLM-5 and DeepSeek-V3.2 on
# 8×H200 (--tensor-parallel-size 8), bf16 and fp8 KV, 80K / 128K / 1M tokens, and the runs under
# vLLM's calculator's assumptions. CPU only, a few seconds. Writes bench/results/plan_glm5_tp8/*.txt.
# Usage: bash bench/plan_glm5_tp8.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=bench/results/plan_glm5_tp8
mkdir -p "$OUT"
plan() { local name=$1; shift; { echo "\$ hisparse plan $*"; node bin/hisparse.js plan "$@" 2>&1 || true; } >"$OUT/$name.txt"; }
# 1M-position variant with 21 indexer layers (the layout vLLM's calculator's block bytes imply):
# made from configs/glm-5 by bench/results/plan_glm5_tp8/make_variant.mjs.
IS21=$OUT/glm-5-is21-1m
node "$OUT/make_variant.mjs" configs/glm-5 "$IS21"
H200="--gpu-mem-gib 140.4 --tensor-parallel-size 8 --block-size 64"
for model in glm-5 deepseek-v3.2; do
  for kv in bf16 fp8; do
    for ctx in 81920 131072; do
      plan "${model}_h200_tp8_w-fp8_kv-${kv}_${ctx}" --config configs/$model $H200 --weights-dtype fp8 --kv-cache-dtype $kv --context $ctx
    done
  done
done
plan glm-5_h200_tp8_w-bf16_kv-bf16_131072 --config configs/glm-5 $H200 --weights-dtype bf16 --context 131072
plan glm-5_h200_tp8_1048576_refused --config configs/glm-5 $H200 --weights-dtype fp8 --kv-cache-dtype fp8 --context 1048576
for kv in bf16 fp8; do
  plan "glm-5-is21-1m_h200_tp8_w-fp8_kv-${kv}_1048576" --config "$IS21" $H200 --weights-dtype fp8 --kv-cache-dtype $kv --context 1048576
done
# vLLM's calculator's assumptions: 141e9 B per GPU (131.32 GiB), 0.92 utilization, 15 GiB runtime
# reserve, its KV budget 17.8 GiB per GPU, 64-token blocks, hot buffer 4096 rows + 2 tail pages,
# no dense layers, 21 indexer layers.
CALC="--tensor-parallel-size 8 --block-size 64"  # DSA settings as the engine derives them: no sinks, a one-page window, no dense layers
plan calc_budget_glm-5 --config configs/glm-5 $CALC --gpu-mem-gib 131.32 --gpu-memory-utilization 0.92 --reserve-gib 15 --weights-dtype fp8 --kv-cache-dtype fp8 --context 81920
for kv in fp8 bf16; do
  for ctx in 81920 131072 1048576; do
    plan "calc_is21_kv-${kv}_${ctx}" --config "$IS21" $CALC --kv-cache-gib 17.8 --kv-cache-dtype $kv --context $ctx
    plan "calc_glm-5_kv-${kv}_${ctx}" --config "$IS21/../glm-5-1m" $CALC --kv-cache-gib 17.8 --kv-cache-dtype $kv --context $ctx
  done
done
echo "wrote $(ls "$OUT"/*.txt | wc -l) files to $OUT"
