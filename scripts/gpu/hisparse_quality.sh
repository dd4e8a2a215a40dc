#!/usr/bin/env bash
# HiSparse quality on CUDA (issue 6): ref-base passkey at 4K and 8K tokens with topk = 1/8 of the
# context (40 documents each: 5 depths x 8 trials, 1-4 needles), dense vs sparse, and perplexity
# through the decode path on long real text at the same compression. GPU machine, ref-base carried:
#   bash scripts/device/pack.sh --model ref-base   # here: .device/models/ref-base
#   bash scripts/device/unpack.sh && source .device/prelude.sh && bash scripts/gpu/hisparse_quality.sh
# Filler: /usr/share/common-licenses when present, else this repository's Markdown documents.
# Perplexity text: C headers under /usr/include (the model's training mix has C), else this
# repository's native/ sources. Tables and JSON in $OUT (or /tmp/hisparse-quality).
# BLOCK=8 sets the KV block (page) size (default 16).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-quality}"
mkdir -p "$out"
model="${HISPARSE_MODELS:-$PWD/.device/models}/ref-base"
[ -f "$model/config.json" ] || model="$PWD/../shared/models/ref-base"
[ -f "$model/config.json" ] || { echo "ref-base not found (carry it: pack.sh --model ref-base)"; exit 2; }
filler=()
if [ ! -f /usr/share/common-licenses/GPL-3 ]; then
  find . -name '*.md' -not -path './node_modules/*' -not -path './.device/*' | sort | xargs cat >"$out/filler.txt"
  filler=(--filler-file "$out/filler.txt")
fi
if ls /usr/include/*.h >/dev/null 2>&1; then cat /usr/include/*.h >"$out/text.txt"; else cat native/kernels/* native/addon/* native/tests/* >"$out/text.txt"; fi
common=(--model "$model" --device cuda --block-size "${BLOCK:-16}" --max-model-len 16384 --num-gpu-blocks-override 65536)
sparse() { echo "topk$1: --enable-hybrid-sparse on --host-pool-gib 8 --hybrid-sparse-topk $1 --hisparse-config '{\"min_sparse_tokens\":0,\"device_buffer_tokens\":$(( $1 * 2 ))}'"; }
for n in 4096 8192; do
  k=$(( n / 8 ))
  timeout 900 node bin/hisparse.js eval needle "${common[@]}" "${filler[@]}" --lengths "$n" --depths 5 --trials 8 \
    --needles 1-4 --compare dense "$(sparse $k)" --json "$out/needle_$n.json" 2>&1 | tee "$out/needle_$n.log"
  timeout 900 node bin/hisparse.js eval ppl "${common[@]}" --file "$out/text.txt" --ctx "$n" --prefix-tokens $(( n * 3 / 4 )) \
    --max-windows 4 --compare dense "$(sparse $k)" --json "$out/ppl_$n.json" 2>&1 | tee "$out/ppl_$n.log"
done
