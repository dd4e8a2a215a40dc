#!/usr/bin/env bash
# Prepares .device/ for a GPU-machine run within the 64 MiB transfer limit: runs the shared
# prepare.sh (Node binary + production node_modules), then packs node_modules into one xz
# archive and copies the HF fixtures. Extra arguments go to prepare.sh (e.g. --model ref-base).
# On the GPU machine, start the command with:
#   bash scripts/device/unpack.sh && source .device/prelude.sh && ...
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
bash ../shared/device/prepare.sh "$@" >/dev/null
tar -cJf .device/node_modules.tar.xz -C .device/app node_modules
rm -rf .device/app/node_modules
mkdir -p .device/fixtures
cp ../shared/fixtures/*.json .device/fixtures/
du -sh .device dist build/Release 2>/dev/null || true
tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
carried=$(du -scb .device dist build/Release 2>/dev/null | tail -1 | cut -f1)
echo "transfer: $(( (tracked + carried) / 1048576 )) MiB of 64 (tracked $(( tracked / 1048576 )) MiB)"
# Over the limit (the tracked tree grew past ~40 MB): .device/node.xz also goes in two halves,
# carried by separate calls while the machine stays warm (ignored paths stay there), e.g.
#   call 1: carry .device/nx/xaa .device/prelude.sh .device/app .device/node_modules.tar.xz
#   call 2: carry .device/nx/xab dist; command starts with
#           cat .device/nx/xaa .device/nx/xab > .device/node.xz && bash scripts/device/unpack.sh
#   call 3: carry build/Release (then every later call: source .device/prelude.sh && ...)
if (( (tracked + carried) / 1048576 >= 64 )); then
  mkdir -p .device/nx && rm -f .device/nx/x* && split -b 12M .device/node.xz .device/nx/x
  echo "over 64 MiB: .device/nx/xaa and xab hold node.xz in halves (see the end of this script)"
fi
