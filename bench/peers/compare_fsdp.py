"""tessel's fully sharded GPT step beside PyTorch FSDP2's (issue 33's side-by-side figure):
`tessel train gpt --mesh Nx1 --fsdp --recompute R` (N in-process CPU devices) and
bench/peers/torch_fsdp.py (N gloo processes, fully_shard per block, torch.utils.checkpoint),
the same model, initial parameters, batches and schedule, dropout 0, alternating for --repeat
rounds. Run with Debian's python; PyTorch runs in the peers' venv (scripts/peers-venv.sh).

    /usr/bin/python3 bench/peers/compare_fsdp.py --config tiny --procs 4 --recompute full \
        --steps 10 --warmup 3 --repeat 3

Prints, per round and as medians: each side's median step time and peak bytes per device
(tessel: its device counters, the largest device; PyTorch: torch_fsdp.py's rank-0 figure),
tessel's speed as a multiple of PyTorch's (PyTorch's step time / tessel's) and tessel's peak as
a fraction of PyTorch's, and the largest loss difference between the two curves.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_json(cmd: list[str]) -> dict:
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"compare_fsdp: {' '.join(cmd)} failed ({done.returncode}):\n"
                         f"{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--recompute", choices=["none", "full"], default="full")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tessel", default=str(REPO / "build" / "tools" / "tessel"))
    ap.add_argument("--venv-python", default=str(REPO / ".venv-peers" / "bin" / "python"))
    args = ap.parse_args(argv)
    total = args.warmup + args.steps
    tessel_cmd = [args.tessel, "train", "gpt", "--config", args.config, "--mesh",
                  f"{args.procs}x1", "--fsdp", "--recompute", args.recompute, "--steps",
                  str(total), "--eval-interval", str(10 * total), "--eval-iters", "1",
                  "--sample", "0", "--dropout", "0", "--json"]
    torch_cmd = [args.venv_python, str(REPO / "bench" / "peers" / "torch_fsdp.py"), "--config",
                 args.config, "--procs", str(args.procs), "--recompute", args.recompute,
                 "--steps", str(args.steps), "--warmup", str(args.warmup), "--schedule-steps",
                 str(total), "--json"]
    print(f"# {' '.join(tessel_cmd)}\n# {' '.join(torch_cmd)}")
    print(f"{'round':>5} {'tessel ms':>10} {'torch ms':>10} {'speed x':>8} "
          f"{'tessel MiB':>11} {'torch MiB':>10} {'peak x':>7} {'max dloss':>10}  load")
    rows = []
    for r in range(args.repeat):
        load = os.getloadavg()[0]
        t = run_json(tessel_cmd)
        p = run_json(torch_cmd)
        t_ms = t["median_step_seconds"] * 1e3
        p_ms = p["median_step_s"] * 1e3
        t_peak = max(d["peak_bytes"] for d in t["memory"]["devices"])
        p_peak = p["memory"]["peak_bytes"]
        dloss = max(abs(a - b) for a, b in zip(t["losses"], p["losses"]))
        rows.append((t_ms, p_ms, p_ms / t_ms, t_peak, p_peak, t_peak / p_peak, dloss))
        print(f"{r:>5} {t_ms:>10.1f} {p_ms:>10.1f} {p_ms / t_ms:>8.2f} {t_peak / 2**20:>11.2f} "
              f"{p_peak / 2**20:>10.2f} {t_peak / p_peak:>7.2f} {dloss:>10.2e}  "
              f"{load:.1f}->{os.getloadavg()[0]:.1f}")
    med = [statistics.median(c) for c in zip(*rows)]
    print(f"{'med':>5} {med[0]:>10.1f} {med[1]:>10.1f} {med[2]:>8.2f} {med[3] / 2**20:>11.2f} "
          f"{med[4] / 2**20:>10.2f} {med[5]:>7.2f} {med[6]:>10.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
