"""replicate() across processes from Python (ctest mpi.replicate_python_np2).

Every process of `mpirun -np N` is a client with 2 CPU devices (a runtime named after it: job
"worker", task = rank) and makes the same replicate() call with 2 N replicas; each runs its own
replicas and their all-reduce and all-gather cross the processes. Each process checks its
replicas' outputs against NumPy over every replica's inputs and against the same call run in
this process alone. The same through compile() (traced in every process, each replaying its own
replicas), and mirrored variables (SUM, MEAN, ONLY_FIRST_REPLICA) every replica updates: every
process ends with the values of the one-process call. Prints "rank R: PASS".
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


def run_compiled(runtime, replicas):
    xs = [np.arange(4, dtype=np.float32) + 0.5 * (r + 1) for r in range(replicas)]
    w = np.arange(1, 5, dtype=np.float32)

    def step(ctx, inputs):
        return [ctx.all_reduce(tessel.multiply(inputs[0], inputs[1])),
                ctx.all_gather(inputs[0], 0), ctx.broadcast(inputs[0], replicas - 1)]

    opts = tessel.CompileOptions(tessel.ReplicateMetadata(replicas), runtime=runtime, timeout=30)
    r = tessel.compile(tessel.Function("case", step),
                       [tessel.InputSpec((4,)), tessel.InputSpec((4,))], opts)
    assert r.ok(), r.status_string()
    outs = r.computation.run([xs], [w])
    return [[np.asarray(tessel.to_host(d)) for d in replica] for replica in outs]


def run_mirrored(runtime, replicas):
    """Replica r sets each variable to its value * x_r + r; returns the written-back values."""
    xs = [np.arange(4, dtype=np.float32) + 0.5 * (r + 1) for r in range(replicas)]
    w = np.arange(1, 5, dtype=np.float32)
    aggregations = [tessel.VariableAggregation.SUM, tessel.VariableAggregation.MEAN,
                    tessel.VariableAggregation.ONLY_FIRST_REPLICA]
    variables = [tessel.ReplicatedVariable.mirrored(f"v{k}", w.copy(), aggregation=a)
                 for k, a in enumerate(aggregations)]

    def step(ctx, inputs):
        total = ctx.all_reduce(inputs[0])
        for k in range(len(variables)):
            ctx.assign_variable(k, tessel.add(tessel.multiply(ctx.read_variable(k), inputs[0]),
                                              float(ctx.replica_id)))
        return [total]

    opts = tessel.ReplicateOptions(tessel.ReplicateMetadata(replicas), runtime=runtime, timeout=30)
    tessel.replicate(step, [xs], variables=variables, options=opts)
    values = np.stack([x * w + r for r, x in enumerate(xs)])
    want = [values.sum(axis=0), values.sum(axis=0) / replicas, values[0]]
    return [np.asarray(v.values[0]).copy() for v in variables], want


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

    compiled = run_compiled(rt, replicas)
    compiled_one = run_compiled(tessel.Runtime(num_cpu_devices=replicas), replicas)
    for r in range(replicas):
        if r not in mine:
            assert compiled[r] == [], (r, compiled[r])
            continue
        want = [total, np.concatenate(xs), xs[-1]]
        for k in range(3):
            np.testing.assert_array_equal(compiled[r][k], want[k])
            np.testing.assert_array_equal(compiled[r][k], compiled_one[r][k])

    values, want = run_mirrored(rt, replicas)
    values_one, _ = run_mirrored(tessel.Runtime(num_cpu_devices=replicas), replicas)
    for k in range(3):
        np.testing.assert_array_equal(values[k], want[k])
        np.testing.assert_array_equal(values[k], values_one[k])
    print(f"rank {rank}: PASS", flush=True)
    del mpi


if __name__ == "__main__":
    main()
