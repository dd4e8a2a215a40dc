#!/usr/bin/env bash
# Where the time of a benchmark's last kernels goes (GPU machine; Nsight Compute, kernels inside
# CUDA graphs profiled per node):
#   bash scripts/gpu/kernel_profile.sh NAME -- node dist/bench/cuda_bench.js --batches 1 --contexts 8192
# Profiles the first COUNT launches (default 3000) of the command with ncu (--clock-control none,
# metric gpu__time_duration.sum) and sums durations per kernel over the LAST `TAIL` profiled
# launches (default 700: the end of a benchmark is its steady decode steps). Prints total ns,
# launches and average ns per kernel, and the sum of the window. CSV in $OUT/NAME.ncu.csv (or
# /tmp/kernel-profile).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
name="$1"
shift
[ "${1:-}" = "--" ] && shift
out="${OUT:-/tmp/kernel-profile}"
mkdir -p "$out"
NCU="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
timeout "${TIMEOUT:-240}" "$NCU" --clock-control none --graph-profiling node --launch-count "${COUNT:-3000}" \
  --metrics gpu__time_duration.sum --csv "$@" >"$out/$name.ncu.csv" 2>"$out/$name.ncu.err"
echo "== $name: ncu rc $? ($(grep -c gpu__time_duration "$out/$name.ncu.csv") launches profiled)"
python3 - "$out/$name.ncu.csv" "${TAIL:-700}" <<'PY'
import csv, sys, collections
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
rows = [r for r in csv.DictReader(lines) if r.get("Metric Name") == "gpu__time_duration.sum"]
rows = rows[-int(sys.argv[2]):]
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows:
    v = float(r["Metric Value"].replace(",", "")); unit = r["Metric Unit"]
    ns = v * 1000 if unit in ("us", "usecond") else v * 1e6 if unit in ("ms", "msecond") else v
    k = r["Kernel Name"][:100]; tot[k] += ns; cnt[k] += 1
print(f"window: last {len(rows)} launches, {sum(tot.values())/1e3:.1f} us of kernel time")
for k, v in sorted(tot.items(), key=lambda x: -x[1])[:30]:
    print(f"{v:12.0f} {cnt[k]:6d} {v/cnt[k]:9.0f}  {k}")
PY
