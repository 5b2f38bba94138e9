#!/usr/bin/env bash
# train_resume_test.sh: `tessel train <model> --checkpoint-dir D --checkpoint-every N --resume`.
#
#   tools/train_resume_test.sh <tessel> <training text> [gpt|llama]   (default gpt)
#
# Trains the test model 4 steps straight with an asynchronous checkpoint every 2 steps, removes
# the step-4 checkpoint (as if the run had been killed after step 3), then resumes from step 2
# to 4 on the same mesh (2x2) and, from the same checkpoint, on another (1x4). (--steps must stay
# 4: it sets the learning-rate schedule.) The resumed steps' losses (--metrics, 6 decimals) must
# equal the straight run's on the same mesh and agree to 1e-5 relative on the other. Every run is
# under `timeout`.
set -uo pipefail
tessel="$1"
text="$2"
model="${3:-gpt}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(train "$model" --config test --eval-iters 1 --sample 0 --data "$text" --json)
run() { timeout -k 5 120 "$tessel" "${common[@]}" "$@" >/dev/null || { echo "FAIL: $*"; exit 1; }; }
losses() { grep '^train,' "$1" | cut -d, -f2,3; }
run --mesh 2x2 --steps 4 --metrics "$dir/straight.csv" --checkpoint-dir "$dir/ckpt" --checkpoint-every 2 \
    --async-checkpoint
[ -f "$dir/ckpt/step-00000002/tessel.json" ] || { echo "FAIL: no checkpoint of step 2"; exit 1; }
rm -rf "$dir/ckpt/step-00000004"
cp -r "$dir/ckpt" "$dir/ckpt_other"
run --mesh 2x2 --steps 4 --checkpoint-dir "$dir/ckpt" --resume --metrics "$dir/resumed.csv"
run --mesh 1x4 --steps 4 --checkpoint-dir "$dir/ckpt_other" --resume --metrics "$dir/other.csv"
want=$(losses "$dir/straight.csv" | tail -n 2)
got=$(losses "$dir/resumed.csv")
if [ "$want" != "$got" ]; then
  echo "FAIL: resumed losses on the same mesh differ:"; echo "$want"; echo "--"; echo "$got"; exit 1
fi
python3 - "$want" "$(losses "$dir/other.csv")" <<'PY' || exit 1
import sys
want = [float(l.split(",")[1]) for l in sys.argv[1].splitlines()]
got = [float(l.split(",")[1]) for l in sys.argv[2].splitlines()]
assert len(want) == len(got) == 2, (want, got)
for w, g in zip(want, got):
    assert abs(w - g) <= 1e-5 * abs(w) + 1e-6, ("losses on another mesh", want, got)
PY
echo "train_resume_test: PASS ($model, steps 3-4: $(echo $got | tr '\n' ' '))"
