"""Multi-client configuration: TF's config.py names, read from the environment."""
import pytest

import tessel


@pytest.fixture
def env(monkeypatch):
    for name in ["TESSEL_NUM_CLIENTS", "DTENSOR_NUM_CLIENTS", "DTENSOR_JOBS", "OMPI_COMM_WORLD_SIZE",
                 "PMI_SIZE", "TESSEL_CLIENT_ID", "DTENSOR_CLIENT_ID", "OMPI_COMM_WORLD_RANK",
                 "PMI_RANK", "TESSEL_JOB_NAME", "DTENSOR_JOB_NAME"]:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_single_client_defaults(env):
    assert tessel.num_clients() == 1
    assert tessel.client_id() == 0
    assert tessel.job_name() == "localhost"
    assert tessel.full_job_name() == "localhost/replica:0/task:0"
    with pytest.raises(ValueError, match="Unexpected task ID 1"):
        tessel.full_job_name(1)


def test_distributed_mesh_under_mpirun_variables(env):
    env.setenv("OMPI_COMM_WORLD_SIZE", "2")
    env.setenv("OMPI_COMM_WORLD_RANK", "1")
    mesh = tessel.create_distributed_mesh([("x", 4)], local_devices=["CPU:0", "CPU:1"])
    assert list(mesh.local_device_ids()) == [2, 3]
    assert mesh.local_devices()[0] == "/job:worker/replica:0/task:1/device:CPU:0"
    with pytest.raises(ValueError, match="does not match requested mesh of 3 devices"):
        tessel.create_distributed_mesh({"x": 3}, local_devices=["CPU:0", "CPU:1"])
