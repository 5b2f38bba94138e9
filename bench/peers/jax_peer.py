"""The JAX side of bench/peers: one workload per run, set up as JAX's users set it up.

    .venv-peers/bin/python bench/peers/jax_peer.py all_reduce --sizes 4096,65536 --iters 20
    .venv-peers/bin/python bench/peers/jax_peer.py relayout --side 4096 --iters 10
    .venv-peers/bin/python bench/peers/jax_peer.py matmul --side 2048 --iters 5
    .venv-peers/bin/python bench/peers/jax_peer.py dispatch --ops 1000 --rounds 7

One process with 4 host CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=4, set
before jax is imported). Every collective is a jit-compiled program; the timed region is the
call and block_until_ready(), after warm-up calls (compilation is never timed). Prints one
JSON object: {"peer": "jax", "versions": {...}, "rows": [{"case", "time_us", ...}]}; a result
that differs from NumPy's counts in "wrong" (the runner fails the run if any is wrong).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

from peer_args import parse_peer_args

DEVICES = 4


def parse_args(argv=None):
    return parse_peer_args(__doc__.split("\n")[0], argv)


def timed_median_us(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def main(argv=None):
    args = parse_args(argv)
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    os.environ["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={DEVICES}"])
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    import jax
    import jax.numpy as jnp
    import jaxlib
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devices = jax.devices()
    if len(devices) < DEVICES:
        raise SystemExit(f"jax_peer: {len(devices)} devices, need {DEVICES} (XLA_FLAGS ignored?)")
    rows = []

    if args.workload == "all_reduce":
        mesh = Mesh(np.array(devices[:DEVICES]), ("x",))
        spec = NamedSharding(mesh, P("x"))
        # shard_map + psum: each device's block is its rank's buffer; the output block is the sum.
        allreduce = jax.jit(jax.shard_map(lambda a: jax.lax.psum(a, "x"), mesh=mesh,
                                          in_specs=P("x"), out_specs=P("x")))
        for nbytes in args.sizes:
            count = nbytes // 4
            j = np.arange(count)
            # rank r's element j is 1 + (j + 3r) mod 8: the values tessel bench and MPI use
            host = np.concatenate([1 + (j + 3 * r) % 8 for r in range(DEVICES)]).astype(np.float32)
            x = jax.device_put(host, spec)
            t_us = timed_median_us(lambda: allreduce(x).block_until_ready(), args.iters, args.warmup)
            want = sum(1 + (j + 3 * r) % 8 for r in range(DEVICES)).astype(np.float32)
            got = np.asarray(allreduce(x)).reshape(DEVICES, count)
            rows.append({"case": nbytes, "bytes": nbytes, "count": count, "time_us": t_us,
                         "wrong": int((got != want).sum())})

    elif args.workload == "relayout":
        n = args.side or 4096
        mesh = Mesh(np.array(devices[:DEVICES]), ("x",))
        src = NamedSharding(mesh, P("x", None))
        host = np.random.default_rng(1).uniform(-1, 1, (n, n)).astype(np.float32)
        x = jax.device_put(host, src)
        for label, dst_spec in (("S(0)->S(1)", P(None, "x")), ("S(0)->R", P(None, None))):
            dst = NamedSharding(mesh, dst_spec)
            # Two ways JAX's users move an array onto a new sharding; the faster one counts.
            reshard = jax.jit(lambda a: a, out_shardings=dst)
            ways = {"jit_reshard": lambda: reshard(x).block_until_ready(),
                    "device_put": lambda: jax.device_put(x, dst).block_until_ready()}
            times = {k: timed_median_us(f, args.iters, args.warmup) for k, f in ways.items()}
            wrong = 0
            for out in (reshard(x), jax.device_put(x, dst)):
                wrong += int((np.asarray(out) != host).sum())
                wrong += int(out.sharding != dst)
            best = min(times, key=times.get)
            rows.append({"case": label, "time_us": times[best], "method": best,
                         "methods_us": times, "wrong": wrong})

    elif args.workload == "matmul":
        n = args.side or 2048
        mesh = Mesh(np.array(devices[:2]), ("x",))
        rows_sh, rep = NamedSharding(mesh, P("x", None)), NamedSharding(mesh, P())
        rng = np.random.default_rng(2)
        a_host = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        b_host = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        a, b = jax.device_put(a_host, rows_sh), jax.device_put(b_host, rep)
        mm = jax.jit(jnp.matmul, in_shardings=(rows_sh, rep), out_shardings=rows_sh)
        t_us = timed_median_us(lambda: mm(a, b).block_until_ready(), args.iters, args.warmup)
        want = a_host.astype(np.float64) @ b_host.astype(np.float64)
        err = np.abs(np.asarray(mm(a, b)) - want).max() / np.abs(want).max()
        rows.append({"case": f"{n}^3 rows over 2", "time_us": t_us, "rel_error": float(err),
                     "wrong": int(err > 1e-4)})

    else:  # dispatch
        mesh = Mesh(np.array(devices[:4]).reshape(2, 2), ("x", "y"))
        x = jax.device_put(np.ones((4, 4), np.float32), NamedSharding(mesh, P("x", "y")))
        per_op = []
        for r in range(args.rounds + 1):  # round 0 warms up (tracing, the op cache)
            t0 = time.perf_counter()
            for _ in range(args.ops):
                y = x + x  # eager: one dispatch of jnp.add over the sharded array
            y.block_until_ready()
            if r:
                per_op.append((time.perf_counter() - t0) * 1e6 / args.ops)
        wrong = int((np.asarray(y) != 2).sum())
        rows.append({"case": "add [4,4] f32 on 2x2", "time_us": statistics.median(per_op),
                     "wrong": wrong})

    print(json.dumps({"peer": "jax", "workload": args.workload,
                      "versions": {"jax": jax.__version__, "jaxlib": jaxlib.__version__,
                                   "numpy": np.__version__},
                      "xla_flags": os.environ["XLA_FLAGS"], "rows": rows}))


if __name__ == "__main__":
    sys.exit(main())
