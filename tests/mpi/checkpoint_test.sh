#!/usr/bin/env bash
# checkpoint_test.sh: checkpoints across process counts (docs/checkpoints.md).
#
#   tests/mpi/checkpoint_test.sh <tessel_mpi_checkpoint> [mpiexec] [mpiexec flags]
#
# Saves under mpirun -np 2 and restores under -np 4, -np 2 and one process without mpirun; saves
# under -np 4 and restores under -np 2 and one process; saves asynchronously under -np 2 and
# restores under one process and -np 2. Checks that each saving process wrote
# its own files, and that every restoring process reported its bytes checked. Every run is under
# `timeout`.
set -uo pipefail
program="$1"
mpiexec="${2:-mpirun}"
flags="${3:-}"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0
run() {  # processes (1: no mpirun), mode, directory
  local np="$1" out rc
  if [ "$np" -eq 1 ]; then
    out=$(timeout -k 5 60 "$program" "$2" "$3" 2>&1)
  else
    out=$(timeout -k 5 120 "$mpiexec" -np "$np" $flags "$program" "$2" "$3" 2>&1)
  fi
  rc=$?
  echo "$out"
  local reports
  reports=$(grep -c "^rank [0-9]*: $( [[ "$2" == save* ]] && echo saved || echo restored)" <<<"$out")
  if [ "$rc" -ne 0 ] || [ "$reports" -ne "$np" ]; then
    echo "FAIL: $2 with $np processes (exit $rc, $reports of $np processes reported)"
    failed=1
  fi
}
for saved_by in 2 4; do
  ckpt="$dir/np$saved_by"
  run "$saved_by" save "$ckpt"
  for p in $(seq 0 $((saved_by - 1))); do
    if ! ls "$ckpt"/process-0000"$p"-device-*.safetensors >/dev/null 2>&1; then
      echo "FAIL: process $p of $saved_by wrote no file"
      failed=1
    fi
  done
  for restored_by in 1 2 4; do
    [ "$restored_by" -eq "$saved_by" ] && [ "$saved_by" -eq 4 ] && continue
    run "$restored_by" restore "$ckpt"
  done
done
# An asynchronous save by 2 processes (the agreement and commit on the caller's thread, after its
# own relayouts), restored by 1 and 2.
run 2 save-async "$dir/async"
run 1 restore "$dir/async"
run 2 restore "$dir/async"
# A staging budget one process exceeds: every process refuses the save, none writes.
out=$(timeout -k 5 120 "$mpiexec" -np 2 $flags "$program" over-budget "$dir/over" 2>&1)
rc=$?
echo "$out"
if [ "$rc" -ne 0 ] || [ "$(grep -c '^rank [0-9]*: refused' <<<"$out")" -ne 2 ] ||
   [ -e "$dir/over" ] || [ -e "$dir/.over.tmp" ]; then
  echo "FAIL: over-budget (exit $rc)"
  failed=1
fi
[ "$failed" -eq 0 ] && echo "checkpoint_test: PASS"
exit "$failed"
