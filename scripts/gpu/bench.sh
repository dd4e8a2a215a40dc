#!/usr/bin/env bash
# Issue 4's speed figures (GPU machine, after unpack + prelude): our dense CUDA path
# (bench/cuda_bench.ts) and HF transformers on the same shapes (bench/hf_bench.py).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-bench}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
node dist/bench/cuda_bench.js --config configs/llama-3.1-8b --json "$out/cuda_bench.json" 2>&1 | tee "$out/cuda_bench.log"
python3 bench/hf_bench.py --config configs/llama-3.1-8b --batches 1,32 --context 1024 --json "$out/hf_bench.json" 2>&1 | tee "$out/hf_bench.log"
