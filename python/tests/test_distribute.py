"""Cross-device ops with TF's tf.distribute names: values, destinations, results, errors."""

import threading

import numpy as np
import pytest

import tessel
from conftest import client_runtimes, run_as_clients

CPU = "/job:localhost/replica:0/task:{}/device:CPU:{}"


def cpu(i, task=0):
    return CPU.format(task, i)


BOUNDED = tessel.CommunicationOptions(timeout_seconds=10)


@pytest.fixture
def rt():
    return tessel.Runtime(num_cpu_devices=4)


def per_replica(n, shape=(2,), scale=1.0, dtype=np.float32):
    """Component i holds (i + 1) * scale on CPU:i."""
    return tessel.PerReplica([np.full(shape, (i + 1) * scale, dtype) for i in range(n)],
                             [cpu(i) for i in range(n)])


def all_ops(rt):
    return [tessel.ReductionToOneDevice(runtime=rt), tessel.NcclAllReduce(runtime=rt),
            tessel.HierarchicalCopyAllReduce(runtime=rt),
            tessel.CollectiveAllReduce([cpu(0), cpu(1)], 2, runtime=rt)]


def test_names_follow_tensorflow():
    for name in ["PerReplica", "Mirrored", "DistributedValues", "IndexedSlices", "CrossDeviceOps",
                 "ReductionToOneDevice", "AllReduceCrossDeviceOps", "NcclAllReduce",
                 "HierarchicalCopyAllReduce", "CollectiveAllReduce", "CommunicationOptions",
                 "CommunicationImplementation"]:
        assert hasattr(tessel, name), name
    assert issubclass(tessel.NcclAllReduce, tessel.AllReduceCrossDeviceOps)
    assert issubclass(tessel.Mirrored, tessel.DistributedValues)
    assert {tessel.ReduceOp.SUM, tessel.ReduceOp.MEAN} <= set(tessel.ReduceOp.__members__.values())


def test_per_replica_holds_values_and_devices():
    v = tessel.PerReplica([np.arange(3, dtype=np.float32), tessel.tensor([4.0, 5.0])])
    assert v.devices == (cpu(0), cpu(1))  # default: the global runtime's first devices
    assert len(v) == 2
    assert isinstance(v.values[0], tessel.Tensor)
    np.testing.assert_array_equal(v.values[1].numpy(), [4, 5])
    assert "PerReplica:{" in repr(v)
    with pytest.raises(ValueError, match="components 0 and 1 are both on device"):
        tessel.PerReplica([[1.0], [2.0]], [cpu(0), cpu(0)])


def test_reduce_sum_and_mean_on_every_implementation(rt):
    v = per_replica(2)
    for ops in all_ops(rt):
        s = ops.reduce(tessel.ReduceOp.SUM, v, v, BOUNDED)
        assert isinstance(s, tessel.Mirrored)
        assert s.devices == (cpu(0), cpu(1))
        for x in s.values:
            np.testing.assert_array_equal(np.asarray(x), [3, 3])
        m = ops.reduce("MEAN", v, v, BOUNDED)  # TF also takes the name
        np.testing.assert_array_equal(np.asarray(m.values[1]), [1.5, 1.5])


def test_one_destination_returns_the_plain_tensor(rt):
    ops = tessel.ReductionToOneDevice(runtime=rt)
    out = ops.reduce(tessel.ReduceOp.SUM, per_replica(3), "/cpu:3", BOUNDED)
    assert isinstance(out, tessel.Tensor)  # TF's regroup of one value
    np.testing.assert_array_equal(out.numpy(), [6, 6])


