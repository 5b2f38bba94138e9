#!/usr/bin/env python3
"""Kills (SIGKILL) a process that saves checkpoints at random moments and checks that restore
always finds the newest complete checkpoint and never a partial one.

    PYTHONPATH=build/python scripts/checkpoint_crash_test.py [--runs 20] [--max-delay 1.5]
        [--size 8M] [--seed S] [--keep 2]

Each run starts a child that makes a CheckpointManager in a fresh directory and saves steps
1, 2, 3, ... (alternately synchronous and asynchronous: run k uses async when k is odd), each
state a 2x2-sharded f32 tensor of --size bytes filled with the step number plus the step as a
plain value, and prints "committed N" once save N is committed: synchronously when it returns,
asynchronously when save N+1 returns (which waits for save N first; save N+1 then writes in the
background while the child goes on to make the next state).
Once the child has committed step 1, the driver waits a random time in [0, --max-delay] s and
sends SIGKILL. Then, in the driver (a fresh process, as after a crash):
  - every committed step directory (CheckpointManager.all_steps) must pass verify() (sizes and
    crc32c of every file) and restore to its own step's values: no partial checkpoint is ever
    visible under a final name;
  - latest_step() must be the newest step the child reported committed, or one after it (killed
    after its commit but before printing), or, asynchronously, two after it (save N+2 committed in
    the background before the child printed N+1);
  - a new save through a new manager must succeed and remove the crashed save's leftovers.
A run "passes" when all hold. Prints one line per run and a summary; exit status 0 when every run
passes, 1 otherwise. The ctest checkpoint.crash (label stress) runs it.
"""

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import tessel
    from tessel import checkpoint as ckpt
    directory, rows, use_async, keep = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
    mesh = tessel.create_mesh([("x", 2), ("y", 2)])
    layout = tessel.Layout(["x", "y"], mesh)
    manager = ckpt.CheckpointManager(directory, max_to_keep=keep)
    step = 0
    while True:
        step += 1
        w = tessel.copy_to_mesh(np.full((rows, 1024), step, np.float32), layout)
        manager.save(step, {"w": w, "step": step}, async_=use_async)
        if not use_async:
            print("committed", step, flush=True)
        elif step > 1:  # an asynchronous save returns once the previous one is committed
            print("committed", step - 1, flush=True)
""")


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1:].upper() in units:
        return int(float(text[:-1]) * units[text[-1:].upper()])
    return int(text)


def check(directory, committed, rows, in_flight):
    """The verdict on a killed run's directory: (ok, message)."""
    import numpy as np
    import tessel
    from tessel import checkpoint as ckpt
    mesh = tessel.create_mesh([("x", 2), ("y", 2)])
    layout = tessel.Layout(["x", "y"], mesh)
    manager = ckpt.CheckpointManager(directory)
    steps = manager.all_steps()
    for step in steps:
        path = manager.step_directory(step)
        try:
            ckpt.verify(path)
            back = manager.restore(step, {"w": layout})
        except Exception as e:  # a committed checkpoint that does not load: the failure sought
            return False, f"step {step} is committed but does not load: {e}"
        if back["step"] != step or not (tessel.to_host(back["w"]) == step).all():
            return False, f"step {step} restores another step's data"
    latest = manager.latest_step()
    if latest is None or not committed <= latest <= committed + in_flight:
        return False, f"latest step {latest}, the child had committed {committed}"
    leftovers = [n for n in os.listdir(directory) if n.endswith(".tmp")]
    manager.save(latest + 100, {"w": tessel.copy_to_mesh(np.zeros((rows, 1024), np.float32),
                                                         layout)})
    after = [n for n in os.listdir(directory) if n.endswith(".tmp")]
    if after:
        return False, f"leftovers not removed: {after}"
    return True, f"latest {latest} (child committed {committed}), {len(steps)} committed, " \
                 f"leftovers {leftovers}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--max-delay", type=float, default=1.5)
    parser.add_argument("--size", default="8M")
    parser.add_argument("--keep", type=int, default=2)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--dir", default=None, help="where to make the runs' directories")
    args = parser.parse_args()
    if args.runs < 1 or args.max_delay < 0:
        parser.error("--runs must be >= 1 and --max-delay >= 0")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    rows = max(2, parse_size(args.size) // 4096)
    print(f"checkpoint_crash_test: {args.runs} runs, {rows * 4096} bytes per checkpoint, "
          f"seed {seed}", flush=True)
    passed = 0
    for run in range(args.runs):
        directory = tempfile.mkdtemp(prefix="tessel-crash-", dir=args.dir)
        use_async = run % 2 == 1
        child = subprocess.Popen([sys.executable, "-c", CHILD, directory, str(rows),
                                  "1" if use_async else "0", str(args.keep)],
                                 stdout=subprocess.PIPE, text=True, env=os.environ)
        committed = 0
        line = child.stdout.readline()  # the first commit (or EOF if the child failed)
        if line.startswith("committed"):
            committed = int(line.split()[1])
            delay = rng.uniform(0, args.max_delay)
            time.sleep(delay)
            child.kill()
            rest = child.stdout.read()
            for line in rest.splitlines():
                if line.startswith("committed"):
                    committed = int(line.split()[1])
            child.wait()
            ok, message = check(directory, committed, rows, 2 if use_async else 1)
        else:
            child.kill()
            child.wait()
            delay, ok, message = 0.0, False, f"the child did not commit step 1 ({line!r})"
        passed += ok
        print(f"run {run:2d} {'async' if use_async else 'sync '} kill after {delay:5.3f} s: "
              f"{'pass' if ok else 'FAIL'}: {message}", flush=True)
        shutil.rmtree(directory, ignore_errors=True)
    print(f"checkpoint_crash_test: {passed} of {args.runs} runs passed", flush=True)
    if passed == args.runs:
        print("checkpoint_crash_test: PASS")
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
