"""Execution-device resolution (TF's GetTPUCompilationAndExecutionDevices) and the device order
modes of DeviceAssignment.build (TF's DeviceOrderMode), checked against TF's tests and docstrings
and against a NumPy reference of the mesh order."""
import itertools

import numpy as np
import pytest

import tessel


def worker_devices(tasks, cores):
    devices = ["/job:localhost/replica:0/task:0/device:CPU:0"]
    for t in range(tasks):
        devices.append(f"/job:worker/replica:0/task:{t}/device:CPU:0")
        devices.append(f"/job:worker/replica:0/task:{t}/device:TPU_SYSTEM:0")
        devices += [f"/job:worker/replica:0/task:{t}/device:TPU:{c}" for c in range(cores)]
    return devices


def test_full_mesh_places_replica_i_on_core_i_in_task_order():
    r = tessel.compilation_and_execution_devices(worker_devices(2, 4), 8)
    assert r.compilation_device == "/job:worker/replica:0/task:0/device:CPU:0"
    assert [d[0].device for d in r.execution_devices] == [
        f"/job:worker/replica:0/task:{i // 4}/device:TPU:{i % 4}" for i in range(8)]
    assert r.execution_devices[5][0].host == "/job:worker/replica:0/task:1/device:CPU:0"
    assert r.xla_device_assignment == []


def test_topology_and_assignment_give_devices_and_xla_ids():
    topology = tessel.Topology.for_hosts(2, 2, "TPU")  # device d of task t at (d, t, 0, 0)
    r = tessel.compilation_and_execution_devices(worker_devices(2, 2), 2, 2, topology,
                                                 [0, 1, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0])
    assert [[d.device for d in rep] for rep in r.execution_devices] == [
        ["/job:worker/replica:0/task:1/device:TPU:0", "/job:worker/replica:0/task:1/device:TPU:1"],
        ["/job:worker/replica:0/task:0/device:TPU:1", "/job:worker/replica:0/task:0/device:TPU:0"]]
    assert r.xla_device_assignment == [[2, 3], [1, 0]]


@pytest.mark.parametrize("devices,text", [
    (["/job:localhost/replica:0/task:0/device:CPU:0"], "no TPU_SYSTEM devices found"),
    (["/job:a/replica:0/task:0/device:TPU_SYSTEM:0", "/job:b/replica:0/task:0/device:TPU_SYSTEM:0"],
     "found TPU_SYSTEM devices with conflicting jobs 'a' and 'b'"),
    (worker_devices(1, 2) + ["/job:worker/replica:0/task:1/device:TPU_SYSTEM:0",
                             "/job:worker/replica:0/task:1/device:TPU:0"],
     "expected the number of TPU devices per host to be 2, got 1"),
])
def test_device_set_errors(devices, text):
    with pytest.raises(ValueError, match=text):
        tessel.compilation_and_execution_devices(devices, 1)


def test_metadata_errors_follow_tfs_order():
    devices = worker_devices(2, 1)
    with pytest.raises(ValueError, match="'num_replicas' must be equal to 1 or 2, got 8"):
        tessel.compilation_and_execution_devices(devices, 8)
    with pytest.raises(ValueError, match="'num_cores_per_replica' must be equal to 1, got 2"):
        tessel.compilation_and_execution_devices(devices, 2, 2)
    with pytest.raises(ValueError, match="must not be set when 'topology' is not set"):
        tessel.compilation_and_execution_devices(devices, 2, device_assignment=[0])
    with pytest.raises(ValueError, match=r"'num_tasks' in 'topology' \(1\), got 2"):
        tessel.compilation_and_execution_devices(devices, 2, 1, tessel.Topology.for_hosts(1, 1))
    with pytest.raises(ValueError, match=r"'mesh_shape' must be rank 4, got rank 1"):
        tessel.compilation_and_execution_devices(devices, 2, 1,
                                                 tessel.Topology(mesh_shape=[2],
                                                                 device_coordinates=[[[0]], [[1]]]))
    two = tessel.Topology.for_hosts(2, 1, "TPU")
    with pytest.raises(ValueError, match=r"\(2 \* 1 \* 4\), got 0"):  # empty is not "build one"
        tessel.compilation_and_execution_devices(devices, 2, 1, two)
    with pytest.raises(ValueError, match=r"'device_assignment' has duplicate device coordinate"):
        tessel.compilation_and_execution_devices(devices, 2, 1, two, [0, 0, 0, 0, 0, 0, 0, 0])


def chips(x, y, z, cores):
    coords = [[[i, j, k, c] for c in range(cores)]
              for k in range(z) for j in range(y) for i in range(x)]
    return tessel.Topology(mesh_shape=[x, y, z, cores], device_coordinates=coords, device_type="TPU")


def test_device_order_mode_values_are_tfs():
    assert [int(m) for m in (tessel.DeviceOrderMode.AUTO, tessel.DeviceOrderMode.RING,
                             tessel.DeviceOrderMode.MESH)] == [0, 1, 2]


def test_full_replication_follows_the_ring_and_mesh_keeps_the_grid():
    t = chips(2, 2, 1, 2)
    auto = tessel.DeviceAssignment.build(t, [1, 1, 1, 2], num_replicas=4)
    assert [auto.coordinates(r, 0)[:2] for r in range(4)] == [(0, 0), (1, 0), (1, 1), (0, 1)]
    ring = tessel.DeviceAssignment.build(t, [1, 1, 1, 2], num_replicas=4,
                                         device_order_mode=tessel.DeviceOrderMode.RING)
    assert ring == auto
    mesh = tessel.DeviceAssignment.build(t, [1, 1, 1, 2], num_replicas=4,
                                         device_order_mode=tessel.DeviceOrderMode.MESH)
    # NumPy reference of TF's mesh order: replica grid [2, 2, 1, 1], x fastest after the core dim.
    grid = np.stack(np.meshgrid(np.arange(2), np.arange(2), indexing="ij"), -1)
    expected = grid.transpose(1, 0, 2).reshape(-1, 2)
    assert mesh.core_assignment[:, 0, :2].tolist() == expected.tolist()


def test_ring_is_a_closed_walk_through_every_chip():
    t = chips(4, 4, 2, 2)
    da = tessel.DeviceAssignment.build(t, [1, 1, 1, 2], num_replicas=32)
    chips_in_order = da.core_assignment[:, 0, :3]
    assert len({tuple(c) for c in chips_in_order.tolist()}) == 32
    steps = np.abs(np.diff(np.vstack([chips_in_order, chips_in_order[:1]]), axis=0)).sum(axis=1)
    assert (steps == 1).all()


def test_ring_where_the_tiling_does_not_apply_is_tfs_error():
    t = chips(2, 2, 1, 2)
    for shape, stride, replicas in [([1, 1, 1, 1], None, 8), ([1, 1, 1, 2], [2, 1, 1, 1], 2),
                                    ([1, 1, 1, 2], None, 3)]:
        with pytest.raises(ValueError, match="device_order_mode=DeviceOrderMode.RING is not "
                                             "compatible with the 3D tiling current topology"):
            tessel.DeviceAssignment.build(t, shape, stride, replicas,
                                          tessel.DeviceOrderMode.RING)
        assert tessel.DeviceAssignment.build(t, shape, stride, replicas) == \
            tessel.DeviceAssignment.build(t, shape, stride, replicas, tessel.DeviceOrderMode.MESH)
