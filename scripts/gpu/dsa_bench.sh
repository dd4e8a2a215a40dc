#!/usr/bin/env bash
# DSA HiSparse benchmarks on one H200 (issue 15), about 4 minutes of device time: GLM-5's
# per-layer shape cut to 8 layers and 16 routed experts, dummy weights, bf16 latent rows, block 16.
#  1. capacity (bench/dsa_capacity.ts): requests decoding at once without preemption, off / auto
#     / on, at 128K (12 GiB of device KV memory) and 1M tokens (40 GiB), beside `hisparse plan`;
#  2. throughput vs concurrency (bench/hisparse_throughput.ts --num-layers 8) at 32K and 128K,
#     off / auto / on, hit rate and H2D GB/s, with the benchmark-only selection overlap
#     p = 0.87 (the target: peak tok/s of on or auto >= 3x off's, batch-1 TPOT of auto >= 0.98x
#     off's), then on and auto alone at p = 0 and 0.93 at 128K (off does not depend on p).
# PHASES picks the steps: "capacity 32 128 other" (the default) is more than one device call's
# 10 minutes, so run it as two calls, e.g. PHASES="capacity 32" then PHASES="128 other".
# BUDGET_S: seconds per p = 0.87 sweep (default 200; a point it cuts reports 0 tok/s with a *).
# Prepare here: npm run build && npm run build:native && bash scripts/device/pack.sh
# Run there, carrying .device, dist and build/Release:
#   source .device/prelude.sh && bash scripts/gpu/dsa_bench.sh
# Prints each benchmark's table (markdown) and "dsa_bench: done" last; JSON and logs in $OUT
# (when set) or /tmp/hisparse-dsa-bench. Time goes mostly to pinning the host pools and to
# decode steps at large batches; lower --budget-s below to cut it.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-dsa-bench}"
mkdir -p "$out"
command -v node >/dev/null || { echo "node is not on PATH (source .device/prelude.sh first)"; exit 2; }
[ -f dist/bench/dsa_capacity.js ] || { echo "dist is missing (npm run build here, carry dist)"; exit 2; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1 | head -1
# Throughput runs one context at a time, each with the host pool that holds the most requests of
# that context in 8 GiB (what the engine's DSA default sizes for --max-model-len = the context;
# `hisparse plan --config <glm-5 cut to 8 layers> --kv-cache-gib 8 --context N
# --max-num-batched-tokens 8192` (the bench's chunk): 22.91 GiB at 32K (79 requests vs 22 dense),
# 30.61 GiB at 128K (27 vs 5; prefills stream since 662d68c)).
common=(--config configs/glm-5 --num-layers 8 --num-experts 16 --kv-budget-gib 8 --steps 24)
c32=(--contexts 32768 --host-pool-gib 22.91)
c128=(--contexts 131072 --host-pool-gib 30.61)
budget="${BUDGET_S:-200}"

phases="${PHASES:-capacity 32 128 other}"
has() { [[ " $phases " == *" $1 "* ]]; }

has capacity && echo "== capacity (128K: the engine's default host pool; 1M at 40 GiB: 60 GiB, the default would pin more than half the RAM; 1M at 8 GiB, below one dense request: the default)"
has capacity && timeout 300 node dist/bench/dsa_capacity.js --runs 131072:12:48,1048576:40:8:60,1048576:8:8 \
  --json "$out/dsa_capacity.json" 2>&1 | tee "$out/dsa_capacity.txt" | grep -vE '^\s*$'

for ctx in 32 128; do
  has "$ctx" || continue
  # off runs up to just past its capacity (23 at 32K, 5 at 128K): beyond it, it only preempts.
  if [ "$ctx" = 32 ]; then
    c=("${c32[@]}" --off-batches "32768:1,8,23"); b="32768:1,8,24,48,79"
  else
    c=("${c128[@]}" --off-batches "131072:1,4,5"); b="131072:1,4,16,24,27"
  fi
  echo "== throughput ${ctx}K, overlap p = 0.87"
  timeout $((budget + 60)) node dist/bench/hisparse_throughput.js "${common[@]}" "${c[@]}" --batches "$b" \
    --modes off,auto,on --overlap 0.87 --budget-s "$budget" --json "$out/dsa_throughput_${ctx}k_p087.json" 2>&1 |
    tee "$out/dsa_throughput_${ctx}k_p087.txt"
done

if has other; then
  for p in 0 0.93; do
    echo "== throughput, overlap p = $p (auto, on; 128K)"
    timeout 120 node dist/bench/hisparse_throughput.js "${common[@]}" "${c128[@]}" --batches "131072:1,24" \
      --modes auto,on --overlap "$p" --budget-s 60 --json "$out/dsa_throughput_p$p.json" 2>&1 |
      tee "$out/dsa_throughput_p$p.txt"
  done
fi
echo "dsa_bench: done"
