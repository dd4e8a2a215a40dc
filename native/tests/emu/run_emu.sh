#!/usr/bin/env bash
# Runs the attention, HiSparse and sampler tests on the CPU through the emulation in cuda_emu.{h,cpp}:
# the kernel and test sources are copied with the two constructs g++ cannot read rewritten
# (kernel<<<grid, block, smem, stream>>>(args) -> hs_emu::launch(kernel, grid, block, smem,
# stream, args); __shared__ declarations -> the emulated CTA's shared memory), then compiled with
# g++ -DHS_ATTN_HOST_EMU. Slow (one OS thread per CUDA thread): use the --quick test subsets.
# Usage: bash native/tests/emu/run_emu.sh [attention|hisparse|rows|sampling|moe|moe_decode|dummy|mla|mla_prefill|gemv|all] [test args...]
#   HS_EMU_CP_ASYNC=late   cp.async copies land only at the wait that retires them
#   HS_EMU_SMS=N           report N SMs instead of 132 (fewer split-KV splits, longer per-CTA pipelines)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
what="${1:-all}"; shift || true
work="${HS_EMU_BUILD:-build/emu}"
mkdir -p "$work/kernels" "$work/tests"
python3 - "$work" <<'PY'
import re, sys, pathlib
work = pathlib.Path(sys.argv[1])
launch = re.compile(r'([A-Za-z_][\w:]*(?:<[^<>;]*>)?)\s*<<<(.*?)>>>\s*\((.*?)\);', re.S)
for src in list(pathlib.Path('native/kernels').glob('*')) + list(pathlib.Path('native/tests').glob('*')):
    if src.suffix not in ('.cu', '.cuh', '.h'):
        continue
    text = src.read_text()
    def rewrite(m):
        cfg = [c.strip() for c in m.group(2).split(',')]
        cfg += ['0', 'nullptr'][len(cfg) - 2:]  # default shared bytes and stream
        return 'hs_emu::launch(%s, %s, %s);' % (m.group(1), ', '.join(cfg), m.group(3))
    text = launch.sub(rewrite, text)
    text = re.sub(r'extern __shared__ __align__\(\d+\) unsigned char (\w+)\[\];',
                  r'unsigned char* const \1 = hs_emu::gSmem;', text)
    text = re.sub(r'__shared__ (\w+) (\w+);', r'static \1 \2;', text)
    (work / src.parent.name / src.name).write_text(text)
PY
CXX="${CXX:-g++}"
flags=(-std=c++20 -O2 -pthread -w -DHS_ATTN_HOST_EMU -I/usr/local/cuda/include -include native/tests/emu/cuda_emu.h)
build() {  # name sources...
  local name=$1; shift
  [ -x "$work/$name" ] && [ -z "$(find native/kernels native/tests -newer "$work/$name" -print -quit)" ] && return 0
  "$CXX" "${flags[@]}" -x c++ "$@" -x none native/tests/emu/cuda_emu.cpp -o "$work/$name"
}
status=0
if [ "$what" = attention ] || [ "$what" = all ]; then
  build attention_test "$work/tests/attention_test.cu" "$work/kernels/attention_decode.cu" "$work/kernels/attention_prefill.cu" \
    "$work/kernels/copy.cu" "$work/kernels/launch_options.cu"
  "$work/attention_test" "$@" || status=1
fi
if [ "$what" = hisparse ] || [ "$what" = all ]; then
  build hisparse_test "$work/tests/hisparse_test.cu" "$work/tests/hisparse_test_kv.cu" "$work/tests/hisparse_test_select.cu" \
    "$work/tests/hisparse_test_resolve.cu" "$work/tests/hisparse_test_attention.cu" \
    "$work/kernels/hisparse_digest.cu" "$work/kernels/hisparse_select.cu" \
    "$work/kernels/hisparse_resolve.cu" "$work/kernels/hisparse_resolve_copy.cu" "$work/kernels/hisparse_mirror.cu" "$work/kernels/attention_decode.cu" \
    "$work/kernels/attention_prefill.cu"
  "$work/hisparse_test" "$@" || status=1
fi
if [ "$what" = rows ] || [ "$what" = all ]; then
  build hisparse_rows_test "$work/tests/hisparse_rows_test.cu" "$work/kernels/hisparse_rows.cu" \
    "$work/kernels/hisparse_rows_overlap.cu"
  "$work/hisparse_rows_test" "$@" || status=1
fi
if [ "$what" = sampling ] || [ "$what" = all ]; then
  build sampling_test "$work/tests/sampling_test.cu" "$work/kernels/sampling.cu"
  "$work/sampling_test" "$@" || status=1
fi
if [ "$what" = dummy ] || [ "$what" = all ]; then
  build dummy_init_test "$work/tests/dummy_init_test.cu" "$work/kernels/dummy_init.cu"
  "$work/dummy_init_test" "$@" || status=1
fi
if [ "$what" = moe ] || [ "$what" = all ]; then
  build moe_test "$work/tests/moe_test.cu" "$work/kernels/moe_route.cu" "$work/kernels/moe_permute.cu" \
    "$work/kernels/moe_gemm.cu" "$work/kernels/activation.cu"
  "$work/moe_test" "$@" || status=1
fi
if [ "$what" = moe_decode ] || [ "$what" = all ]; then
  build moe_decode_test "$work/tests/moe_decode_test.cu" "$work/kernels/moe_decode_route.cu" "$work/kernels/moe_decode.cu" \
    "$work/kernels/moe_route.cu" "$work/kernels/moe_permute.cu" "$work/kernels/moe_gemm.cu"
  "$work/moe_decode_test" "$@" || status=1
fi
if [ "$what" = mla ] || [ "$what" = all ]; then
  build mla_test "$work/tests/mla_test.cu" "$work/kernels/mla_rows.cu" "$work/kernels/mla_attention.cu" \
    "$work/kernels/mla_attention_tc.cu" "$work/kernels/mla_project.cu" \
    "$work/kernels/mla_indexer.cu" "$work/kernels/mla_topk.cu"
  "$work/mla_test" "$@" || status=1
fi
if [ "$what" = gemv ] || [ "$what" = all ]; then
  build gemv_test "$work/tests/gemv_test.cu" "$work/kernels/gemv.cu" "$work/kernels/activation.cu" "$work/kernels/rope.cu" \
    "$work/kernels/norm.cu" "$work/kernels/launch_options.cu"
  "$work/gemv_test" "$@" || status=1
fi
if [ "$what" = mla_prefill ] || [ "$what" = all ]; then
  build mla_prefill_test "$work/tests/mla_prefill_test.cu" "$work/kernels/mla_prefill.cu"
  "$work/mla_prefill_test" "$@" || status=1
fi
exit $status