def test_destination_types(rt):
    ops = tessel.NcclAllReduce(runtime=rt)
    v = per_replica(2)
    message = ("destinations must be one of a `DistributedValues` object, a tf.Variable object, "
               "or a device string.")
    for bad in [3, None, np.zeros(2), {"a": 1}, [cpu(0), 1]]:
        with pytest.raises(ValueError, match=message.replace(".", r"\.")):
            ops.reduce(tessel.ReduceOp.SUM, v, bad, BOUNDED)
    for empty in ["", [], tessel.PerReplica([], [])]:
        with pytest.raises(ValueError, match="destinations can not be empty"):
            ops.reduce(tessel.ReduceOp.SUM, v, empty, BOUNDED)
    # Accepted: a string, a list or tuple of strings (tessel), a DistributedValues.
    assert ops.reduce(tessel.ReduceOp.SUM, v, (cpu(1), cpu(0)), BOUNDED).devices == (cpu(1),
                                                                                       cpu(0))
    assert isinstance(ops.reduce(tessel.ReduceOp.SUM, v, cpu(2), BOUNDED), tessel.Tensor)
    # A tensor stands for the device holding it (TF's tensor.device): a host tensor is CPU:0.
    on_2 = rt.device(2).allocate((2,), "f32")
    np.testing.assert_array_equal(np.asarray(ops.reduce(tessel.ReduceOp.SUM, v, on_2, BOUNDED)),
                                  np.asarray(ops.reduce(tessel.ReduceOp.SUM, v, cpu(2), BOUNDED)))
    ops.reduce(tessel.ReduceOp.SUM, v, tessel.tensor([1.0]), BOUNDED)


def test_values_must_be_distributed(rt):
    ops = tessel.ReductionToOneDevice(runtime=rt)
    with pytest.raises(ValueError, match="expected a object that is not a tuple or list"):
        ops.reduce(tessel.ReduceOp.SUM, [np.ones(2), np.ones(2)], cpu(0))
    with pytest.raises(ValueError, match="because it doesn't have device set"):
        ops.reduce(tessel.ReduceOp.SUM, np.ones(2), cpu(0))
    with pytest.raises(ValueError, match="`per_replica_value` must be non-empty"):
        ops.reduce(tessel.ReduceOp.SUM, tessel.PerReplica([], []), cpu(0))


def test_single_replica_shortcut(rt):
    ops = tessel.NcclAllReduce(runtime=rt)
    x = tessel.tensor(np.array([3.0, 9.0], np.float32))
    one = tessel.PerReplica([x], [cpu(1)])
    out = ops.reduce(tessel.ReduceOp.MEAN, one, cpu(1), BOUNDED)
    assert isinstance(out, tessel.Tensor)
    assert not out.shares_storage_with(x)  # an identity copy, not divided by 1
    np.testing.assert_array_equal(out.numpy(), [3, 9])
    assert ops.last_plan()["path"] == "single_replica_shortcut"
    (same,) = ops.batch_reduce(tessel.ReduceOp.SUM, [(one, one)], BOUNDED)
    assert same.shares_storage_with(x)  # batch_reduce returns the values themselves


def test_batch_reduce_normalisation_and_empty_batch(rt):
    ops = tessel.NcclAllReduce(runtime=rt)
    v = per_replica(2)
    assert ops.batch_reduce(tessel.ReduceOp.SUM, []) == []
    assert ops.last_plan()["path"] == "empty"
    with pytest.raises(ValueError, match="`value_destination_pairs` should be a list or tuple"):
        ops.batch_reduce(tessel.ReduceOp.SUM, v)
    with pytest.raises(ValueError, match="should be a tuple\\.$"):
        ops.batch_reduce(tessel.ReduceOp.SUM, [[v, v]])
    with pytest.raises(ValueError, match="should be a tuple of size 2"):
        ops.batch_reduce(tessel.ReduceOp.SUM, [(v, v, v)])
    a, b = ops.batch_reduce(tessel.ReduceOp.SUM, [(v, v), (per_replica(2, scale=10), v)], BOUNDED)
    np.testing.assert_array_equal(np.asarray(a.values[0]), [3, 3])
    np.testing.assert_array_equal(np.asarray(b.values[1]), [30, 30])


