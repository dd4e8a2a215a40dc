#!/usr/bin/env bash
# Where the time of a HiSparse decode step goes, per kernel (GPU machine):
#   bash scripts/device/unpack.sh && source .device/prelude.sh && bash scripts/gpu/hisparse_profile.sh
# Profiles bench/hisparse_throughput (Llama-3.1-8B shape, dummy weights) for each MODE (default
# "off on"), one context and batch (CTX=32768, B=8), with Nsight Systems when present (kernels
# inside CUDA graphs traced per node), else Nsight Compute (per-kernel durations of a sample).
# Prints the GPU kernel summary per mode (total time, instances, average). Extra arguments go
# to the benchmark (e.g. --kv-budget-gib 32 --host-pool-gib 40). Logs in $OUT or /tmp/hisparse-profile.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/hisparse-profile}"
mkdir -p "$out"
ctx="${CTX:-32768}"
b="${B:-8}"
for mode in ${MODE:-off on}; do
  bench=(node dist/bench/hisparse_throughput.js --contexts "$ctx" --batches "$b" --modes "$mode" --steps 8 --budget-s 120 "$@")
  if command -v nsys >/dev/null; then
    timeout 240 nsys profile --force-overwrite true --trace cuda --cuda-graph-trace node -o "$out/$mode" "${bench[@]}" \
      2>&1 | grep -E "tok/s|error|Error" | tee "$out/$mode.log"
    nsys stats --force-export true --report cuda_gpu_kern_sum --format csv -o "$out/${mode}_kern" "$out/$mode.nsys-rep" >/dev/null 2>&1
    echo "== $mode: GPU kernels (time %, total ns, instances, avg ns, name)"
    python3 - "$out/${mode}_kern_cuda_gpu_kern_sum.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for r in rows[:25]:
    print(f"{float(r['Time (%)']):6.2f}% {int(float(r['Total Time (ns)'])):>14} {r['Instances']:>8} {int(float(r['Avg (ns)'])):>10}  {r['Name'][:90]}")
PY
  else
    timeout 300 ncu --clock-control none --graph-profiling node --launch-skip 2000 --launch-count 600 \
      --metrics gpu__time_duration.sum --csv "${bench[@]}" >"$out/$mode.ncu.csv" 2>"$out/$mode.ncu.err"
    echo "== $mode: ncu kernel durations (sum ns, count, name) over a sample of 600 launches"
    python3 - "$out/$mode.ncu.csv" <<'PY'
import csv, sys, collections
tot = collections.defaultdict(float); cnt = collections.Counter()
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum": continue
    v = float(r["Metric Value"].replace(",", "")); unit = r["Metric Unit"]
    ns = v * 1000 if unit in ("us", "usecond") else v * 1e6 if unit in ("ms", "msecond") else v
    tot[r["Kernel Name"][:90]] += ns; cnt[r["Kernel Name"][:90]] += 1
for k, v in sorted(tot.items(), key=lambda x: -x[1])[:25]:
    print(f"{v:12.1f} {cnt[k]:6d}  {k}")
PY
  fi
done
