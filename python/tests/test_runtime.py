"""Runtime bindings: devices, names, memory accounting, synchronize."""

import gc

import numpy as np
import pytest

import tessel
from tessel import _tessel

# tessel/__init__.py may not re-export the runtime names yet; the extension always has them.
Runtime = getattr(tessel, "Runtime", _tessel.Runtime)
Device = getattr(tessel, "Device", _tessel.Device)


def cpu(i, task=0, job="localhost", replica=0):
    return f"/job:{job}/replica:{replica}/task:{task}/device:CPU:{i}"


def test_devices_are_named_in_tensorflow_form():
    rt = Runtime(num_cpu_devices=3, job="worker", replica=1, task=2)
    assert rt.num_devices() == 3
    assert len(rt) == 3
    assert (rt.job, rt.replica, rt.task) == ("worker", 1, 2)
    names = [d.name for d in rt.devices()]
    assert names == [cpu(i, task=2, job="worker", replica=1) for i in range(3)]
    assert [d.index for d in rt.devices()] == [0, 1, 2]
    assert rt.device(1).parsed_name == tessel.DeviceName.parse(names[1])
    assert isinstance(rt.device(0), Device)
    assert "CPU:0" in repr(rt.device(0))


def test_device_count_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("TESSEL_CPU_DEVICES", "3")
    assert Runtime().num_devices() == 3
    monkeypatch.delenv("TESSEL_CPU_DEVICES")
    assert Runtime().num_devices() == 4
    monkeypatch.setenv("TESSEL_CPU_DEVICES", "lots")
    with pytest.raises(ValueError, match="TESSEL_CPU_DEVICES='lots' is not a positive integer"):
        Runtime()
    assert Runtime(num_cpu_devices=2).num_devices() == 2


def test_bad_options_raise_value_error():
    with pytest.raises(tessel.InvalidArgumentError, match=r"num_cpu_devices must be -1 or in \[1, 1024\], got 0"):
        Runtime(num_cpu_devices=0)
    with pytest.raises(ValueError, match="task -1"):
        Runtime(num_cpu_devices=1, task=-1)


def test_device_lookup_by_index_and_name():
    rt = Runtime(num_cpu_devices=2, task=1)
    assert rt.device(cpu(1, task=1)).index == 1
    assert rt.device("/device:CPU:0").name == cpu(0, task=1)
    with pytest.raises(IndexError, match="device index 2 is out of range for 2 devices"):
        rt.device(2)
    with pytest.raises(tessel.NotFoundError, match="no device '/device:CPU:7'"):
        rt.device("/device:CPU:7")
    with pytest.raises(ValueError, match="is not a device name"):
        rt.device("CPU zero")


def test_several_runtimes_have_distinct_tasks():
    host0 = Runtime(num_cpu_devices=2, task=0)
    host1 = Runtime(num_cpu_devices=2, task=1)
    names = {d.name for rt in (host0, host1) for d in rt.devices()}
    assert names == {cpu(0), cpu(1), cpu(0, task=1), cpu(1, task=1)}


def test_memory_stats_track_live_and_peak_bytes():
    rt = Runtime(num_cpu_devices=2)
    dev = rt.device(1)
    assert dev.memory_stats() == {
        "live_bytes": 0, "peak_bytes": 0, "total_allocated_bytes": 0, "num_allocations": 0,
        "limit_bytes": dev.memory_limit, "cached_bytes": 0}
    a = dev.allocate((10, 10), "f32")
    assert a.shape == (10, 10) and a.dtype == "f32"
    np.testing.assert_array_equal(a.numpy(), np.zeros((10, 10), np.float32))
    b = dev.allocate((25,), np.float64, zero_fill=False)
    stats = dev.memory_stats()
    assert stats["live_bytes"] == 600
    assert stats["peak_bytes"] == 600
    assert stats["num_allocations"] == 2
    del b
    gc.collect()
    stats = dev.memory_stats()
    assert stats["live_bytes"] == 400
    assert stats["peak_bytes"] == 600
    assert stats["total_allocated_bytes"] == 600
    dev.reset_peak_memory()
    assert dev.memory_stats()["peak_bytes"] == 400
    assert rt.device(0).memory_stats()["num_allocations"] == 0
    del a


def test_tensor_outlives_its_runtime():
    rt = Runtime(num_cpu_devices=1)
    t = rt.device(0).allocate((4,), "i32")
    dev = rt.device(0)
    del rt, dev
    gc.collect()
    t.fill(7)
    np.testing.assert_array_equal(t.numpy(), np.full(4, 7, np.int32))


def test_device_keeps_its_runtime_alive():
    devices = Runtime(num_cpu_devices=2).devices()
    gc.collect()
    assert devices[1].name == cpu(1)
    assert devices[1].memory_stats()["live_bytes"] == 0


def test_synchronize_with_and_without_timeout():
    rt = Runtime(num_cpu_devices=2)
    rt.synchronize()
    rt.synchronize(timeout_seconds=5)
    rt.synchronize(timeout_seconds=0.5)
    rt.synchronize(timeout_seconds=float("inf"))
    with pytest.raises(ValueError, match="negative timeout"):
        rt.synchronize(timeout_seconds=-1)
    with pytest.raises(ValueError, match="NaN"):
        rt.synchronize(timeout_seconds=float("nan"))


def test_global_runtime_is_shared():
    g = Runtime.global_runtime()
    assert g.num_devices() >= 1
    assert g.device(0).name == cpu(0)
    assert Runtime.global_runtime().device(0).name == g.device(0).name
    g.synchronize(timeout_seconds=5)


def test_busy_time_counts_each_devices_kernels_and_collectives(mesh):
    from conftest import host, put, rand

    rt = tessel.Runtime.global_runtime()
    devices = [rt.device(i) for i in range(4)]
    before = [d.busy_time() for d in devices]
    assert set(before[0]) == {"kernel_seconds", "communication_seconds", "kernels", "collectives"}
    a = put(rand((64, 64), 1), ("x", "unsharded"), mesh)
    w = put(rand((64, 64), 2), ("unsharded", "unsharded"), mesh)
    c = tessel.matmul(a, w)  # a block per device, no communication
    host(c)
    after_matmul = [d.busy_time() for d in devices]
    for b, m in zip(before, after_matmul):
        assert m["kernels"] > b["kernels"]
        assert m["kernel_seconds"] > b["kernel_seconds"]
    host(tessel.relayout(c, tessel.Layout(["unsharded", "unsharded"], mesh)))  # an all-gather
    after_relayout = [d.busy_time() for d in devices]
    for m, r in zip(after_matmul, after_relayout):
        assert r["collectives"] > m["collectives"]
        assert r["communication_seconds"] > m["communication_seconds"]
