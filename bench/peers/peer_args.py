"""The command line every peer's program of bench/peers takes (jax_peer.py, torch_peer.py):
one workload and its sizes, so that the runner drives every peer with the same options; and the
programs a side-by-side driver runs (compare_pipeline.py, compare_bf16.py): tessel's CLI and the
peers' venv python."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

WORKLOADS = ("all_reduce", "relayout", "matmul", "dispatch")


def parse_peer_args(description: str, argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("workload", choices=WORKLOADS)
    ap.add_argument("--sizes", default="4096", help="all_reduce: bytes per rank, comma-separated")
    ap.add_argument("--side", type=int, default=None, help="relayout / matmul: matrix side")
    ap.add_argument("--iters", type=int, default=20, help="timed calls (median)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls first")
    ap.add_argument("--ops", type=int, default=1000, help="dispatch: ops per round")
    ap.add_argument("--rounds", type=int, default=7, help="dispatch: rounds (median)")
    args = ap.parse_args(argv)
    for name in ("iters", "ops", "rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1")
    if args.warmup < 0 or (args.side is not None and args.side < 2):
        ap.error("--warmup must be >= 0 and --side >= 2")
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes {args.sizes!r}: comma-separated byte counts")
    if any(s < 16 or s % 16 for s in sizes):
        ap.error(f"--sizes {args.sizes!r}: each a multiple of 16 bytes (4 ranks x f32)")
    args.sizes = sizes
    return args


def add_program_args(ap: argparse.ArgumentParser):
    """--tessel (the CLI, default build/tools/tessel) and --venv-python (the peers' venv)."""
    ap.add_argument("--tessel", default=str(REPO / "build" / "tools" / "tessel"))
    ap.add_argument("--venv-python", default=str(REPO / ".venv-peers" / "bin" / "python"))


def check_programs(ap: argparse.ArgumentParser, args: argparse.Namespace):
    """ap.error (exit status 2) naming --tessel or --venv-python when it is not an executable."""
    for path, what in ((args.tessel, "--tessel"), (args.venv_python, "--venv-python")):
        if not os.access(path, os.X_OK):
            ap.error(f"{what} {path}: not an executable (build tessel: make build; the venv: "
                     "scripts/peers-venv.sh)")
