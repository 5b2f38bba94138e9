"""The system lifecycle (seed 102) and initialize/shutdown_accelerator_system from Python."""

import threading
import time

import numpy as np
import pytest

import tessel

SHORT = 0.15  # seconds: the deadline tests' timeout
BOUND = 5.0   # a SHORT wait must end within this


class Hosts:
    """n simulated hosts in this process: one Runtime and Host each, the coordinator on task 0."""

    def __init__(self, counts):
        self.channel = tessel.make_in_process_system_channel(len(counts))
        self.runtimes = [tessel.Runtime(num_cpu_devices=n, task=t) for t, n in enumerate(counts)]
        self.hosts = [tessel.Host(rt, self.channel) for rt in self.runtimes]
        self.coordinator = tessel.SystemCoordinator(self.hosts[0])

    def disconnect_all(self):
        return [h.disconnect_host() for h in self.hosts]

    def bring_up(self, **configure):
        config = self.coordinator.configure_distributed_system(self.disconnect_all(), **configure)
        ids = [h.initialize_host(config) for h in self.hosts]
        topology = self.coordinator.wait_for_distributed_system(ids, startup_timeout_sec=10)
        for h in self.hosts:
            h.set_global_topology(topology)
        return topology


def on_threads(n, fn):
    """Runs fn(task) on n threads; returns each one's result or the exception it raised."""
    results = [None] * n

    def run(t):
        try:
            results[t] = fn(t)
        except Exception as e:  # noqa: BLE001 - the test inspects it
            results[t] = e

    threads = [threading.Thread(target=run, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
        assert not th.is_alive(), "a host thread hung"
    return results


@pytest.fixture
def no_system():
    """Leaves the process without an accelerator system, whatever the test did."""
    yield
    if tessel.is_accelerator_system_initialized():
        tessel.shutdown_accelerator_system()


# ---- Topology -----------------------------------------------------------------------------


def test_topology_for_hosts_round_trips():
    t = tessel.Topology.for_hosts(2, 4)
    assert t.mesh_shape == (4, 2, 1, 1)
    assert (t.num_tasks, t.num_devices_per_task, t.num_tpus_per_task, t.num_devices) == (2, 4, 4, 8)
    assert t.device_coordinates.shape == (2, 4, 4)
    assert t.device_coordinates.dtype == np.int32
    assert list(t.device_coordinates[1, 3]) == [3, 1, 0, 0]
    assert t.task_ordinal_at_coordinates([3, 1, 0, 0]) == 1
    assert t.tpu_device_ordinal_at_coordinates([3, 1, 0, 0]) == 3
    assert t.global_device_ids(1) == [4, 5, 6, 7]
    assert t.device_name(1, 2) == "/job:localhost/replica:0/task:1/device:CPU:2"
    data = t.serialized()
    assert isinstance(data, bytes)
    assert tessel.Topology(serialized=data) == t
    assert tessel.Topology(data) == t


def test_topology_tf_constructor_and_missing_devices():
    coords = np.array([[[0, 0], [1, 1]]])
    t = tessel.Topology(mesh_shape=[2, 2], device_coordinates=coords)
    assert t.num_tasks == 1 and t.num_devices_per_task == 2
    assert t.missing_devices.tolist() == [[0, 1], [1, 0]]
    assert t.task_ordinal_at_coordinates([0, 1]) == -1
    assert t.device_name_at_coordinates([1, 1], job="worker") == \
        "/job:worker/replica:0/task:0/device:CPU:1"


def test_topology_validation_errors():
    with pytest.raises(ValueError, match="with positive entries"):
        tessel.Topology(mesh_shape=[2, 0], device_coordinates=np.zeros((0, 0, 2), np.int32))
    with pytest.raises(ValueError, match="lie outside mesh_shape"):
        tessel.Topology(mesh_shape=[1, 1], device_coordinates=[[[0, 1]]])
    with pytest.raises(ValueError, match="rank 3"):
        tessel.Topology(mesh_shape=[2], device_coordinates=[0, 1])
    with pytest.raises(ValueError, match="are not a TopologyProto"):
        tessel.Topology(b"\xff\xff")
    with pytest.raises(ValueError, match="give serialized, or mesh_shape"):
        tessel.Topology()


# ---- the five steps -----------------------------------------------------------------------


def test_five_steps_two_hosts():
    s = Hosts([2, 2])
    h0, h1 = s.hosts
    assert h1.state == tessel.HostState.NEW
    assert [h0.disconnect_host(), h1.disconnect_host()] == [2, 2]
    config = s.coordinator.configure_distributed_system([2, 2])
    assert (config.generation, config.num_hosts, config.devices_per_host) == (1, 2, 2)
    assert tessel.HostConfiguration.from_serialized(config.serialized()) == config
    assert s.coordinator.state == tessel.SystemState.CONFIGURED
    ids0, ids1 = h0.initialize_host(config), h1.initialize_host(config)
    assert (ids0, ids1) == ([0, 1], [2, 3])
    topology = s.coordinator.wait_for_distributed_system([ids0, ids1])
    assert topology == tessel.Topology.for_hosts(2, 2)
    h0.set_global_topology(topology)
    h1.set_global_topology(topology)
    assert h1.state == tessel.HostState.RUNNING
    assert h1.topology == topology
    h0.disconnect_host()
    h1.disconnect_host()
    s.coordinator.shutdown_distributed_system()
    assert s.coordinator.state == tessel.SystemState.SHUT_DOWN


def test_start_and_stop_four_hosts_on_threads():
    s = Hosts([2, 2, 2, 2])
    topologies = on_threads(4, lambda t: tessel.start_system(
        s.hosts[t], s.coordinator if t == 0 else None, startup_timeout_sec=10))
    assert all(t == tessel.Topology.for_hosts(4, 2) for t in topologies), topologies
    assert [h.global_device_ids for h in s.hosts] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    results = on_threads(4, lambda t: tessel.stop_system(
        s.hosts[t], s.coordinator if t == 0 else None, timeout_sec=10))
    assert results == [None] * 4
    assert s.coordinator.state == tessel.SystemState.SHUT_DOWN


def test_host_that_never_reports_is_named():
    s = Hosts([1, 1, 1])
    config = s.coordinator.configure_distributed_system(s.disconnect_all())
    ids0 = s.hosts[0].initialize_host(config)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"hosts \[1, 2\] did not report step 3") as info:
        s.coordinator.wait_for_distributed_system([ids0], startup_timeout_sec=SHORT)
    assert time.monotonic() - start < BOUND
    assert isinstance(info.value, tessel.DeadlineExceededError)


def test_absent_host_is_named_on_every_host_thread():
    s = Hosts([1, 1, 1])
    start = time.monotonic()
    results = on_threads(2, lambda t: tessel.start_system(
        s.hosts[t], s.coordinator if t == 0 else None,
        startup_timeout_sec=SHORT if t == 0 else 10))
    assert time.monotonic() - start < BOUND
    assert isinstance(results[0], TimeoutError), results
    assert "hosts [2] did not run step 1" in str(results[0])
    # The coordinator's error, with its code, on the other host too.
    assert isinstance(results[1], TimeoutError), results
    assert "the coordinator (task 0) failed" in str(results[1])


def test_mismatched_device_counts_name_the_host():
    s = Hosts([2, 3])
    # TF's code for disagreeing counts: Internal.
    with pytest.raises(tessel.InternalError, match="Host 1 has 3 devices but host 0 has 2"):
        s.coordinator.configure_distributed_system(s.disconnect_all())
    assert s.coordinator.state == tessel.SystemState.FAILED
    # Not retried silently: the hosts must disconnect first.
    with pytest.raises(tessel.FailedPreconditionError, match="the last configure or wait failed"):
        s.coordinator.configure_distributed_system([2, 2])


def test_shutdown_and_wait_errors():
    s = Hosts([1, 1])
    s.coordinator.shutdown_distributed_system()  # nothing configured: nothing to do (TF's kernel)
    assert s.coordinator.state == tessel.SystemState.UNCONFIGURED
    with pytest.raises(tessel.FailedPreconditionError, match="The system has not been initialized."):
        s.coordinator.wait_for_distributed_system([], startup_timeout_sec=SHORT)
    s.bring_up()
    s.hosts[0].disconnect_host()
    with pytest.raises(RuntimeError, match=r"hosts \[1\] have not disconnected"):
        s.coordinator.shutdown_distributed_system()
    s.hosts[1].disconnect_host()
    s.coordinator.shutdown_distributed_system()
    assert s.bring_up() == tessel.Topology.for_hosts(2, 1)  # configured again


def test_numpy_inputs_follow_tf_rank_rules():
    s = Hosts([2, 2])
    s.disconnect_all()
    with pytest.raises(ValueError, match="Input 0 should be a scalar but has 1 dimensions"):
        s.coordinator.configure_distributed_system([np.array([2], np.int32), np.array(2, np.int32)])
    config = s.coordinator.configure_distributed_system(
        [np.array(2, np.int32), np.array(2, np.int32)])
    ids = [h.initialize_host(config) for h in s.hosts]
    with pytest.raises(ValueError, match="Input 0 should be a vector but has 0 dimensions"):
        s.coordinator.wait_for_distributed_system([np.array(0, np.int64)])
    topology = s.coordinator.wait_for_distributed_system([np.array(i, np.int64) for i in ids])
    assert topology.num_devices == 4


def test_whole_mesh_compilations_flag_reaches_every_host():
    s = Hosts([1, 1])
    s.bring_up(enable_whole_mesh_compilations=True)
    assert all(h.configuration.enable_whole_mesh_compilations for h in s.hosts)


def test_coordinator_only_on_task_zero():
    s = Hosts([1, 1])
    with pytest.raises(tessel.FailedPreconditionError, match="runs on task 0"):
        tessel.SystemCoordinator(s.hosts[1])


# ---- initialize_accelerator_system / shutdown_accelerator_system -------------------------


def other_count(*avoid):
    n = 2
    while n in avoid or n == tessel.Runtime.global_runtime().num_devices():
        n += 1
    return n


def test_initialize_and_shutdown(no_system):
    n = other_count()
    info = tessel.initialize_accelerator_system(num_logical_cpu_devices=n)
    assert tessel.is_accelerator_system_initialized()
    assert (info.device_type, info.num_devices, info.num_hosts, info.task) == ("CPU", n, 1, 0)
    assert info.topology == tessel.Topology.for_hosts(1, n)
    assert info.owns_runtime
    rt = tessel.accelerator_system_runtime()
    assert rt.num_devices() == n
    assert tessel.accelerator_system_info().num_devices == n
    tessel.shutdown_accelerator_system()
    assert not tessel.is_accelerator_system_initialized()
    assert rt.device(n - 1).name.endswith("CPU:%d" % (n - 1))  # outlives the shutdown


def test_reinitialize_with_another_device_count(no_system):
    a = other_count()
    b = other_count(a)
    assert tessel.initialize_accelerator_system(num_logical_cpu_devices=a).num_devices == a
    tessel.shutdown_accelerator_system()
    assert tessel.initialize_accelerator_system(num_logical_cpu_devices=b).num_devices == b
    assert tessel.accelerator_system_runtime().num_devices() == b


def test_default_uses_the_global_runtime(no_system):
    info = tessel.initialize_accelerator_system()
    assert not info.owns_runtime
    assert info.num_devices == tessel.Runtime.global_runtime().num_devices()


def test_tf_errors(no_system):
    with pytest.raises(RuntimeError, match="Accelerator system is not initialized"):
        tessel.shutdown_accelerator_system()
    with pytest.raises(ValueError, match="Unknown device_type XPU. Allowed values are CPU, GPU, or TPU"):
        tessel.initialize_accelerator_system("xpu")
    with pytest.raises(NotImplementedError, match="only virtual CPU devices"):
        tessel.initialize_accelerator_system("TPU")
    tessel.initialize_accelerator_system("cpu", num_logical_cpu_devices=other_count())
    with pytest.raises(tessel.FailedPreconditionError,
                       match="Accelerator system has already been initialized"):
        tessel.initialize_accelerator_system()


def test_two_hosts_through_a_channel(no_system):
    channel = tessel.make_in_process_system_channel(2)
    rt1 = tessel.Runtime(num_cpu_devices=2, task=1)
    h1 = tessel.Host(rt1, channel)
    remote = {}
    th = threading.Thread(target=lambda: remote.setdefault(
        "topology", tessel.start_system(h1, startup_timeout_sec=10)))
    th.start()
    info = tessel.initialize_accelerator_system(num_logical_cpu_devices=2, channel=channel,
                                                task=0, startup_timeout_sec=10)
    th.join(timeout=30)
    assert remote["topology"] == info.topology == tessel.Topology.for_hosts(2, 2)
    assert (info.num_devices, info.local_device_ids, h1.global_device_ids) == (4, [0, 1], [2, 3])
    leave = threading.Thread(target=lambda: tessel.stop_system(h1))
    leave.start()
    tessel.shutdown_accelerator_system()
    leave.join(timeout=30)
    assert not tessel.is_accelerator_system_initialized()


def test_failed_initialize_leaves_the_process_uninitialized(no_system):
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"hosts \[1\] did not run step 1"):
        tessel.initialize_accelerator_system(
            num_logical_cpu_devices=1, channel=tessel.make_in_process_system_channel(2),
            startup_timeout_sec=SHORT)
    assert time.monotonic() - start < BOUND
    assert not tessel.is_accelerator_system_initialized()


def test_mpi_system_channel_outside_mpirun_fails_clearly():
    # pytest is not under mpirun: MPI is not initialised (FailedPrecondition), or not built.
    expected = tessel.FailedPreconditionError if tessel.mpi_available() else tessel.UnavailableError
    with pytest.raises(expected, match="make_mpi_system_channel"):
        tessel.make_mpi_system_channel()
    if tessel.mpi_available():
        with pytest.raises(expected, match="create a tessel::MpiEnvironment first"):
            tessel.make_mpi_system_channel(timeout_sec=1)
        with pytest.raises(ValueError, match="timeout must be > 0"):
            tessel.make_mpi_system_channel(timeout_sec=0)


def test_initialize_under_mpirun_without_mpi_says_what_to_do(monkeypatch, no_system):
    # What mpirun -np 2 exports, in a process that has not initialised MPI.
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    if tessel.mpi_available():
        with pytest.raises(tessel.FailedPreconditionError,
                           match="client 1 of 2 .*create a tessel::MpiEnvironment first"):
            tessel.initialize_accelerator_system()
    else:
        with pytest.raises(tessel.UnavailableError, match="built without MPI"):
            tessel.initialize_accelerator_system()
    assert not tessel.is_accelerator_system_initialized()