def test_num_packs_issue_exactly_that_many_all_reduces(rt):
    pairs = []
    for k in range(5):
        v = tessel.PerReplica([np.full((k + 1, 2), d + 1, np.float32) for d in range(3)],
                              [cpu(d) for d in range(3)])
        pairs.append((v, v))
    for num_packs, expected in [(0, 5), (1, 1), (2, 2), (4, 4)]:
        ops = tessel.NcclAllReduce(num_packs=num_packs, runtime=rt)
        out = ops.batch_reduce(tessel.ReduceOp.SUM, pairs, BOUNDED)
        plan = ops.last_plan()
        assert plan["num_collectives"] == expected
        assert ops.num_collectives == expected
        assert sum(s["num_elements"] for s in plan["steps"]) == 30
        for k, m in enumerate(out):
            np.testing.assert_array_equal(np.asarray(m.values[2]), np.full((k + 1, 2), 6))
    with pytest.raises(ValueError, match="NCCL all-reduce requires num_packs >= 0, but -1"):
        tessel.NcclAllReduce(num_packs=-1, runtime=rt)
    with pytest.raises(ValueError, match="HierarchicalCopy requires num_packs >= 0, but -1"):
        tessel.HierarchicalCopyAllReduce(num_packs=-1, runtime=rt)
    assert tessel.split_into_packs(10, 3) == [3, 3, 4]
    assert tessel.group_by_size([400, 400, 400, 400], 500) == [[0, 1], [2, 3]]


def test_mean_counts_per_implementation(rt):
    v = per_replica(3)  # 1 + 2 + 3
    r2od = tessel.ReductionToOneDevice(runtime=rt)
    np.testing.assert_array_equal(r2od.reduce("MEAN", v, cpu(3), BOUNDED).numpy(), [2, 2])
    assert r2od.last_plan()["mean_divisors"] == [3]  # len(values)
    nccl = tessel.NcclAllReduce(runtime=rt)
    nccl.reduce("MEAN", v, v, BOUNDED)
    assert nccl.last_plan()["mean_divisors"] == [3]  # len(destinations) * workers
    coll = tessel.CollectiveAllReduce([cpu(0), cpu(1), cpu(2)], 3, runtime=rt)
    coll.reduce("MEAN", v, v, BOUNDED)
    assert coll.last_plan()["mean_divisors"] == [3]  # group_size
    with pytest.raises(ValueError, match="group_size must be divisible by the number of devices"):
        tessel.CollectiveAllReduce([cpu(0), cpu(1), cpu(2)], 4, runtime=rt)


def test_collective_mean_divides_by_the_whole_group():
    # Two workers (task 0 and task 1) of two devices each, one thread each: group_size 4.
    runtimes = [tessel.Runtime(num_cpu_devices=2, task=t) for t in range(2)]
    results = [None, None]
    errors = []

    def worker(t):
        try:
            ops = tessel.CollectiveAllReduce([cpu(0, t), cpu(1, t)], 4, BOUNDED,
                                             runtime=runtimes[t])
            assert ops.num_between_graph_workers == 2
            v = tessel.PerReplica([np.float32([1 + 2 * t]), np.float32([2 + 2 * t])],
                                  [cpu(0, t), cpu(1, t)])
            results[t] = np.asarray(ops.reduce(tessel.ReduceOp.MEAN, v, v).values[0])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    for r in results:
        np.testing.assert_array_equal(r, [2.5])  # (1 + 2 + 3 + 4) / 4


def test_missing_worker_is_a_timeout():
    runtime = tessel.Runtime(num_cpu_devices=2, task=5)
    ops = tessel.CollectiveAllReduce([cpu(0, 5), cpu(1, 5)], 4,
                                     tessel.CommunicationOptions(timeout_seconds=0.2),
                                     runtime=runtime)
    v = tessel.PerReplica([np.ones(1), np.ones(1)], [cpu(0, 5), cpu(1, 5)])
    with pytest.raises(TimeoutError, match="only 2 of 4 devices joined"):
        ops.reduce(tessel.ReduceOp.SUM, v, v)


