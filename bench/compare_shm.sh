#!/usr/bin/env bash
# compare_shm.sh: tessel's all-reduce between processes of one host through shared memory
# (src/comm/mpi/host_shm.h) against the same 4 devices in one process and against Open MPI's
# MPI_Allreduce with the same process count, measured side by side in one run (issue 37).
#
#   bench/compare_shm.sh [--build DIR] [--repeat R] [-b 4K] [-e 256M] [-f 4] [-n 10] [-w 3]
#                        [--no-before]
#
# R times (default 3), alternating, over the same sizes (f32 sum, out of place; the timing of
# bench/mpi/tessel_mpi_allreduce.cpp and bench/mpi_allreduce.c: median over iters of the
# slowest rank's time per call, the ranks meeting before each call):
#   mpirun --bind-to none -np 1 tessel_mpi_allreduce --devices-per-process 4
#                                              (in-process: 4 devices, 1 process, unbound: Open
#                                              MPI binds each process of a job of 1 or 2 to one
#                                              core, which left this one a single core until
#                                              2026-11-30)
#   mpirun -np 2 tessel_mpi_allreduce --devices-per-process 2   (2 processes x 2 devices)
#   mpirun -np 4 tessel_mpi_allreduce                           (4 processes x 1 device)
#   mpirun -np 2 mpi_allreduce, mpirun -np 4 mpi_allreduce      (Open MPI, 2 and 4 processes)
#   and (unless --no-before) the 2 x 2 and 4 x 1 runs with TESSEL_SHM=0 (the MPI path before).
# Prints per size: each configuration's busbw (GB/s, median over the repetitions), its ratio to
# the in-process busbw, and its speedup over MPI_Allreduce with the same process count (MPI
# time / tessel time); the medians of the per-repetition ratios, with their [min..max].
# Needs openmpi-bin, libopenmpi-dev and tessel built with MPI (default build dir: build).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build"
repeat=3
min=4K max=256M factor=4 iters=10 warmup=3
before=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --no-before) before=0; shift ;;
    -b) min="$2"; shift 2 ;;
    -e) max="$2"; shift 2 ;;
    -f) factor="$2"; shift 2 ;;
    -n) iters="$2"; shift 2 ;;
    -w) warmup="$2"; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_shm.sh: error: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
tessel="$build/bench/mpi/tessel_mpi_allreduce"
[ -x "$tessel" ] || { echo "compare_shm.sh: error: no $tessel (build tessel with MPI first, or pass --build)" >&2; exit 2; }
command -v mpicc >/dev/null && command -v mpirun >/dev/null || {
  echo "compare_shm.sh: error: mpicc/mpirun not found (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 2; }
python=/usr/bin/python3
[ -x "$python" ] || python=python3

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/mpi_allreduce" "$root/bench/mpi_allreduce.c"
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
sizes=(-b "$min" -e "$max" -f "$factor" -n "$iters" -w "$warmup")
echo "# compare_shm.sh: all-reduce f32 sum, 4 ranks on one host, sizes $min..$max x$factor, $iters iters ($warmup warm-up), $repeat repetition(s)"
echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD -- src include 2>/dev/null || echo ' (+ uncommitted changes)'); machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 1; i <= repeat; i++)); do
  mpirun --oversubscribe --bind-to none -np 1 "$tessel" --devices-per-process 4 "${sizes[@]}" \
    > "$work/inproc.$i.txt"
  mpirun --oversubscribe -np 2 "$tessel" --devices-per-process 2 "${sizes[@]}" > "$work/shm2x2.$i.txt"
  mpirun --oversubscribe -np 2 "$work/mpi_allreduce" "${sizes[@]}" > "$work/mpi2.$i.txt"
  mpirun --oversubscribe -np 4 "$tessel" "${sizes[@]}" > "$work/shm4x1.$i.txt"
  mpirun --oversubscribe -np 4 "$work/mpi_allreduce" "${sizes[@]}" > "$work/mpi4.$i.txt"
  if [ "$before" -eq 1 ]; then
    mpirun --oversubscribe -np 2 -x TESSEL_SHM=0 "$tessel" --devices-per-process 2 "${sizes[@]}" > "$work/mpi2x2.$i.txt"
    mpirun --oversubscribe -np 4 -x TESSEL_SHM=0 "$tessel" "${sizes[@]}" > "$work/mpi4x1.$i.txt"
  fi
  echo "# repetition $i done, load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

"$python" - "$work" "$repeat" "$before" <<'PY'
import statistics, sys
work, repeat, before = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
wrong = 0

def load(prefix, tessel):
    """bytes -> [time_us per repetition]"""
    global wrong
    out = {}
    for i in range(1, repeat + 1):
        for line in open(f"{work}/{prefix}.{i}.txt"):
            if line.startswith("#") or not line.strip():
                continue
            f = line.split()
            b, t, w = (int(f[1]), float(f[3]), int(f[6])) if tessel else (int(f[0]), float(f[2]), int(f[5]))
            out.setdefault(b, []).append(t)
            wrong += w
    return out

def busbw(b, t_us, n=4):
    return b / (t_us * 1e-6) * 2 * (n - 1) / n / 1e9

inproc = load("inproc", True)
configs = [("shm 2x2", load("shm2x2", True), load("mpi2", False)),
           ("shm 4x1", load("shm4x1", True), load("mpi4", False))]
if before:
    configs += [("mpi 2x2 (TESSEL_SHM=0)", load("mpi2x2", True), load("mpi2", False)),
                ("mpi 4x1 (TESSEL_SHM=0)", load("mpi4x1", True), load("mpi4", False))]

def ratio_text(per):
    return f"{statistics.median(per):5.2f} [{min(per):.2f}..{max(per):.2f}]"

print(f"# busbw in GB/s (median over {repeat} repetitions); vs_inproc = tessel busbw / in-process busbw "
      f"(= in-process time / tessel time); vs_mpi = MPI_Allreduce time / tessel time (same process count); "
      f"each the median of the per-repetition ratios [min..max]")
print(f"{'bytes':>10}  {'inproc_us':>10}  {'inproc_busbw':>12}  " +
      "  ".join(f"{name:>24}: {'us':>9} {'busbw':>6} {'vs_inproc':>18} {'vs_mpi':>18}" for name, _, _ in configs))
for b in sorted(inproc):
    t_in = inproc[b]
    cells = []
    for name, tessel, mpi in configs:
        ts = tessel.get(b)
        if not ts:
            cells.append(f"{'':>24}  {'-':>9} {'-':>6} {'-':>18} {'-':>18}")
            continue
        vs_in = [x / y for x, y in zip(t_in, ts)]
        vs_mpi = [m / y for m, y in zip(mpi.get(b, []), ts)]
        cells.append(f"{'':>24}  {statistics.median(ts):9.1f} {busbw(b, statistics.median(ts)):6.2f} "
                     f"{ratio_text(vs_in):>18} {ratio_text(vs_mpi) if vs_mpi else '-':>18}")
    print(f"{b:>10}  {statistics.median(t_in):10.1f}  {busbw(b, statistics.median(t_in)):12.2f}  " + "  ".join(cells))
print(f"# wrong elements (all runs): {wrong}")
sys.exit(1 if wrong else 0)
PY
