"""The PyTorch side of bench/peers: torch.distributed over gloo and DTensor, one process per rank.

    .venv-peers/bin/python -m torch.distributed.run --standalone --nproc-per-node 4 \
        bench/peers/torch_peer.py all_reduce --sizes 4096,65536 --iters 20
    ... torch_peer.py relayout --side 4096 | matmul --side 2048 (2 processes) | dispatch --ops 1000

Launched by torchrun as its users launch it (which also sets OMP_NUM_THREADS=1 per process),
gloo over the loopback interface. Timing is defined as in `tessel bench` and the MPI baseline:
the ranks meet at a barrier before each call, each rank times its own call, one call's time is
the slowest rank's (an all-reduce MAX of the per-call times after the timed loop), the result
is the median over the timed calls. Rank 0 prints one JSON object:
{"peer": "torch", "versions": {...}, "rows": [{"case", "time_us", "wrong", ...}]}.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

from peer_args import parse_peer_args


def parse_args(argv=None):
    return parse_peer_args(__doc__.split("\n")[0], argv)


def slowest_rank_median_us(call, iters, warmup, prepare=None):
    """Barrier, time `call` on each rank; per call the slowest rank's time; the median."""
    for _ in range(warmup):
        if prepare:
            prepare()
        dist.barrier()
        call()
    times = torch.zeros(iters, dtype=torch.float64)
    for i in range(iters):
        if prepare:
            prepare()
        dist.barrier()
        t0 = time.perf_counter()
        call()
        times[i] = (time.perf_counter() - t0) * 1e6
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return statistics.median(times.tolist())


def count_wrong(got: torch.Tensor, want: torch.Tensor) -> int:
    t = torch.tensor([int((got != want).sum())], dtype=torch.int64)
    dist.all_reduce(t)
    return int(t)


def main(argv=None):
    args = parse_args(argv)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    rows = []

    if args.workload == "all_reduce":
        for nbytes in args.sizes:
            count = nbytes // 4
            j = torch.arange(count)
            src = (1 + (j + 3 * rank) % 8).to(torch.float32)  # the values tessel and MPI use
            buf = torch.empty_like(src)
            # all_reduce is in place: refill the buffer (untimed) so each call reduces the inputs
            t_us = slowest_rank_median_us(lambda: dist.all_reduce(buf), args.iters, args.warmup,
                                          prepare=lambda: buf.copy_(src))
            buf.copy_(src)
            dist.all_reduce(buf)
            want = sum(1 + (j + 3 * r) % 8 for r in range(world)).to(torch.float32)
            rows.append({"case": nbytes, "bytes": nbytes, "count": count, "time_us": t_us,
                         "wrong": count_wrong(buf, want)})

    elif args.workload == "relayout":
        n = args.side or 4096
        mesh = init_device_mesh("cpu", (world,))
        full = torch.from_numpy(np.random.default_rng(1).uniform(-1, 1, (n, n)).astype(np.float32))
        x = distribute_tensor(full, mesh, [Shard(0)])
        for label, to in (("S(0)->S(1)", [Shard(1)]), ("S(0)->R", [Replicate()])):
            t_us = slowest_rank_median_us(lambda: x.redistribute(mesh, to).to_local(),
                                          args.iters, args.warmup)
            y = x.redistribute(mesh, to)
            wrong = count_wrong(y.full_tensor(), full)
            rows.append({"case": label, "time_us": t_us, "wrong": wrong})

    elif args.workload == "matmul":
        n = args.side or 2048
        mesh = init_device_mesh("cpu", (world,))
        rng = np.random.default_rng(2)
        a_host = torch.from_numpy(rng.uniform(-1, 1, (n, n)).astype(np.float32))
        b_host = torch.from_numpy(rng.uniform(-1, 1, (n, n)).astype(np.float32))
        a = distribute_tensor(a_host, mesh, [Shard(0)])
        b = distribute_tensor(b_host, mesh, [Replicate()])
        t_us = slowest_rank_median_us(lambda: torch.mm(a, b).to_local(), args.iters, args.warmup)
        c = torch.mm(a, b)
        assert c.placements == (Shard(0),), c.placements
        want = a_host.double() @ b_host.double()
        err = float((c.full_tensor().double() - want).abs().max() / want.abs().max())
        rows.append({"case": f"{n}^3 rows over {world}", "time_us": t_us, "rel_error": err,
                     "wrong": int(err > 1e-4)})

    else:  # dispatch
        mesh = init_device_mesh("cpu", (2, 2))
        x = distribute_tensor(torch.ones(4, 4), mesh, [Shard(0), Shard(1)])
        per_op = torch.zeros(args.rounds, dtype=torch.float64)
        for r in range(args.rounds + 1):  # round 0 warms up (sharding propagation caches)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(args.ops):
                y = x + x  # eager DTensor op: sharding propagation + the local kernel
            y.to_local()
            if r:
                per_op[r - 1] = (time.perf_counter() - t0) * 1e6 / args.ops
        dist.all_reduce(per_op, op=dist.ReduceOp.MAX)
        rows.append({"case": "add [4,4] f32 on 2x2", "time_us": statistics.median(per_op.tolist()),
                     "wrong": count_wrong(y.full_tensor(), torch.full((4, 4), 2.0))})

    if rank == 0:
        print(json.dumps({"peer": "torch", "workload": args.workload, "world": world,
                          "versions": {"torch": torch.__version__, "numpy": np.__version__,
                                       "backend": "gloo"},
                          "threads_per_rank": torch.get_num_threads(), "rows": rows}))
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