def test_indexed_slices_reduce_by_concatenation(rt):
    s0 = tessel.IndexedSlices(np.float32([[1, 2]]), np.int64([2]), (4, 2))
    s1 = tessel.IndexedSlices(np.float32([[3, 4], [5, 6]]), np.int64([2, 0]), (4, 2))
    v = tessel.PerReplica([s0, s1], [cpu(0), cpu(1)])
    out = tessel.ReductionToOneDevice(runtime=rt).reduce("MEAN", v, cpu(0), BOUNDED)
    assert isinstance(out, tessel.IndexedSlices)
    np.testing.assert_array_equal(out.indices.numpy(), [2, 2, 0])  # duplicates kept
    np.testing.assert_array_equal(out.values.numpy(), [[0.5, 1], [1.5, 2], [2.5, 3]])
    assert out.dense_shape == (4, 2)
    np.testing.assert_array_equal(out.to_dense().numpy(), [[2.5, 3], [0, 0], [2, 3], [0, 0]])
    with pytest.raises(ValueError, match="`reduce_op` must be Reduce.SUM or Reduce.MEAN."):
        tessel.NcclAllReduce(runtime=rt).reduce(tessel.ReduceOp.MAX, v, v, BOUNDED)


def test_gather(rt):
    v = tessel.PerReplica([np.float32([[1], [2]]), np.float32([[3]])], [cpu(0), cpu(1)])
    for ops in all_ops(rt):
        out = ops.gather(v, v, 0, BOUNDED)
        for x in out.values:
            np.testing.assert_array_equal(np.asarray(x), [[1], [2], [3]])
        s = tessel.IndexedSlices(np.float32([[1]]), np.int64([0]), (2, 1))
        with pytest.raises(NotImplementedError,
                           match="gather/all_gather does not support IndexedSlices"):
            ops.gather(s, cpu(0), 0)
        with pytest.raises(NotImplementedError,
                           match="gather/all_gather does not support IndexedSlices"):
            ops.gather(tessel.PerReplica([s, s], [cpu(0), cpu(1)]), cpu(0), 0)


def test_broadcast(rt):
    ops = tessel.CrossDeviceOps(runtime=rt)
    out = ops.broadcast(np.float32([7, 8]), [cpu(2), cpu(0)])
    assert isinstance(out, tessel.Mirrored)
    assert out.devices == (cpu(2), cpu(0))
    np.testing.assert_array_equal(np.asarray(out.values[0]), [7, 8])
    with pytest.raises(NotImplementedError, match="_reduce method must be implemented"):
        ops.reduce(tessel.ReduceOp.SUM, per_replica(2), cpu(0))


def test_accumulation_fn_is_a_python_callable(rt):
    calls = []

    def add_n_times_ten(tensors):
        calls.append(len(tensors))
        return tessel.tensor(10 * sum(np.asarray(t) for t in tensors))

    ops = tessel.ReductionToOneDevice(accumulation_fn=add_n_times_ten, runtime=rt)
    out = ops.reduce(tessel.ReduceOp.SUM, per_replica(3), cpu(0), BOUNDED)
    np.testing.assert_array_equal(out.numpy(), [60, 60])
    assert calls == [3]


def test_communication_options():
    o = tessel.CommunicationOptions()
    assert (o.bytes_per_pack, o.timeout_seconds, o.implementation) == (
        0, None, tessel.CommunicationImplementation.AUTO)
    assert tessel.CommunicationOptions(implementation="ring").implementation == \
        tessel.CommunicationImplementation.RING
    with pytest.raises(ValueError, match="bytes_per_pack must be non-negative"):
        tessel.CommunicationOptions(bytes_per_pack=-1)
    for bad in ["gloo", 3]:
        with pytest.raises(ValueError, match="implementation should be a "
                           "tf.distribute.experimental.CommunicationImplementation"):
            tessel.CommunicationOptions(implementation=bad)
    merged = tessel.CommunicationOptions(100, 5.0, "NCCL").merge(
        tessel.CommunicationOptions(timeout_seconds=1.0))
    assert merged == tessel.CommunicationOptions(100, 1.0, tessel.CommunicationImplementation.NCCL)
    assert "implementation=NCCL" in repr(merged)


def test_reduce_releases_the_gil(rt):
    # Another Python thread runs while reductions work.
    ops = tessel.NcclAllReduce(runtime=rt)
    v = per_replica(4, shape=(1 << 16,))
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.0005)

    t = threading.Thread(target=ticker)
    t.start()
    for _ in range(20):
        ops.reduce(tessel.ReduceOp.SUM, v, v, BOUNDED)
    stop.set()
    t.join(timeout=10)
    assert ticks


