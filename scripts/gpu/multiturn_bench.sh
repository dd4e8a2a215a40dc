#!/usr/bin/env bash
# The multi-turn long-context workload (issue 19) on the H200: Llama-3.1-8B shape
# (configs/llama-3.1-8b), dummy weights, `hisparse bench serve --dataset multiturn` at 1, 8, 16
# and 32 concurrent conversations against three servers in turn:
#   off            --enable-hybrid-sparse off, no prefix caching (every turn prefills its history)
#   off+prefix     --enable-hybrid-sparse off --enable-prefix-caching
#   auto+prefix    --enable-hybrid-sparse auto --enable-prefix-caching --host-pool-gib $HOST_GIB
# Same --gpu-memory-utilization for all three (a small device KV budget, so that 32 long
# conversations do not all fit densely: where `off` must preempt, `auto` spills to the host).
# Reduced from the vLLM blog's shape (13 turns, 74,160-token first turn, 753-token later turns,
# 220 output tokens) to finish in under 8 minutes: by default 6 turns, a 6,144-token first turn,
# 753-token later turns, 128 output tokens (env FIRST_LEN, TURNS, TURN_LEN, OUT_LEN, CONVS,
# GPU_UTIL, HOST_GIB override them). Each bench run is capped (RUN_LIMIT_S, default 110 s) and
# none starts after DEADLINE_S (450 s); a run cut short shows "no result" in the table.
# Prepare here: npm run build && npm run build:native && bash ../shared/device/prepare.sh
# Run there (carry .device, dist, build/Release):
#   source .device/prelude.sh && bash scripts/gpu/multiturn_bench.sh
# Prints the servers' start-up lines (pools), then one markdown table; JSON and logs in $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/multiturn-bench}"
mkdir -p "$out"
FIRST_LEN="${FIRST_LEN:-6144}"
TURNS="${TURNS:-6}"
TURN_LEN="${TURN_LEN:-753}"
OUT_LEN="${OUT_LEN:-128}"
CONVS="${CONVS:-1,8,16,32}"
GPU_UTIL="${GPU_UTIL:-0.26}"
HOST_GIB="${HOST_GIB:-32}"
RUN_LIMIT_S="${RUN_LIMIT_S:-110}"
DEADLINE_S="${DEADLINE_S:-450}"  # no new bench run starts after this many seconds in all
PORT="${PORT:-8123}"
CLI="node dist/src/cli/main.js"
[ -f dist/src/cli/main.js ] || { echo "multiturn_bench.sh: dist is missing (npm run build here, carry dist)" >&2; exit 2; }
start_all=$(date +%s)

# serve LABEL FLAGS...: starts a server, waits for /health (at most 180 s), runs the sweep, stops it.
serve() {
  local label=$1; shift
  echo "== $label: hisparse serve $*"
  $CLI serve --model configs/llama-3.1-8b --load-format dummy --device cuda --port "$PORT" \
    --max-model-len 16384 --max-num-batched-tokens 8192 --max-num-seqs 64 \
    --gpu-memory-utilization "$GPU_UTIL" --stats-interval 10 "$@" >"$out/serve_$label.log" 2>&1 &
  local pid=$!
  local ok=0
  for _ in $(seq 1 180); do
    if node -e "fetch('http://127.0.0.1:$PORT/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"; then ok=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  grep -iE "KV cache|HiSparse|blocks|listening|error" "$out/serve_$label.log" | head -6
  if [ "$ok" -eq 1 ]; then
    for c in ${CONVS//,/ }; do
      local left=$(( DEADLINE_S - ($(date +%s) - start_all) ))
      if [ "$left" -lt 20 ]; then echo "   $c conversations: skipped (deadline)"; continue; fi
      [ "$left" -lt "$RUN_LIMIT_S" ] || left=$RUN_LIMIT_S
      timeout "$left" $CLI bench serve --base-url "http://127.0.0.1:$PORT" --dataset multiturn \
        --multiturn-conversations "$c" --multiturn-turns "$TURNS" --multiturn-first-len "$FIRST_LEN" \
        --multiturn-turn-len "$TURN_LEN" --output-len "$OUT_LEN" --ignore-eos --temperature 0 \
        --save-result --result-dir "$out" --result-filename "${label}_c$c.json" --label "$label" \
        >"$out/bench_${label}_c$c.log" 2>&1
      echo "   $c conversations: exit $? ($(grep -E 'Median TTFT of turns' "$out/bench_${label}_c$c.log" | tail -1))"
    done
  else
    echo "   the server did not come up; see $out/serve_$label.log"
  fi
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

serve off --enable-hybrid-sparse off
serve off_prefix --enable-hybrid-sparse off --enable-prefix-caching
serve auto_prefix --enable-hybrid-sparse auto --enable-prefix-caching --host-pool-gib "$HOST_GIB"

args=()
for label in off off_prefix auto_prefix; do
  for c in ${CONVS//,/ }; do args+=("$label=$out/${label}_c$c.json"); done
done
echo
node dist/scripts/gpu/multiturn_table.js "${args[@]}" | tee "$out/table.md"
echo "total $(( $(date +%s) - start_all )) s"
