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