def test_reduce_non_distributed_value(rt):
    x = tessel.tensor(np.float32([4, 5]))
    same = tessel.reduce_non_distributed_value(tessel.ReduceOp.MEAN, x, cpu(0), 4, runtime=rt)
    assert same.shares_storage_with(x)
    assert tessel.reduce_non_distributed_value(tessel.ReduceOp.SUM, 0, cpu(0), 4) == 0
    with pytest.raises(ValueError, match="cannot be reduced with the given reduce op"):
        tessel.reduce_non_distributed_value(tessel.ReduceOp.SUM, x, cpu(0), 2, runtime=rt)
    with pytest.raises(ValueError, match="You are passing a `DistributedValues` to "
                       "`reduce_non_distributed_value`, which is not allowed."):
        tessel.reduce_non_distributed_value("SUM", per_replica(2), cpu(0), 1, runtime=rt)
    out = tessel.reduce_non_distributed_value("SUM", x, [cpu(1), cpu(0)], 1, runtime=rt)
    assert isinstance(out, tessel.Mirrored) and out.devices == (cpu(1), cpu(0))


def test_errors_in_accumulation_fn_surface_naming_the_step(rt):
    def broken(tensors):
        raise KeyError("no sum today")

    ops = tessel.ReductionToOneDevice(accumulation_fn=broken, runtime=rt)
    with pytest.raises(RuntimeError, match="reduce_to_one on .*CPU:1 failed: .*no sum today"):
        ops.reduce(tessel.ReduceOp.SUM, per_replica(2), cpu(1), BOUNDED)
    # The devices keep working.
    np.testing.assert_array_equal(
        tessel.NcclAllReduce(runtime=rt).reduce("SUM", per_replica(2), cpu(0), BOUNDED).numpy(),
        [3, 3])


def test_collective_spans_simulated_clients():
    # A program running as two clients (make_in_process_cluster, as under mpirun): each client is
    # one worker with its own Runtime and calls with its local values; the group is every
    # client's devices. The sums are checked against NumPy over all four devices' values.
    runtimes = client_runtimes(2)
    name = "/job:worker/replica:0/task:{}/device:CPU:{}"
    values = [np.arange(6, dtype=np.float32) * (g + 1) + 0.25 * g for g in range(4)]

    def client(c):
        devices = [name.format(c, d) for d in range(2)]
        ops = tessel.CollectiveAllReduce(devices, 4, BOUNDED, runtime=runtimes[c])
        v = tessel.PerReplica([values[2 * c], values[2 * c + 1]], devices)
        w = tessel.PerReplica([2 * values[2 * c], 2 * values[2 * c + 1]], devices)
        got = [np.asarray(m.values[1])
               for m in ops.batch_reduce(tessel.ReduceOp.SUM, [(v, v), (w, w)])]
        return got + [np.asarray(ops.reduce(tessel.ReduceOp.MEAN, v, v).values[0])]

    results = run_as_clients(runtimes, client, timeout=30)
    total = np.sum(values, axis=0)
    for got in results:
        np.testing.assert_allclose(got[0], total, rtol=1e-6)
        np.testing.assert_allclose(got[1], 2 * total, rtol=1e-6)
        np.testing.assert_allclose(got[2], total / 4, rtol=1e-6)


def test_collective_group_size_must_match_the_clients():
    clusters = tessel.make_in_process_cluster(2)
    rt = tessel.Runtime(num_cpu_devices=2, job="worker", task=0)
    tessel.set_cluster(rt, clusters[0])
    devices = ["/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:1"]
    ops = tessel.CollectiveAllReduce(devices, 6, BOUNDED, runtime=rt)
    v = tessel.PerReplica([np.ones(1), np.ones(1)], devices)
    with pytest.raises(tessel.InvalidArgumentError, match="makes 3 workers, but this program runs as 2 clients"):
        ops.reduce(tessel.ReduceOp.SUM, v, v)
    tessel.set_cluster(rt, None)
