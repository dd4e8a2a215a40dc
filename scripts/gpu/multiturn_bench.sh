#!/usr/bin/env bash
# The multi-turn long-context workload (issue 19) on the H200 in one device call of at most
# ~5 minutes: Llama-3.1-8B shape (configs/llama-3.1-8b), dummy weights,
# `hisparse bench serve --dataset multiturn` against three servers, one after another (never two
# at once: concurrent servers would share the SMs and each other's timings):
#   off_prefix    --enable-hybrid-sparse off --enable-prefix-caching        at CONVS (1,8,16,32)
#   auto_prefix   --enable-hybrid-sparse auto --enable-prefix-caching
#                 --host-pool-gib HOST_GIB                                   at CONVS
#   off           --enable-hybrid-sparse off, no prefix caching (every turn prefills its whole
#                 history: the costliest runs, so only at CONVS_OFF = 1,8, and last)
#   auto_prefix_lp  (not in the default SWEEPS) auto_prefix with vLLM's scheduler knobs for short
#                 prefills: --long-prefill-token-threshold LP_THRESHOLD (1024) and
#                 --max-num-batched-tokens LP_MAX_BATCHED (default MAX_BATCHED), at CONVS;
#                 auto_prefix_lpT and auto_prefix_lpT_bB name them in the sweep instead
#                 (auto_prefix_lp512_b2048: threshold 512, budget 2048), so one call compares several
# Every server gets --max-num-batched-tokens MAX_BATCHED (8192) and, when LONG_PREFILL > 0,
# --long-prefill-token-threshold LONG_PREFILL (default 0 = off); auto_prefix_lp's own values win.
# Every server gets the same --gpu-memory-utilization (GPU_UTIL 0.30: a device KV budget of
# about 24 GiB beside the 15 GB of weights), small enough that the longest conversations do not
# all fit densely: where `off` must preempt, `auto` spills pages to the host tier. `hisparse plan
# --model configs/llama-3.1-8b --kv-cache-gib 24 --context 13600 --host-pool-gib 50` gives the
# arithmetic: 14 conversations of the final length dense, 32 with HiSparse.
# Before each sweep, multiturn_probe measures on the same idle server the TTFT of a cold prefill
# of TURN_LEN (753) and 1024 tokens, and (prefix servers) the preheat figure: a PREHEAT_DOC
# (32768)-token document through POST /v1/preheat, then the first question's TTFT against the
# cold 1024-token prefill.
# The shape is cut from the vLLM blog's (13 turns, 74,160-token first turn, 753-token later turns,
# 220 output tokens) to fit the budget: 13 turns, a FIRST_LEN (4096)-token first turn, TURN_LEN
# (753)-token later turns, OUT_LEN (32) output tokens; the final context is ~13.5K tokens. Env
# FIRST_LEN TURNS TURN_LEN OUT_LEN CONVS CONVS_OFF GPU_UTIL HOST_GIB PREHEAT_DOC MAX_MODEL_LEN
# MAX_BATCHED LONG_PREFILL LP_THRESHOLD LP_MAX_BATCHED override them; SWEEPS (default
# "off_prefix auto_prefix off"; e.g. "auto_prefix auto_prefix_lp") picks and orders the servers;
# MODEL, DEVICE, LOAD_FORMAT and EXTRA_SERVE_FLAGS serve the CPU smoke run:
#   MODEL=ref-small DEVICE=cpu LOAD_FORMAT=auto EXTRA_SERVE_FLAGS="--cpu-kv-cache-gib 0.2" \
#   FIRST_LEN=256 TURNS=3 TURN_LEN=64 OUT_LEN=4 CONVS=1,2 CONVS_OFF=1 HOST_GIB=0.1 \
#   PREHEAT_DOC=512 PREHEAT_REF=256 QUESTION_LEN=32 MAX_MODEL_LEN=2048 bash scripts/gpu/multiturn_bench.sh
# Each bench run is capped (RUN_LIMIT_S, default 75 s; a probe PROBE_LIMIT_S, 40 s), none starts after DEADLINE_S (250 s from
# the start; raise it, and the call's timeout_s, for more than three sweeps: a prefix sweep
# takes ~110 s on the H200) and a skipped or cut run shows "no result" in the table.
# Prepare here:  npm run build && npm run build:native && bash scripts/device/pack.sh
# Run there (carry .device, dist, build/Release; one call, timeout_s 360):
#   bash scripts/device/unpack.sh && source .device/prelude.sh && bash scripts/gpu/multiturn_bench.sh
# Prints each server's pools and each run's line, then the tables (per run also the TTFT split the
# server measured, over all turns: mean queue time and mean prefill time from its /metrics, beside
# the client's mean TTFT). $OUT receives table.md,
# run.log (this output) and results.tar.gz (result JSONs, probe JSONs, server and bench logs).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT="${OUT:-/tmp/multiturn-bench}"
mkdir -p "$OUT"
work="$(mktemp -d /tmp/multiturn.XXXXXX)"
exec > >(tee "$OUT/run.log") 2>&1
MODEL="${MODEL:-configs/llama-3.1-8b}"
DEVICE="${DEVICE:-cuda}"
LOAD_FORMAT="${LOAD_FORMAT:-dummy}"
EXTRA_SERVE_FLAGS="${EXTRA_SERVE_FLAGS:-}"
FIRST_LEN="${FIRST_LEN:-4096}"
TURNS="${TURNS:-13}"
TURN_LEN="${TURN_LEN:-753}"
OUT_LEN="${OUT_LEN:-32}"
CONVS="${CONVS:-1,8,16,32}"
CONVS_OFF="${CONVS_OFF:-1,8}"
GPU_UTIL="${GPU_UTIL:-0.30}"
HOST_GIB="${HOST_GIB:-50}"
PREHEAT_DOC="${PREHEAT_DOC:-32768}"
QUESTION_LEN="${QUESTION_LEN:-128}"
PREHEAT_REF="${PREHEAT_REF:-1024}"  # the cold prefill the preheated question is compared with
MAX_MODEL_LEN="${MAX_MODEL_LEN:-34816}"
RUN_LIMIT_S="${RUN_LIMIT_S:-75}"
PROBE_LIMIT_S="${PROBE_LIMIT_S:-40}"
DEADLINE_S="${DEADLINE_S:-250}"
PORT="${PORT:-8123}"
SWEEPS="${SWEEPS:-off_prefix auto_prefix off}"
MAX_BATCHED="${MAX_BATCHED:-8192}"
LONG_PREFILL="${LONG_PREFILL:-0}"
LP_THRESHOLD="${LP_THRESHOLD:-1024}"
LP_MAX_BATCHED="${LP_MAX_BATCHED:-$MAX_BATCHED}"
sched_flags="--max-num-batched-tokens $MAX_BATCHED"
[ "$LONG_PREFILL" -gt 0 ] && sched_flags="$sched_flags --long-prefill-token-threshold $LONG_PREFILL"
CLI="node dist/src/cli/main.js"
URL="http://127.0.0.1:$PORT"
[ -f dist/src/cli/main.js ] || { echo "multiturn_bench.sh: dist is missing (npm run build here, carry dist)" >&2; exit 2; }
start_all=$(date +%s)
elapsed() { echo $(( $(date +%s) - start_all )); }
echo "multiturn_bench: $MODEL ($LOAD_FORMAT) on $DEVICE; $TURNS turns, first $FIRST_LEN, later +$TURN_LEN, output $OUT_LEN; gpu util $GPU_UTIL, host pool $HOST_GIB GiB; every server: $sched_flags"

