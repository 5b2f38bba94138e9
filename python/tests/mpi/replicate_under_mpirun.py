"""replicate() across processes from Python (ctest mpi.replicate_python_np2).

Every process of `mpirun -np N` is a client with 2 CPU devices (a runtime named after it: job
"worker", task = rank) and makes the same replicate() call with 2 N replicas; each runs its own
replicas and their all-reduce and all-gather cross the processes. Each process checks its
replicas' outputs against NumPy over every replica's inputs and against the same call run in
this process alone. Prints "rank R: PASS".
"""
import numpy as np

import tessel

LOCAL = 2


def run(runtime, replicas):
    xs = [np.arange(4, dtype=np.float32) + 0.5 * (r + 1) for r in range(replicas)]
    w = np.arange(1, 5, dtype=np.float32)

    def step(ctx, inputs):
        y = tessel.multiply(inputs[0], inputs[1])
        return [ctx.all_reduce(y), ctx.all_gather(inputs[0], 0),
                ctx.broadcast(inputs[0], replicas - 1), y]

    opts = tessel.ReplicateOptions(tessel.ReplicateMetadata(replicas), runtime=runtime, timeout=30)
    outs = tessel.replicate(step, [xs], [w], options=opts)
    return xs, w, [[np.asarray(tessel.to_host(d)) for d in replica] for replica in outs]


def main():
    mpi = tessel.MpiEnvironment()
    rank, size = tessel.mpi_rank(), tessel.mpi_size()
    replicas = LOCAL * size
    rt = tessel.Runtime(num_cpu_devices=LOCAL, job="worker", task=rank)
    xs, w, got = run(rt, replicas)
    _, _, one = run(tessel.Runtime(num_cpu_devices=replicas), replicas)
    names = tessel.replica_device_names(tessel.ReplicateMetadata(replicas), runtime=rt)
    mine = [r for r in range(replicas) if f"/task:{rank}/" in names[r][0]]
    assert len(mine) == LOCAL, names
    total = np.sum([x * w for x in xs], axis=0)
    for r in range(replicas):
        if r not in mine:
            assert got[r] == [], (r, got[r])
            continue
        np.testing.assert_array_equal(got[r][0], total)
        np.testing.assert_array_equal(got[r][1], np.concatenate(xs))
        np.testing.assert_array_equal(got[r][2], xs[-1])
        np.testing.assert_array_equal(got[r][3], xs[r] * w)
        for k in range(4):
            np.testing.assert_array_equal(got[r][k], one[r][k])
    print(f"rank {rank}: PASS", flush=True)
    del mpi


if __name__ == "__main__":
    main()
