"""CollectiveAllReduce across processes from Python (ctest mpi.collective_all_reduce_python_np2).

TF's MultiWorkerMirroredStrategy model: every process of `mpirun -np N` is one worker with 2 CPU
devices (the global runtime: job "worker", task = rank) and calls with its local per-replica
values; group_size is N x 2. The values of every device are generated from its global index, so
each process computes the NumPy reference of the whole reduction and checks its results.
Prints "rank R: PASS".
"""
import numpy as np

import tessel

LOCAL = 2


def value_of(g, k, n=5):
    return (np.arange(n, dtype=np.float32) * 0.5 + g + 1) * (k + 1)


def main():
    mpi = tessel.MpiEnvironment()
    rank, size = tessel.mpi_rank(), tessel.mpi_size()
    rt = tessel.Runtime(num_cpu_devices=LOCAL, job="worker", task=rank)
    devices = [f"/job:worker/replica:0/task:{rank}/device:CPU:{d}" for d in range(LOCAL)]
    group = size * LOCAL
    ops = tessel.CollectiveAllReduce(devices, group,
                                     tessel.CommunicationOptions(timeout_seconds=30), runtime=rt)
    assert ops.num_between_graph_workers == size

    def local(k):
        return tessel.PerReplica([value_of(rank * LOCAL + d, k) for d in range(LOCAL)], devices)

    def total(k):
        return np.sum([value_of(g, k) for g in range(group)], axis=0, dtype=np.float64)

    v = local(0)
    for op, want in [(tessel.ReduceOp.SUM, total(0)), (tessel.ReduceOp.MEAN, total(0) / group),
                     (tessel.ReduceOp.MAX, value_of(group - 1, 0))]:
        got = ops.reduce(op, v, v)
        for d in range(LOCAL):
            np.testing.assert_allclose(np.asarray(got.values[d]), want, rtol=1e-6)
    pairs = [(local(k), local(k)) for k in range(3)]
    for k, m in enumerate(ops.batch_reduce(tessel.ReduceOp.SUM, pairs)):
        for d in range(LOCAL):
            np.testing.assert_allclose(np.asarray(m.values[d]), total(k), rtol=1e-6)
    gathered = np.asarray(ops.gather(v, v, 0).values[0])
    np.testing.assert_array_equal(gathered, np.concatenate([value_of(g, 0) for g in range(group)]))
    del ops, rt
    print(f"rank {rank}: PASS", flush=True)
    del mpi


if __name__ == "__main__":
    main()
