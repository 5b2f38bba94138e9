"""Concurrent replicate() callers on shared devices: N threads x M calls each, every call with
the same timeout, on the default runtime (4 devices; 2 replicas on CPU:0 and CPU:1 unless
--replicas says otherwise). Prints per-call latency p50/max against the timeout and how many
calls failed, by error class.

    PYTHONPATH=build/python /usr/bin/python3 scripts/replicate_fairness.py --threads 4 \
        --calls 5 --timeout 5

--overrun S makes replica 1 sleep S seconds in its computation (user code past the deadline),
after its collectives (--overrun-at end) or before them (start): replicate() must raise
DeadlineExceededError naming replica 1 at the deadline.
"""

import argparse
import collections
import statistics
import threading
import time

import numpy as np

import tessel


def step(overrun, at):
    def body(ctx, inputs):
        if overrun and at == "start" and ctx.replica_id == 1:
            time.sleep(overrun)
        x = inputs[0]
        for _ in range(4):
            x = ctx.all_reduce(tessel.multiply(x, 0.5))
        if overrun and at == "end" and ctx.replica_id == 1:
            time.sleep(overrun)
        return [x]
    return body


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--timeout", type=float, default=5.0)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--overrun", type=float, default=0.0)
    p.add_argument("--overrun-at", choices=["start", "end"], default="end")
    a = p.parse_args()

    opts = tessel.ReplicateOptions(tessel.ReplicateMetadata(a.replicas), timeout=a.timeout)
    xs = [np.full((1024,), r + 1, np.float32) for r in range(a.replicas)]
    latencies, failures, lock = [], collections.Counter(), threading.Lock()
    messages = []

    def worker():
        for _ in range(a.calls):
            start = time.monotonic()
            try:
                tessel.replicate(step(a.overrun, a.overrun_at), [xs], options=opts)
                outcome = None
            except tessel.Error as e:
                outcome = e
            took = time.monotonic() - start
            with lock:
                latencies.append(took)
                if outcome is not None:
                    failures[type(outcome).__name__] += 1
                    messages.append(str(outcome))

    threads = [threading.Thread(target=worker) for _ in range(a.threads)]
    wall = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - wall
    print(f"threads={a.threads} calls={a.calls} timeout={a.timeout}s replicas={a.replicas} "
          f"overrun={a.overrun}s at {a.overrun_at}: p50 {statistics.median(latencies):.3f}s "
          f"max {max(latencies):.3f}s (max/timeout {max(latencies) / a.timeout:.2f}) "
          f"failed {sum(failures.values())}/{len(latencies)} {dict(failures)} wall {wall:.1f}s")
    for m in sorted(set(messages))[:3]:
        print("  e.g.", m[:300])


if __name__ == "__main__":
    main()
