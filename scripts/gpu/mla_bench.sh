#!/usr/bin/env bash
# MLA / DSA benchmarks on the GPU machine (issue 21), a few minutes: bench/mla_bench.js on GLM-5's
# per-layer shape cut to NUM_LAYERS layers (default 8) and NUM_EXPERTS routed experts (default 16),
# dummy weights generated on the device: decode step time and % of roofline at batch 1/32/128 x
# 32K/128K, the indexer alone per step at 32K/128K/512K, prefill tok/s at 32K in the expanded form
# (the default for chunks of >= 64 tokens) and the absorbed one (the old path). Prints markdown
# tables for bench/results/. Prepare and carry as for scripts/gpu/mla_check.sh (no model needed):
#   source .device/prelude.sh && bash scripts/gpu/mla_bench.sh
# Logs and JSON go to $OUT (or /tmp/hisparse-mla-bench). Extra arguments go to mla_bench.js
# (e.g. --prefill 0 to skip the prefill, --batches 1,32; prefill only: --contexts "" --indexer-contexts "";
# --prefill-forms expanded to skip the slow absorbed prefill; --prefill-scratch-mib N).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-mla-bench}"
mkdir -p "$out"
[ -f scripts/device/unpack.sh ] && [ -f .device/node_modules.tar.xz ] && bash scripts/device/unpack.sh
timeout 540 node dist/bench/mla_bench.js --num-layers "${NUM_LAYERS:-8}" --num-experts "${NUM_EXPERTS:-16}" \
  --json "$out/mla_bench.json" "$@" 2>&1 | tee "$out/mla_bench.log"
