#!/usr/bin/env bash
# HiSparse quality on CUDA (issue 6, issue 18 item 4): ref-base passkey at 4K and 8K tokens with
# topk = 1/8 of the context (TRIALS x 5 depths documents each, 1-4 needles; TRIALS=8 gives 40),
# dense vs Quest with the engine defaults (sinks topk/16, window topk/8, one bf16 digest per page)
# vs Quest with 4-token fp8 sub-page digests (digest_tokens 4, digest_dtype fp8); and perplexity through the decode path
# on long real text at the same compression, plus dense with --kv-cache-dtype fp8 (target: within
# 0.5% of bf16). One device call, about 4 minutes on an H200. GPU machine, ref-base carried:
#   bash scripts/device/pack.sh --model ref-base   # here: .device/models/ref-base
#   bash scripts/device/unpack.sh && source .device/prelude.sh && bash scripts/gpu/hisparse_quality.sh
# Filler: /usr/share/common-licenses when present, else this repository's Markdown documents.
# Perplexity text: C headers under /usr/include (the model's training mix has C), else this
# repository's native/ sources. Tables and JSON in $OUT (or /tmp/hisparse-quality).
# BLOCK=8 sets the KV block (page) size (default 16); TRIALS (default 8) documents per depth;
# LENGTHS (default "4096 8192"); PPL_WINDOWS (default 4) perplexity windows per length; NEEDLE=0
# skips the passkey runs; PPL_VARIANTS=dense_fp8 measures only dense and fp8 KV (the fp8 target
# on more text); PPL_VARIANTS=dense_fp8_calib adds fp8 KV with --calculate-kv-scales (vLLM's
# per-layer k/v scales from the first batch; bench/results/fp8_kv_scales_cpu.md), as does "all";
# PPL_TIMEOUT (default 240) seconds per perplexity run.
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
# sparse NAME TOPK [EXTRA_JSON]: a --compare variant, Quest at TOPK with the engine's derived sink/window.
sparse() { echo "$1: --enable-hybrid-sparse on --host-pool-gib 8 --hybrid-sparse-topk $2 --hisparse-config '{\"min_sparse_tokens\":0,\"device_buffer_tokens\":$(( $2 * 2 ))${3:-}}'"; }
for n in ${LENGTHS:-4096 8192}; do
  k=$(( n / 8 ))
  # Engine default (one bf16 digest per page), 4-token sub-page digests in fp8 (the quality
  # setting) and in bf16.
  quest=("$(sparse quest$k $k)" "$(sparse quest${k}_dt4fp8 $k ',"digest_tokens":4,"digest_dtype":"fp8"')"
    "$(sparse quest${k}_dt4 $k ',"digest_tokens":4')")
  [ "${NEEDLE:-1}" = 0 ] || timeout 240 node bin/hisparse.js eval needle "${common[@]}" "${filler[@]}" --lengths "$n" --depths 5 --trials "${TRIALS:-8}" \
    --needles 1-4 --compare dense "${quest[0]}" "${quest[1]}" \
    --json "$out/needle_$n.json" 2>&1 | tee "$out/needle_$n.log"
  fp8=("fp8: --kv-cache-dtype fp8" "fp8_calib: --kv-cache-dtype fp8 --calculate-kv-scales")
  case "${PPL_VARIANTS:-all}" in
    dense_fp8) quest=(); fp8=("${fp8[0]}") ;;
    dense_fp8_calib) quest=() ;;
  esac
  timeout "${PPL_TIMEOUT:-240}" node bin/hisparse.js eval ppl "${common[@]}" --file "$out/text.txt" --ctx "$n" --prefix-tokens $(( n * 3 / 4 )) \
    --max-windows "${PPL_WINDOWS:-4}" --compare dense "${fp8[@]}" "${quest[@]}" \
    --json "$out/ppl_$n.json" 2>&1 | tee "$out/ppl_$n.log"
done
