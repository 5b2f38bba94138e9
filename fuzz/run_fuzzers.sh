#!/usr/bin/env bash
# Runs every fuzzer built in <build dir>/fuzz for <seconds> each, on a writable corpus under
# <build dir>/corpus/<name> seeded from fuzz/corpus/<name>, with fuzz/layout.dict.
# Crashes land in <build dir>/artifacts/. Exits non-zero if any fuzzer finds something.
# Usage: fuzz/run_fuzzers.sh <build dir> <seconds>
set -euo pipefail
build=${1:?usage: run_fuzzers.sh <build dir> <seconds>}
seconds=${2:?usage: run_fuzzers.sh <build dir> <seconds>}
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build/artifacts"

status=0
for name in mesh layout; do
  fuzzer="$build/fuzz/${name}_from_string_fuzzer"
  corpus="$build/corpus/$name"
  log="$build/fuzz-$name.log"
  mkdir -p "$corpus"
  cp -n "$src/corpus/$name/"* "$corpus/"  # seeds; keeps what earlier runs found
  echo "fuzz: ${name}_from_string_fuzzer for ${seconds}s (log: $log)"
  rc=0
  "$fuzzer" -max_total_time="$seconds" -dict="$src/layout.dict" -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/${name}-" "$corpus" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "fuzz: ${name}_from_string_fuzzer: ${execs:-?} executions, corpus $(ls "$corpus" | wc -l) files, exit $rc"
  if [ "$rc" -ne 0 ]; then
    tail -40 "$log"
    status=1
  fi
done
exit $status
