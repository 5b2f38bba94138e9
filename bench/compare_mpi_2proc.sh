#!/usr/bin/env bash
# compare_mpi_2proc.sh: tessel's all-reduce across 2 processes (MPI transport, 1 device each)
# against Open MPI's MPI_Allreduce over 2 ranks, measured side by side in one run (issue 8).
#
#   bench/compare_mpi_2proc.sh [--build DIR] [--repeat R] [-b 1M] [-e 64M] [-f 2] [-n 20] [-w 5]
#                              [--algorithms auto,ring,halving_doubling,mpi] [--no-hierarchical]
#
# Builds bench/mpi_allreduce.c with mpicc, then R times (default 5), alternating:
#   mpirun -np 2 mpi_allreduce ...                                  (raw MPI_Allreduce)
#   mpirun -np 2 <build>/bench/mpi/tessel_mpi_allreduce --algorithm <list> --interleave-mpi ...
# (--interleave-mpi: tessel_mpi_allreduce also times MPI_Allreduce before each of its calls, in
# the same processes on the same buffers: a baseline that sees the machine at the same moment)
# and (unless --no-hierarchical) 4 ranks:
#   mpirun -np 4 mpi_allreduce ...                                  (flat, 4 processes)
#   mpirun -np 2 tessel_mpi_allreduce --devices-per-process 2 ...   (hierarchical, 2 x 2)
# over the same sizes (f32 sum, out of place, the same timing definition: median over iters of
# the slowest rank's time per call, the ranks meeting before each call). Prints per size and
# algorithm: MPI's time, tessel's time and ratio = tessel time / MPI time (the median over the R
# repetitions of each), against both baselines; `auto` is what a user gets by default. Needs openmpi-bin,
# libopenmpi-dev and tessel built with MPI (default build dir: build-mpi, else build).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=""
repeat=5
min=1M max=64M factor=2 iters=20 warmup=5
algorithms="auto,ring,halving_doubling"
hierarchical=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-hierarchical) hierarchical=0; shift ;;
    --build) build="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --algorithms) algorithms="$2"; shift 2 ;;
    -b) min="$2"; shift 2 ;;
    -e) max="$2"; shift 2 ;;
    -f) factor="$2"; shift 2 ;;
    -n) iters="$2"; shift 2 ;;
    -w) warmup="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_mpi_2proc.sh: error: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [ -z "$build" ]; then
  for candidate in build-mpi build; do
    if [ -x "$root/$candidate/bench/mpi/tessel_mpi_allreduce" ]; then build="$root/$candidate"; break; fi
  done
fi
tessel="${build:-$root/build}/bench/mpi/tessel_mpi_allreduce"
[ -x "$tessel" ] || { echo "compare_mpi_2proc.sh: error: no $tessel (build tessel with MPI first, or pass --build)" >&2; exit 2; }
command -v mpicc >/dev/null && command -v mpirun >/dev/null || {
  echo "compare_mpi_2proc.sh: error: mpicc/mpirun not found (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 2; }
python=/usr/bin/python3
[ -x "$python" ] || python=python3

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/mpi_allreduce" "$root/bench/mpi_allreduce.c"
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

echo "# compare_mpi_2proc.sh: all-reduce f32 sum, 2 processes, sizes $min..$max x$factor, $iters iters ($warmup warm-up), $repeat repetition(s), tessel algorithms $algorithms"
echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD -- src include 2>/dev/null || echo ' (+ uncommitted changes)'); machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 1; i <= repeat; i++)); do
  mpirun -np 2 "$work/mpi_allreduce" -b "$min" -e "$max" -f "$factor" -n "$iters" -w "$warmup" > "$work/mpi.$i.txt"
  mpirun -np 2 "$tessel" --algorithm "$algorithms" --interleave-mpi -b "$min" -e "$max" -f "$factor" \
    -n "$iters" -w "$warmup" > "$work/tessel.$i.txt"
  if [ "$hierarchical" -eq 1 ]; then
    mpirun --oversubscribe -np 4 "$work/mpi_allreduce" -b "$min" -e "$max" -f "$factor" -n "$iters" -w "$warmup" \
      > "$work/mpi4.$i.txt"
    mpirun -np 2 "$tessel" --devices-per-process 2 --algorithm auto -b "$min" -e "$max" -f "$factor" \
      -n "$iters" -w "$warmup" | sed 's/^  auto /  hierarchical_2x2 /' > "$work/tessel4.$i.txt"
  fi
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
grep -m1 '^# MPI_Allreduce' "$work/mpi.1.txt" || true
grep -m1 '^# tessel' "$work/tessel.1.txt" || true

"$python" - "$work" "$repeat" "$hierarchical" <<'PY'
import os, statistics, sys
work, repeat, hierarchical = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
wrong = 0

def load(prefix, tessel):
    global wrong
    out = {}
    for i in range(1, repeat + 1):
        for line in open(f"{work}/{prefix}.{i}.txt"):
            if line.startswith("#") or not line.strip():
                continue
            f = line.split()
            if tessel:
                key, t, w = (f[0], int(f[1])), float(f[3]), int(f[6])
            else:
                key, t, w = int(f[0]), float(f[2]), int(f[5])
            out.setdefault(key, []).append(t)
            wrong += w
    return out

def table(title, mpi, tessel, target):
    algos = []
    for a, _ in tessel:
        if a not in algos and not a.startswith("mpi@"):
            algos.append(a)
    print(f"# {title}")
    print(f"# time in us, median over {repeat} repetition(s); ratio = tessel time / MPI_Allreduce time "
          f"({target}); [min..max] of the per-repetition ratios")
    print(f"{'bytes':>10}  {'mpi_us':>9}  " + "  ".join(f"{a + '_us':>18}  {'ratio':>6}  {'range':>11}" for a in algos))
    for b in sorted(mpi):
        m = statistics.median(mpi[b])
        cells = []
        for a in algos:
            ts = tessel.get((a, b))
            if not ts:
                cells.append(f"{'-':>18}  {'-':>6}  {'-':>11}")
                continue
            t = statistics.median(ts)
            per = [x / y for x, y in zip(ts, mpi[b])]
            cells.append(f"{t:>18.1f}  {t / m:>6.3f}  {min(per):>5.2f}..{max(per):<5.2f}")
        print(f"{b:>10}  {m:>9.1f}  " + "  ".join(cells))

two = load("tessel", True)
table("2 processes, 1 device each: tessel (MPI transport) vs MPI_Allreduce over 2 ranks "
      "(bench/mpi_allreduce.c, separate runs)",
      load("mpi", False), two, "target <= 1.05 at >= 1 MiB")
interleaved = {b: ts for (a, b), ts in two.items() if a == "mpi@auto"}
table("the same tessel runs vs MPI_Allreduce timed in the same processes just before each tessel "
      "call (--interleave-mpi)", interleaved, {k: v for k, v in two.items() if k[0] == "auto"},
      "target <= 1.05 at >= 1 MiB")
if hierarchical:
    table("4 ranks: tessel hierarchical (2 processes x 2 devices) vs flat MPI_Allreduce over 4 processes",
          load("mpi4", False), load("tessel4", True), "target < 1 at 16 MiB")
print(f"# wrong elements (all runs): {wrong}")
sys.exit(1 if wrong else 0)
PY
