#!/usr/bin/env bash
# Soak test of `hisparse serve` on the CPU backend (ref-small), loopback only, bounded in time
# and in request count:
#   1. start the server on 127.0.0.1 and measure its capacity (requests/s at --max-num-seqs
#      concurrent requests) with `hisparse bench serve`;
#   2. ROUNDS rounds of ROUND_SECONDS each: `bench serve` offers 2x that capacity (its request
#      count is what the server can serve in one round at capacity, so every round is
#      saturated and then drains), while scripts/soak_client.ts sends bad inputs (malformed
#      JSON, text/plain and form bodies, prompts over the length bound, over the body limit,
#      bad parameters and URLs) and drops streamed and non-streamed requests mid-way;
#   3. after each round, once the server is idle: KV blocks in use (must be 0) and its RSS.
# It fails (exit 1) unless every bench request succeeded, every bad input got its expected
# status in OpenAI's shape, no KV block leaked, and the RSS is stable: after the last round it
# is within RSS_GROWTH_PCT of the RSS after the middle round (round ceil(R/2)). The first half
# is the warm-up (V8 sizes its heaps, tokenizer threads start, code is compiled): a leak keeps
# growing through the second half, a warm-up does not.
#
# Usage: scripts/soak.sh [--minutes M] [--rounds R] [--port P] [--out DIR] [--summary FILE]
#   defaults: 15 minutes, 5 rounds, port 8123, out .bench-tmp/soak-<time>, no summary file.
set -euo pipefail

MINUTES=15
ROUNDS=5
PORT=8123
OUT=""
SUMMARY=""
MAX_NUM_SEQS=8
MAX_MODEL_LEN=1024
INPUT_LEN=256
OUTPUT_LEN=64
RSS_GROWTH_PCT=10
# Hard caps, whatever the arguments: no loop of this script runs unbounded.
MAX_MINUTES=120
MAX_REQUESTS_PER_ROUND=20000
CHAOS_MAX_PER_ROUND=2000

while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) MINUTES="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --summary) SUMMARY="$2"; shift 2 ;;
    *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ "$MINUTES" -gt "$MAX_MINUTES" ] || [ "$MINUTES" -lt 1 ] || [ "$ROUNDS" -lt 1 ]; then
  echo "soak.sh: --minutes must be 1..$MAX_MINUTES and --rounds >= 1" >&2
  exit 2
fi

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-.bench-tmp/soak-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
URL="http://127.0.0.1:$PORT"
HISPARSE=(node "$ROOT/bin/hisparse.js")
CLIENT=(node --import tsx "$ROOT/scripts/soak_client.ts")
ROUND_SECONDS=$((MINUTES * 60 / ROUNDS))
log() { echo "[soak $(date +%H:%M:%S)] $*"; }

"${HISPARSE[@]}" serve --device cpu --host 127.0.0.1 --port "$PORT" --max-model-len "$MAX_MODEL_LEN" \
  --max-num-seqs "$MAX_NUM_SEQS" --stats-interval 30 >"$OUT/server.log" 2>&1 &
SERVER_PID=$!
cleanup() { kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 1 240); do
  curl -sf "$URL/health" >/dev/null 2>&1 && break
  kill -0 "$SERVER_PID" 2>/dev/null || { echo "soak.sh: the server exited:" >&2; cat "$OUT/server.log" >&2; exit 1; }
  sleep 0.5
done
curl -sf "$URL/health" >/dev/null || { echo "soak.sh: the server did not become healthy" >&2; exit 1; }
log "server pid $SERVER_PID on $URL (log: $OUT/server.log)"

BENCH_COMMON=(bench serve --base-url "$URL" --dataset-name random --input-len "$INPUT_LEN"
  --output-len "$OUTPUT_LEN" --ignore-eos --save-result --result-dir "$OUT")

# 1. Capacity: requests/s with --max-num-seqs requests in flight.
"${HISPARSE[@]}" "${BENCH_COMMON[@]}" --num-prompts $((MAX_NUM_SEQS * 3)) --num-warmups 2 \
  --max-concurrency "$MAX_NUM_SEQS" --result-filename capacity.json >"$OUT/capacity.txt" 2>&1
CAPACITY=$("${CLIENT[@]}" throughput "$OUT/capacity.json" | node -e 'process.stdin.on("data", d => console.log(JSON.parse(d).requestThroughput))')
RATE=$(node -e "console.log((2 * $CAPACITY).toFixed(3))")
PER_ROUND=$(node -e "console.log(Math.min($MAX_REQUESTS_PER_ROUND, Math.max(1, Math.ceil($CAPACITY * $ROUND_SECONDS))))")
log "capacity $CAPACITY req/s; $ROUNDS rounds of ${ROUND_SECONDS} s at $RATE req/s offered, $PER_ROUND requests each"

