#!/usr/bin/env bash
# GPU machine side of scripts/device/pack.sh: restores .device/app/node_modules.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [ ! -d .device/app/node_modules ]; then
  tar -xJf .device/node_modules.tar.xz -C .device/app
fi
