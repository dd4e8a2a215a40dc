#!/usr/bin/env bash
# ref-base's hot-buffer hit rate in long decodes on CUDA (issue 18: what the throughput
# benchmark's selection overlap p stands for), a GPU call of about a minute. Prepare here:
#   npm run build && npm run build:native && bash ../shared/device/prepare.sh --model ref-base
# run there, carrying .device, dist and build/Release:
#   source .device/prelude.sh && bash scripts/gpu/quest_hit_rate.sh
# Two windows of 8192 tokens of C headers (/usr/include/*.h, else this repository's native/
# sources): 6144-token prompts, then 2048 decode steps each with topk 1024 (1/8), forced (the
# text's continuation) and greedy. Prints one line per run and, last,
# "hit rate: forced X%, greedy Y%". Log in $OUT (or /tmp/quest-hit-rate).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/quest-hit-rate}"
mkdir -p "$out"
model="${HISPARSE_MODELS:-$PWD/.device/models}/ref-base"
[ -f "$model/config.json" ] || model="$PWD/../shared/models/ref-base"
[ -f "$model/config.json" ] || { echo "ref-base not found (carry it: prepare.sh --model ref-base)"; exit 2; }
if ls /usr/include/*.h >/dev/null 2>&1; then cat /usr/include/*.h >"$out/text.txt"; else cat native/kernels/* native/addon/* native/tests/* >"$out/text.txt"; fi
timeout 300 node dist/scripts/gpu/quest_hit_rate.js --model "$model" --text "$out/text.txt" \
  --ctx "${CTX:-8192}" --decode "${DECODE:-2048}" --windows "${WINDOWS:-2}" 2>&1 | tee "$out/hit_rate.log"