TOTAL_REQUESTS=0
TOTAL_FAILED=0
TOTAL_CHAOS=0
TOTAL_UNEXPECTED=0
TOTAL_LEAKED=0
ROWS=()
FIRST_RSS=""
MID_RSS=""
LAST_RSS=""
MID_ROUND=$(((ROUNDS + 1) / 2))
for r in $(seq 1 "$ROUNDS"); do
  log "round $r/$ROUNDS"
  "${CLIENT[@]}" chaos "$URL" "$ROUND_SECONDS" "$CHAOS_MAX_PER_ROUND" >"$OUT/chaos$r.json" 2>"$OUT/chaos$r.err" &
  CHAOS_PID=$!
  "${HISPARSE[@]}" "${BENCH_COMMON[@]}" --num-prompts "$PER_ROUND" --request-rate "$RATE" \
    --max-concurrency $((MAX_NUM_SEQS * 3)) --seed "$r" --result-filename "round$r.json" >"$OUT/round$r.txt" 2>&1
  wait "$CHAOS_PID"
  BENCH=$("${CLIENT[@]}" throughput "$OUT/round$r.json")
  CHAOS=$(cat "$OUT/chaos$r.json")
  PROBE=$("${CLIENT[@]}" probe "$URL" "$SERVER_PID")
  read -r COMPLETED FAILED SENT UNEXPECTED LEAKED RSS < <(node -e '
    const [b, c, p] = process.argv.slice(1).map((s) => JSON.parse(s));
    console.log(b.completed, b.failed, c.sent, c.unexpected, p.leakedBlocks, p.rssMiB);' "$BENCH" "$CHAOS" "$PROBE")
  TOTAL_REQUESTS=$((TOTAL_REQUESTS + COMPLETED + FAILED))
  TOTAL_FAILED=$((TOTAL_FAILED + FAILED))
  TOTAL_CHAOS=$((TOTAL_CHAOS + SENT))
  TOTAL_UNEXPECTED=$((TOTAL_UNEXPECTED + UNEXPECTED))
  TOTAL_LEAKED=$((TOTAL_LEAKED + LEAKED))
  FIRST_RSS="${FIRST_RSS:-$RSS}"
  [ "$r" -eq "$MID_ROUND" ] && MID_RSS="$RSS"
  LAST_RSS="$RSS"
  ROWS+=("| $r | $((COMPLETED + FAILED)) | $FAILED | $SENT | $UNEXPECTED | $LEAKED | $RSS |")
  log "round $r: bench $COMPLETED ok / $FAILED failed; chaos $SENT sent / $UNEXPECTED unexpected; leaked blocks $LEAKED; RSS $RSS MiB"
  [ "$UNEXPECTED" -gt 0 ] && node -e 'console.log(JSON.parse(process.argv[1]).failures.join("\n"))' "$CHAOS" | sed 's/^/  /'
done

GROWTH=$(node -e "console.log((100 * ($LAST_RSS - $MID_RSS) / $MID_RSS).toFixed(1))")
RSS_OK=$(node -e "console.log($GROWTH <= $RSS_GROWTH_PCT ? 1 : 0)")
{
  echo "soak: $MINUTES min, $ROUNDS rounds, capacity $CAPACITY req/s, offered $RATE req/s (2x), $PER_ROUND bench requests per round"
  echo ""
  echo "| round | bench requests | failed | bad inputs + disconnects | unexpected | leaked KV blocks | server RSS (MiB) |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  echo ""
  echo "totals: $TOTAL_REQUESTS bench requests, $TOTAL_FAILED failed; $TOTAL_CHAOS bad inputs and disconnects, $TOTAL_UNEXPECTED unexpected answers; $TOTAL_LEAKED leaked KV blocks; RSS $FIRST_RSS MiB after round 1, $MID_RSS after round $MID_ROUND, $LAST_RSS after round $ROUNDS ($GROWTH% over the second half, limit $RSS_GROWTH_PCT%)"
} | tee "$OUT/summary.md"
[ -n "$SUMMARY" ] && cp "$OUT/summary.md" "$SUMMARY"

if [ "$TOTAL_FAILED" -ne 0 ] || [ "$TOTAL_UNEXPECTED" -ne 0 ] || [ "$TOTAL_LEAKED" -ne 0 ] || [ "$RSS_OK" -ne 1 ]; then
  echo "soak: FAILED" >&2
  exit 1
fi
echo "soak: OK"
