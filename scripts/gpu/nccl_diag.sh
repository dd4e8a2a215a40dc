#!/usr/bin/env bash
# Why the addon's first NCCL call fails (GPU machine): the NCCL library's dependencies, which of
# its symbols the dynamic linker binds into the Node.js binary or the addon, and a crash trace of
# `ncclInfo()` under scripts/gpu/debug/segv_trace.c (LD_PRELOAD; no gdb on the machine).
#   source .device/prelude.sh && bash scripts/gpu/nccl_diag.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
lib="${NCCL_LIB:-/usr/lib/x86_64-linux-gnu/libnccl.so.2}"
tmp="$(mktemp -d)"
gcc -O1 -g -shared -fPIC -o "$tmp/segv_trace.so" scripts/gpu/debug/segv_trace.c -ldl || exit 1
echo "== ldd $lib"; ldd "$lib"
cat >"$tmp/info.js" <<JS
const a = require("$PWD/build/Release/hisparse_native.node");
if (process.argv[2] === "probe") console.error("probe", JSON.stringify(a.probe()));
console.error("calling ncclInfo");
console.error("ncclInfo", JSON.stringify(a.ncclInfo()));
JS
echo "== ncclInfo under segv_trace"; LD_PRELOAD="$tmp/segv_trace.so" node "$tmp/info.js" 2>&1 | tail -40
echo "== ncclInfo under segv_trace, libnccl preloaded too"
LD_PRELOAD="$tmp/segv_trace.so /usr/lib/x86_64-linux-gnu/libnccl.so.2" node "$tmp/info.js" 2>&1 | tail -40
echo "== after probe()"; LD_PRELOAD="$tmp/segv_trace.so" node "$tmp/info.js" probe 2>&1 | tail -40
echo "== bindings of libnccl's symbols outside libc/libm/libdl/librt/libpthread/libnccl"
LD_DEBUG=bindings node "$tmp/info.js" 2>&1 | grep "binding file.*libnccl" \
  | grep -v -E "to /(usr/)?lib/x86_64-linux-gnu/(libc|libm|libdl|librt|libpthread|libgcc_s|libnccl)[.]" | head -40
echo "== the loading sequence as a plain program (scripts/gpu/debug/nccl_load.cc); ulimit -s $(ulimit -s)"
g++ -O1 -std=c++17 -o "$tmp/nl" scripts/gpu/debug/nccl_load.cc -ldl -lpthread
g++ -O1 -std=c++17 -static-libstdc++ -rdynamic -o "$tmp/nl_static" scripts/gpu/debug/nccl_load.cc -ldl -lpthread
for v in "nl" "nl 256" "nl_static" "nl_static 256"; do
  for f in local deepbind; do
    echo "-- $v ($f)"; NCCL_DLOPEN_FLAGS=$f "$tmp/"$v 2>&1 | tail -3
  done
done
echo "-- nl after loading the addon (no node; its N-API imports served by empty stand-ins)"
nm -D --undefined-only build/Release/hisparse_native.node | awk '$2 ~ /^napi_|^node_/ {print "void " $2 "(void) {}"}' >"$tmp/napi_stubs.c"
gcc -shared -fPIC -o "$tmp/napi_stubs.so" "$tmp/napi_stubs.c"
LD_PRELOAD="$tmp/napi_stubs.so" NCCL_PRELOAD_ADDON="$PWD/build/Release/hisparse_native.node" "$tmp/nl" 2>&1 | tail -4
echo "== the dynamic linker's last words before the crash (LD_DEBUG=files)"
LD_DEBUG=files node "$tmp/info.js" 2>&1 | tail -12
echo "== node exports a symbol libnccl imports"
comm -12 <(nm -D --defined-only "$(command -v node)" | awk '{print $3}' | sort -u) \
  <(nm -D --undefined-only "$lib" | awk '{print $2}' | sed 's/@.*//' | sort -u) | head -40
