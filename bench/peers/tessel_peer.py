"""tessel's Python side of bench/peers: the eager-dispatch workload through the Python module.

    PYTHONPATH=build/python /usr/bin/python3 bench/peers/tessel_peer.py dispatch --ops 1000

Runs under Debian's python with tessel's module (numpy 1.x); the other workloads' tessel side
is the CLI's benches (`tessel bench all_reduce|relayout|matmul|gpt --json`), which the runner
calls directly. Prints one JSON object in the peers' format:
{"peer": "tessel", "versions": {...}, "rows": [{"case", "time_us", "wrong"}]}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

import tessel


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workload", choices=("dispatch",))
    ap.add_argument("--ops", type=int, default=1000, help="ops per round")
    ap.add_argument("--rounds", type=int, default=7, help="rounds (median)")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    mesh = tessel.create_mesh([("x", 2), ("y", 2)])
    x = tessel.copy_to_mesh(np.ones((4, 4), np.float32), tessel.Layout(["x", "y"], mesh))
    per_op = []
    for r in range(args.rounds + 1):  # round 0 warms up
        t0 = time.perf_counter()
        for _ in range(args.ops):
            y = tessel.add(x, x)  # eager: sharding rule + one kernel per device's stream
        tessel.unpack(y)  # waits for every device's stream
        if r:
            per_op.append((time.perf_counter() - t0) * 1e6 / args.ops)
    wrong = int((tessel.to_host(y) != 2).sum())
    print(json.dumps({"peer": "tessel", "workload": args.workload,
                      "versions": {"tessel": tessel.__version__, "numpy": np.__version__},
                      "rows": [{"case": "add [4,4] f32 on 2x2",
                                "time_us": statistics.median(per_op), "wrong": wrong}]}))


if __name__ == "__main__":
    sys.exit(main())
