#!/usr/bin/env bash
# Runs every fuzzer built in <build dir>/fuzz (fuzz/CMakeLists.txt's list) for <seconds> each,
# <jobs> at a time, on a writable corpus under <build dir>/corpus/<name> seeded from
# fuzz/corpus/<name>, with fuzz/layout.dict. Crashes land in <build dir>/artifacts/. Prints each
# fuzzer's executions and corpus size; exits non-zero if any fuzzer finds something.
# Usage: fuzz/run_fuzzers.sh <build dir> <seconds> [jobs]
set -euo pipefail
build=${1:?usage: run_fuzzers.sh <build dir> <seconds> [jobs]}
seconds=${2:?usage: run_fuzzers.sh <build dir> <seconds> [jobs]}
jobs=${3:-1}
src=$(cd "$(dirname "$0")" && pwd)
names=(mesh_from_string layout_from_string mesh_from_proto layout_from_proto device_name_parse
       shape_parse system_messages checkpoint_files)
mkdir -p "$build/artifacts"

# One fuzzer: its summary line on stdout, the log's tail too when it found something.
run_one() {
  local name=$1 fuzzer="$build/fuzz/$1_fuzzer" corpus="$build/corpus/$1" log="$build/fuzz-$1.log"
  mkdir -p "$corpus"
  cp -n "$src/corpus/$name/"* "$corpus/"  # seeds; keeps what earlier runs found
  local rc=0
  "$fuzzer" -max_total_time="$seconds" -dict="$src/layout.dict" -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/${name}-" "$corpus" >"$log" 2>&1 || rc=$?
  local execs
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "fuzz: ${name}_fuzzer: ${seconds}s, ${execs:-?} executions, corpus $(ls "$corpus" | wc -l) files, exit $rc (log: $log)"
  if [ "$rc" -ne 0 ]; then
    tail -40 "$log"
    return 1
  fi
}
export -f run_one
export build seconds src

printf '%s\n' "${names[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}'