# sweep LABEL CONVS PROBE_FLAGS FLAGS...: starts a server, waits for /health (at most 120 s or the deadline),
# runs the probe and the multi-turn runs, stops the server.
sweep() {
  local label=$1 convs=$2 probe=$3; shift 3
  local left=$(( DEADLINE_S - $(elapsed) ))
  if [ "$left" -lt 20 ]; then echo "== $label: skipped (deadline)"; return; fi
  echo "== $label: hisparse serve $* (t=$(elapsed) s)"
  # shellcheck disable=SC2086
  $CLI serve --model "$MODEL" --load-format "$LOAD_FORMAT" --device "$DEVICE" --port "$PORT" \
    --max-model-len "$MAX_MODEL_LEN" $sched_flags --max-num-seqs 64 \
    --gpu-memory-utilization "$GPU_UTIL" --stats-interval 10 $EXTRA_SERVE_FLAGS "$@" \
    >"$work/serve_$label.log" 2>&1 &
  local pid=$! ok=0 t0
  t0=$(date +%s)
  for _ in $(seq 1 240); do
    if node -e "fetch('$URL/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"; then ok=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    [ "$(elapsed)" -lt "$DEADLINE_S" ] || break
    sleep 0.5
  done
  echo "   up in $(( $(date +%s) - t0 )) s: $(grep -iE 'KV cache|host pool|HiSparse|serving' "$work/serve_$label.log" | head -3 | cut -c1-400 | tr '\n' ' ')"
  if [ "$ok" -ne 1 ]; then
    echo "   the server did not come up:"; tail -5 "$work/serve_$label.log"
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; return
  fi
  # shellcheck disable=SC2086
  left=$(( DEADLINE_S - $(elapsed) ))
  [ "$left" -lt "$PROBE_LIMIT_S" ] || left=$PROBE_LIMIT_S
  [ "$left" -ge 1 ] || left=1
  timeout "$left" node dist/scripts/gpu/multiturn_probe.js --base-url "$URL" --prefill-lens "$TURN_LEN,$PREHEAT_REF" \
    $probe --json "$work/probe_$label.json" 2>&1 | sed 's/^/   /'
  for c in ${convs//,/ }; do
    left=$(( DEADLINE_S - $(elapsed) ))
    if [ "$left" -lt 10 ]; then echo "   $c conversations: skipped (deadline)"; continue; fi
    [ "$left" -lt "$RUN_LIMIT_S" ] || left=$RUN_LIMIT_S
    local t1 rc
    t1=$(date +%s)
    timeout "$left" $CLI bench serve --base-url "$URL" --dataset multiturn \
      --multiturn-conversations "$c" --multiturn-turns "$TURNS" --multiturn-first-len "$FIRST_LEN" \
      --multiturn-turn-len "$TURN_LEN" --output-len "$OUT_LEN" --ignore-eos --temperature 0 \
      --save-result --result-dir "$work" --result-filename "${label}_c$c.json" --label "$label" \
      >"$work/bench_${label}_c$c.log" 2>&1
    rc=$?
    echo "   $c conversations: exit $rc in $(( $(date +%s) - t1 )) s ($(grep -E 'Median TTFT of turns|Preemptions|Mean (queue|prefill) time' "$work/bench_${label}_c$c.log" | sed 's/^ *//' | tr '\n' ' '))"
  done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

heat="--preheat-doc $PREHEAT_DOC --question-len $QUESTION_LEN"
for s in $SWEEPS; do
  case $s in
    off_prefix) sweep off_prefix "$CONVS" "$heat" --enable-hybrid-sparse off --enable-prefix-caching ;;
    auto_prefix) sweep auto_prefix "$CONVS" "$heat" --enable-hybrid-sparse auto --enable-prefix-caching \
      --host-pool-gib "$HOST_GIB" ;;
    auto_prefix_lp*)
      # auto_prefix_lp[T][_bB]: threshold T (default LP_THRESHOLD), budget B (default LP_MAX_BATCHED).
      if [[ $s =~ ^auto_prefix_lp([0-9]*)(_b([0-9]+))?$ ]]; then
        sweep "$s" "$CONVS" "$heat" --enable-hybrid-sparse auto --enable-prefix-caching --host-pool-gib "$HOST_GIB" \
          --long-prefill-token-threshold "${BASH_REMATCH[1]:-$LP_THRESHOLD}" \
          --max-num-batched-tokens "${BASH_REMATCH[3]:-$LP_MAX_BATCHED}"
      else echo "multiturn_bench.sh: bad sweep $s (auto_prefix_lp, auto_prefix_lpT, auto_prefix_lpT_bB)" >&2; fi ;;
    off) sweep off "$CONVS_OFF" "" --enable-hybrid-sparse off ;;
    *) echo "multiturn_bench.sh: unknown sweep $s (off_prefix, auto_prefix, auto_prefix_lp, off)" >&2 ;;
  esac
done

args=(--turn-ref "$TURN_LEN" --preheat-ref "$PREHEAT_REF")
for label in $SWEEPS; do
  list=$CONVS; [ "$label" = off ] && list=$CONVS_OFF
  for c in ${list//,/ }; do args+=("$label=$work/${label}_c$c.json"); done
  args+=("probe:$label=$work/probe_$label.json")
done
echo
node dist/scripts/gpu/multiturn_table.js "${args[@]}" | tee "$OUT/table.md"
echo "total $(elapsed) s"
tar -czf "$OUT/results.tar.gz" -C "$work" . && rm -rf "$work"
