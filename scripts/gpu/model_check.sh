#!/usr/bin/env bash
# Model- and engine-level checks of the CUDA backend against HF transformers and the CPU backend
# (issue 4's numerics acceptance). GPU machine, after:
#   bash scripts/device/unpack.sh && source .device/prelude.sh
# Steps: HF references for random-weight checkpoints of four families (2 layers each) and the
# trained ref-small; CUDA vs HF and vs CPU (scripts/gpu/compare_hf.ts); engine checks (batch
# invariance with preemption, graphs vs eager, seeded sampling); compute-sanitizer memcheck over a
# short generation. Logs under $OUT (or /tmp/hisparse-model-check); summary last.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-model-check}"
mkdir -p "$out"
ref=/tmp/hfref
export PYTHONUNBUFFERED=1
status=()

python3 scripts/gpu/hf_reference.py --out "$ref" --layers 2 --tokens 32 --ref models/ref-small 2>&1 | tee "$out/hf_reference.log"
status+=("hf_reference:$?")
node dist/scripts/gpu/compare_hf.js "$ref"/llama-3.1-8b.json "$ref"/qwen2.5-7b.json "$ref"/qwen3-8b.json \
  "$ref"/mistral-7b.json "$ref"/ref-small.json --assert-greedy=ref-small 2>&1 | tee "$out/compare_hf.log"
status+=("compare_hf:$?")
node dist/scripts/gpu/engine_checks.js 2>&1 | tee "$out/engine_checks.log"
status+=("engine_checks:$?")
if [ "${SKIP_MEMCHECK:-0}" != 1 ]; then
  compute-sanitizer --tool memcheck --leak-check no node dist/scripts/gpu/short_generate.js 2>&1 | tail -20 | tee "$out/memcheck_generate.log"
  status+=("memcheck_generate:$?")
fi
echo "== summary"
grep -h "RESULT\|ERROR SUMMARY\|short_generate" "$out"/*.log
printf '%s\n' "${status[@]}"
