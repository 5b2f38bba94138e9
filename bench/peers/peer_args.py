"""The command line every peer's program of bench/peers takes (jax_peer.py, torch_peer.py):
one workload and its sizes, so that the runner drives every peer with the same options."""

from __future__ import annotations

import argparse

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
