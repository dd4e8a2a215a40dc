#!/usr/bin/env bash
# Tiny random MoE checkpoints and their HF transformers references (GPU machine: Python with
# torch + transformers 5.17; no Node needed, nothing to carry). Makes, with
# scripts/gpu/make_tiny_fixture.py:
#   tiny-glm4-moe-grouped  16 experts in 4 groups (2 per token), nonzero e_score_correction_bias,
#                          scaling 2.5: the group-limited noaux_tc rule the shared checkpoints lack
#   tiny-qwen3-moe-packed  transformers 5's in-memory packed experts (mlp.experts.gate_up_proj)
#   tiny-qwen3-moe-v512, tiny-glm4-moe-v512
#                          the shapes of ../shared/models/tiny-* with a 512-token vocabulary
# all with a 512-token vocabulary (about 2 MB each), and packs them as $OUT/moe_fixtures.tgz:
# models/<name>/ and hf-<name>.json. Unpack into test/fixtures/ and the CPU parity tests pick them
# up (test/helpers/reference.ts TINY_MODELS). Prints one line per model, then "moe_fixtures: ok".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/moe-fixtures}"
work=$(mktemp -d)
export PYTHONUNBUFFERED=1
gen() { python3 scripts/gpu/make_tiny_fixture.py --out-models "$work/models" --out-fixtures "$work" --vocab-size 512 "$@"; }
gen --name tiny-glm4-moe-grouped
gen --name tiny-qwen3-moe-packed --preset tiny-qwen3-moe --packed --seed 1
gen --name tiny-qwen3-moe-v512 --preset tiny-qwen3-moe --seed 2
gen --name tiny-glm4-moe-v512 --preset tiny-glm4-moe --seed 3
mkdir -p "$out"
tar -czf "$out/moe_fixtures.tgz" -C "$work" models $(cd "$work" && ls hf-*.json)
echo "moe_fixtures: ok ($(du -h "$out/moe_fixtures.tgz" | cut -f1))"
