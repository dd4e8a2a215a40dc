#!/usr/bin/env bash
# The peer benchmark on the GPU machine (issue 20 item 4; bench/peers/README.md): node-llama-cpp
# 3.21.1 on a GGUF of the Llama-3.1-8B shape, then hisparse (bench/cuda_bench.ts) on the same
# shapes, one after the other on the same GPU, then the table of both with the ratio.
#
#   bash scripts/gpu/peers_bench.sh stash      # calls carrying .peer/kit/pN: keep the parts in
#                                              # /tmp/peers/parts, start writing the GGUF (setsid)
#   source .device/prelude.sh && bash scripts/gpu/peers_bench.sh   # last call: everything below
#
# Last call: checks the parts against the MANIFEST, unpacks the kit (node-llama-cpp with the
# sm_90 CUDA library) to /tmp/peers/kit, waits for the GGUF, reads it back (check_gguf.mjs),
# probes the CUDA backend, runs nlc_bench.mjs (batch-1 decode at 1K/8K/32K with prefill, 32 and
# 64 sequences x 1K/8K), then `node dist/bench/cuda_bench.js` (batch 1/32/64 x 1K/8K/32K decode,
# prefill 8K/32K), then dist/bench/peers/table.js. About 2-3 minutes when the GGUF was started
# by an earlier call. Success prints the table and "RESULT: PASS" last.
# $OUT gets: peers_table.md, nlc_summary.json, cuda_bench.json, nlc_bench.log, cuda_bench.log,
# make_gguf.log, env.txt (GPU, probe, GGUF check), run.log.
# Knobs: GGUF (/tmp/peers/llama8b.gguf), NLC_DEADLINE_S (150), SINGLE_P (1024,8192,32768),
#   BATCHED_P (1024,8192), B_LIST (32,64), N (128), BATCH_SIZE (2048), SKIP_NLC=1, SKIP_HS=1;
#   for a dry run on a CPU machine: KIT_DIR (.peer/kit), GGUF_ARGS (e.g. --tiny: make_gguf.py and
#   check_gguf.mjs), NLC_GPU (cuda; false runs llama.cpp on the CPU).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
MODE=${1:-run}
W=/tmp/peers
PARTS=$W/parts
KIT=$W/kit
OUT=${OUT:-/tmp/peers-out}
GGUF=${GGUF:-$W/llama8b.gguf}
mkdir -p "$PARTS" "$OUT"
T0=$(date +%s)
log() { echo "[peers +$(( $(date +%s) - T0 ))s] $*"; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

if [ "$MODE" = run ] && [ -z "${PEERS_TEED:-}" ]; then   # the whole run's log goes to $OUT too
  PEERS_TEED=1 bash "${BASH_SOURCE[0]}" "$@" 2>&1 | tee "$OUT/run.log"
  exit "${PIPESTATUS[0]}"
fi

# 1. keep this call's parts (and any earlier call's still in the tree copy)
for f in "${KIT_DIR:-.peer/kit}"/p*/*; do
  [ -f "$f" ] || continue
  b=$(basename "$f")
  cmp -s "$f" "$PARTS/$b" 2>/dev/null || { cp "$f" "$PARTS/$b.tmp" && mv "$PARTS/$b.tmp" "$PARTS/$b"; }
done
log "mode=$MODE parts: $(ls "$PARTS" | tr '\n' ' ')"

start_gguf() {
  [ -f $W/gguf.started ] && return 0
  [ -f "$PARTS/tokenizer.json.xz" ] || return 1
  date +%s > $W/gguf.started
  setsid bash -c "xz -dc '$PARTS/tokenizer.json.xz' > $W/tokenizer.json &&
    PYTHONUNBUFFERED=1 python3 '$ROOT/bench/peers/make_gguf.py' '$GGUF' --tokenizer $W/tokenizer.json ${GGUF_ARGS:-};
    echo \$? > $W/gguf.rc" < /dev/null > $W/make_gguf.log 2>&1 &
  echo $! > $W/gguf.pid
  log "GGUF being written in the background to $GGUF"
}
if [ "$MODE" = stash ]; then
  start_gguf || log "no tokenizer yet: the GGUF starts with the call carrying .peer/kit/p1"
  exit 0
fi
[ "$MODE" = run ] || { echo "usage: peers_bench.sh [stash]" >&2; exit 2; }
command -v node >/dev/null || { log "FATAL: no node on PATH (source .device/prelude.sh first)"; exit 3; }
[ -f dist/bench/cuda_bench.js ] && [ -f dist/bench/peers/table.js ] ||
  { log "FATAL: dist/ lacks bench/cuda_bench.js or bench/peers/table.js (npm run build, carry dist)"; exit 3; }

# 2. parts -> kit
fails=0
if [ -z "${SKIP_NLC:-}" ]; then
  [ -f "$PARTS/MANIFEST" ] || { log "FATAL: no MANIFEST: carry .peer/kit/p1.. in earlier calls (bench/peers/README.md)"; exit 3; }
  bad=0
  while read -r kind name _size sum; do
    [ "$kind" = part ] || continue
    if [ ! -f "$PARTS/$name" ]; then log "MISSING $name (its .peer/kit/pN folder was not carried)"; bad=1
    elif [ "$(sha "$PARTS/$name")" != "$sum" ]; then log "BAD $name (sha256)"; bad=1; fi
  done < "$PARTS/MANIFEST"
  [ $bad = 0 ] || { log "FATAL: parts missing or damaged; nothing run"; exit 3; }
  start_gguf || true
  if [ "$(cat "$KIT/.manifest" 2>/dev/null)" != "$(sha "$PARTS/MANIFEST")" ]; then
    rm -rf "$KIT" "$W/kit.tmp"; mkdir -p "$W/kit.tmp"
    awk -v d="$PARTS" '$1 == "part" { print d "/" $2 }' "$PARTS/MANIFEST" | xargs cat | xz -T0 -dc |
      tar -C "$W/kit.tmp" -xf - || { log "FATAL: unpack failed"; exit 4; }
    mv "$W/kit.tmp/kit" "$KIT" && sha "$PARTS/MANIFEST" > "$KIT/.manifest"
  fi
  cp bench/peers/*.mjs "$KIT/nlc/"
  log "kit unpacked: $(du -sh "$KIT" | cut -f1)"
  export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true NODE_LLAMA_CPP_GPU=cuda
  BINS="$KIT/nlc/node_modules/@node-llama-cpp/linux-x64-cuda/bins/linux-x64-cuda"
  {
    date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    echo "node $(node --version)"; lscpu | grep -E 'Model name|^CPU\(s\)'; df -h /tmp | tail -1
    echo "--- ldd libggml-cuda.so"; ldd "$BINS/libggml-cuda.so" | grep -E 'cuda|cublas|not found'
    echo "--- probe"; (cd "$KIT/nlc" && timeout 60 node nlc_probe.mjs) 2>&1 | tail -c 1500
  } > "$OUT/env.txt" 2>&1
  grep -E '"ok":|not found' "$OUT/env.txt" | cut -c1-300

  # 3. the GGUF (from an earlier call's background job, or started just above)
  while [ ! -f $W/gguf.rc ]; do
    kill -0 "$(cat $W/gguf.pid)" 2>/dev/null || { sleep 1; [ -f $W/gguf.rc ] || break; }
    sleep 1
  done
  cp $W/make_gguf.log "$OUT/make_gguf.log" 2>/dev/null
  if [ "$(cat $W/gguf.rc 2>/dev/null)" != 0 ]; then log "FATAL: GGUF not written (make_gguf.log)"; exit 5; fi
  log "GGUF ready ($(stat -c %s "$GGUF") bytes)"
  (cd "$KIT/nlc" && timeout 60 node check_gguf.mjs "$GGUF" ${GGUF_ARGS:-}) 2>&1 | tee -a "$OUT/env.txt" | cut -c1-300
  [ "${PIPESTATUS[0]}" = 0 ] || fails=$((fails + 1))

  # 4. node-llama-cpp
  log "node-llama-cpp bench"
  (cd "$KIT/nlc" && timeout $(( ${NLC_DEADLINE_S:-150} + 60 )) node nlc_bench.mjs --model "$GGUF" --gpu "${NLC_GPU:-cuda}" \
    --single-p "${SINGLE_P:-1024,8192,32768}" --n "${N:-128}" --batched-p "${BATCHED_P:-1024,8192}" \
    --b "${B_LIST:-32,64}" --batched-n "${N:-128}" --batch-size "${BATCH_SIZE:-2048}" \
    --deadline-s "${NLC_DEADLINE_S:-150}" --summary "$OUT/nlc_summary.json") > "$OUT/nlc_bench.log" 2>&1
  nrc=$?
  grep -E '^\{"t"' "$OUT/nlc_bench.log" | cut -c1-220
  [ $nrc = 0 ] || { log "node-llama-cpp bench rc=$nrc"; tail -5 "$OUT/nlc_bench.log"; fails=$((fails + 1)); }
fi

# 5. hisparse on the same shapes (the node-llama-cpp process has exited: the GPU is free)
if [ -z "${SKIP_HS:-}" ]; then
  log "hisparse bench"
  timeout 240 node dist/bench/cuda_bench.js --config configs/llama-3.1-8b --batches 1,32,64 \
    --contexts 1024,8192,32768 --json "$OUT/cuda_bench.json" > "$OUT/cuda_bench.log" 2>&1 ||
    { log "cuda_bench failed"; fails=$((fails + 1)); }
  grep -E '^\|' "$OUT/cuda_bench.log"
fi

# 6. the table
log "table"
node dist/bench/peers/table.js --hisparse "$OUT/cuda_bench.json" --nlc "$OUT/nlc_summary.json" \
  --out "$OUT/peers_table.md" || fails=$((fails + 1))
log "done"
if [ "$fails" -eq 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($fails failing steps)"; fi
[ "$fails" -eq 0 ]
