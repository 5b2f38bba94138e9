#!/usr/bin/env bash
# compare_mpi.sh: tessel's in-process all-reduce against Open MPI's MPI_Allreduce on this machine,
# measured side by side in one run.
#
#   bench/compare_mpi.sh [--build DIR] [--repeat R] [-b 4K] [-e 64M] [-f 2] [-n 20] [-w 5]
#
# Builds bench/mpi_allreduce.c with mpicc, then R times (default 1), alternating:
#   mpirun --oversubscribe -np 4 mpi_allreduce ...            (4 processes, shared memory)
#   <build>/tools/tessel bench all_reduce --devices 4 --json   (4 threads, one process)
# over the same sizes (f32 sum, out of place, same timing definition: median over iters of the
# slowest rank's time per call). Prints per size: bytes, MPI busbw, tessel busbw and their ratio
# (the median over the R repetitions of each), then the 4 KiB latency of both. Needs
# openmpi-bin, libopenmpi-dev (scripts/install-deps.sh) and a built tessel CLI
# (default build dir: build-bench, else build).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=""
repeat=1
min=4K max=64M factor=2 iters=20 warmup=5
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    -b) min="$2"; shift 2 ;;
    -e) max="$2"; shift 2 ;;
    -f) factor="$2"; shift 2 ;;
    -n) iters="$2"; shift 2 ;;
    -w) warmup="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_mpi.sh: error: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [ -z "$build" ]; then
  for candidate in build-bench build; do
    if [ -x "$root/$candidate/tools/tessel" ]; then build="$root/$candidate"; break; fi
  done
fi
tessel="${build:-$root/build}/tools/tessel"
[ -x "$tessel" ] || { echo "compare_mpi.sh: error: no tessel CLI at $tessel (build first or pass --build)" >&2; exit 2; }
command -v mpicc >/dev/null && command -v mpirun >/dev/null || {
  echo "compare_mpi.sh: error: mpicc/mpirun not found (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 2; }
python=/usr/bin/python3
[ -x "$python" ] || python=python3

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/mpi_allreduce" "$root/bench/mpi_allreduce.c"

if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

echo "# compare_mpi.sh: all-reduce f32 sum, 4 ranks, sizes $min..$max x$factor, $iters iters ($warmup warm-up), $repeat repetition(s)"
echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

# CPU ticks of the whole machine (busy incl. steal, total) and CPU seconds of this script's
# finished children, as "busy total children" in $sample. `times` must run in this shell (not in
# a command substitution's subshell) to see the children.
cpu_sample() {
  local busy total
  read -r busy total < <(awk '/^cpu /{t=$2+$3+$4+$5+$6+$7+$8+$9; print t-$5-$6, t}' /proc/stat)
  times > "$work/times"
  local children
  children=$(tail -1 "$work/times" | awk '{
    s=0
    for (i=1;i<=2;i++){ split($i, ms, "m"); sub("s","",ms[2]); s+=ms[1]*60+ms[2] }
    print s}')
  sample="$busy $total $children"
}
# Percentage of the machine's CPU time taken by other processes (and steal) between two samples.
other_cpu() {
  awk -v a="$1" -v b="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN{
    split(a, x, " "); split(b, y, " ")
    other = (y[1]-x[1]) - (y[3]-x[3])*hz; total = y[2]-x[2]
    if (total <= 0) print "0.0"; else { p = 100*other/total; if (p < 0) p = 0; printf "%.1f", p } }'
}

for ((i = 1; i <= repeat; i++)); do
  cpu_sample; s0=$sample
  mpirun --oversubscribe -np 4 "$work/mpi_allreduce" -b "$min" -e "$max" -f "$factor" -n "$iters" -w "$warmup" \
    > "$work/mpi.$i.txt"
  cpu_sample; s1=$sample
  "$tessel" bench all_reduce --devices 4 -b "$min" -e "$max" -f "$factor" --iters "$iters" --warmup "$warmup" --json \
    > "$work/tessel.$i.json"
  cpu_sample; s2=$sample
  echo "# repetition $i: other processes and steal took $(other_cpu "$s0" "$s1")% of the CPU time during MPI, $(other_cpu "$s1" "$s2")% during tessel"
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

"$python" - "$work" "$repeat" <<'EOF'
import json, statistics, sys
work, repeat = sys.argv[1], int(sys.argv[2])
mpi, tessel = {}, {}   # bytes -> list of (time_us, busbw) per repetition
memcpy = []
wrong = 0
for i in range(1, repeat + 1):
    for line in open(f"{work}/mpi.{i}.txt"):
        if line.startswith("#") or not line.strip():
            continue
        b, _count, t, _algbw, busbw, w = line.split()
        mpi.setdefault(int(b), []).append((float(t), float(busbw)))
        wrong += int(w)
    doc = json.load(open(f"{work}/tessel.{i}.json"))
    memcpy.append(doc["memcpy_gbps"])
    for row in doc["rows"]:
        tessel.setdefault(row["bytes"], []).append((row["time_us"], row["busbw_gbps"], row["efficiency"]))
        wrong += row["wrong"]

med = lambda rows, k: statistics.median(r[k] for r in rows)
print(f"# memcpy (tessel bench, read+write, {doc['memcpy_threads']} threads, 64 MiB): "
      f"{statistics.median(memcpy):.2f} GB/s (median of {repeat})")
print(f"# busbw in GB/s, median over {repeat} repetition(s); ratio = tessel / MPI; tessel_effic = tessel's")
print(f"# efficiency column (fewest bytes 2*N*S through memory / time / memcpy bandwidth of its own run)")
print(f"{'bytes':>12}  {'mpi_busbw':>10}  {'tessel_busbw':>12}  {'ratio':>7}  {'tessel_effic':>12}")
for b in sorted(set(mpi) & set(tessel)):
    m, t = med(mpi[b], 1), med(tessel[b], 1)
    print(f"{b:>12}  {m:>10.3f}  {t:>12.3f}  {t / m if m > 0 else float('nan'):>7.2f}  {med(tessel[b], 2):>12.3f}")
if 4096 in mpi and 4096 in tessel:
    m, t = med(mpi[4096], 0), med(tessel[4096], 0)
    print(f"# latency at 4 KiB (median time per call): MPI {m:.2f} us, tessel {t:.2f} us, "
          f"tessel/MPI {t / m:.3f}")
print(f"# wrong elements (both): {wrong}")
sys.exit(1 if wrong else 0)
EOF
