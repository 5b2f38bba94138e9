"""Multi-client DTensors with simulated clients (one Runtime each, make_in_process_cluster),
the client configuration, and the MPI API outside mpirun."""

import re
import threading

import numpy as np
import pytest

import tessel


def run_clients(n, program):
    """program(client_id, runtime, client_config) on n threads at once; re-raises the first error."""
    clusters = tessel.make_in_process_cluster(n)
    runtimes = [tessel.Runtime(num_cpu_devices=2, job="worker", task=c) for c in range(n)]
    for rt, cluster in zip(runtimes, clusters):
        tessel.set_cluster(rt, cluster)
    errors = [None] * n

    def body(c):
        try:
            program(c, runtimes[c], tessel.ClientConfig(n, c, "worker"))
        except Exception as e:  # noqa: BLE001 - reported below
            errors[c] = e

    threads = [threading.Thread(target=body, args=(c,)) for c in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for rt in runtimes:
        tessel.set_cluster(rt, None)
    for e in errors:
        if e is not None:
            raise e


def test_relayout_gathers_across_simulated_clients():
    host = np.arange(16, dtype=np.float32).reshape(8, 2)
    results = {}

    def program(c, rt, client):
        mesh = tessel.create_distributed_mesh({"x": 4}, local_devices=["CPU:0", "CPU:1"],
                                              client=client)
        sharded = tessel.copy_to_mesh(host, tessel.Layout.batch_sharded(mesh, "x", 2), rt)
        assert [p.shape for p in tessel.unpack(sharded)] == [(2, 2), (2, 2)]
        results[c] = tessel.full_tensor(sharded)

    run_clients(2, program)
    for c in range(2):
        np.testing.assert_array_equal(results[c], host)


def test_cluster_join_errors():
    clusters = tessel.make_in_process_cluster(2)
    assert clusters[1].client_id == 1 and clusters[1].num_clients == 2
    with pytest.raises(tessel.InvalidArgumentError, match="listed twice"):
        clusters[0].join(["a", "a"], [0, 1])
    with pytest.raises(tessel.InvalidArgumentError, match="0 clients"):
        tessel.make_in_process_cluster(0)


def test_join_returns_only_this_clients_communicators():
    clusters = tessel.make_in_process_cluster(2)
    mine = clusters[0].join(["a", "b"], [0, 1])
    assert mine[1] is None and mine[0].rank == 0 and mine[0].size == 2


def test_set_cluster_and_cluster_of():
    rt = tessel.Runtime(num_cpu_devices=1)
    assert tessel.cluster_of(rt) is None
    cluster = tessel.make_in_process_cluster(1)[0]
    tessel.set_cluster(rt, cluster)
    assert tessel.cluster_of(rt) is cluster
    tessel.set_cluster(rt, None)
    assert tessel.cluster_of(rt) is None


def test_client_config_from_environment(monkeypatch):
    monkeypatch.setenv("TESSEL_NUM_CLIENTS", "3")
    monkeypatch.setenv("TESSEL_CLIENT_ID", "2")
    c = tessel.client_config()
    assert (c.num_clients, c.client_id, c.job) == (3, 2, "worker")


def test_distributed_mesh_for_a_named_client():
    mesh = tessel.create_distributed_mesh({"x": 4}, local_devices=["CPU:0", "CPU:1"],
                                          client=tessel.ClientConfig(2, 1, "worker"))
    assert mesh.local_device_ids() == [2, 3]
    with pytest.raises(tessel.InvalidArgumentError, match="out of range"):
        tessel.create_distributed_mesh({"x": 4}, local_devices=["CPU:0", "CPU:1"],
                                       client=tessel.ClientConfig(2, 2, "worker"))


def test_mpi_calls_outside_mpirun_fail_clearly():
    # Not initialised here (pytest is not under mpirun): FailedPrecondition with MPI built,
    # Unavailable without it.
    expected = tessel.FailedPreconditionError if tessel.mpi_available() else tessel.UnavailableError
    with pytest.raises(expected):
        tessel.make_mpi_communicator()
    with pytest.raises(expected):
        tessel.make_mpi_cluster()
    with pytest.raises(expected):
        tessel.make_mpi_communicator(stuck_exit_after_seconds=0)
    with pytest.raises(expected):
        tessel.make_hierarchical_communicators(2, stuck_exit_after_seconds=10.0)


def test_timeouts_in_seconds_reject_nan():
    with pytest.raises(tessel.InvalidArgumentError, match="stuck_exit_after_seconds is NaN"):
        tessel.make_mpi_communicator(stuck_exit_after_seconds=float("nan"))


def test_stuck_exit_after_defaults_to_five_seconds():
    # MpiCommunicatorOptions::stuck_exit_after, as the keyword's default.
    # pybind11 2 names the type `float`, pybind11 3 `typing.SupportsFloat | typing.SupportsIndex`.
    assert re.search(r"stuck_exit_after_seconds: [^=,]+ = 5\.0\b", tessel.make_mpi_communicator.__doc__)
