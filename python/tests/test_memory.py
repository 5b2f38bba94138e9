"""Memory limits (docs/memory.md): host and device requests above their limit raise
ResourceExhaustedError naming the request and the limit, and keep nothing."""

import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import tessel

MiB = 1 << 20
GiB = 1 << 30
CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"


@pytest.fixture
def host_limit():
    """Sets the host limit for one test (a callable) and restores the one before."""
    old = tessel.host_memory_limit()
    yield tessel.set_host_memory_limit
    tessel.set_host_memory_limit(old)


def test_resource_exhausted_is_a_memory_error():
    assert issubclass(tessel.ResourceExhaustedError, MemoryError)
    assert issubclass(tessel.ResourceExhaustedError, tessel.Error)


def test_device_limit_refuses_100_mib_but_accepts_32_mib():
    rt = tessel.Runtime(num_cpu_devices=2, memory_limit=64 * MiB)
    dev = rt.device(1)
    assert rt.memory_limit == 64 * MiB
    assert dev.memory_limit == 64 * MiB
    with pytest.raises(tessel.ResourceExhaustedError) as info:
        dev.allocate((25 * MiB,), "f32")
    message = str(info.value)
    assert "cannot allocate 104857600 bytes for [26214400] f32" in message
    assert f"'{CPU1}': allocating 100.0 MiB (104857600 bytes)" in message
    assert "would exceed its memory limit 64.0 MiB (in use 0 B)" in message
    assert "Runtime(memory_limit=...)" in message
    stats = dev.memory_stats()
    assert (stats["live_bytes"], stats["peak_bytes"], stats["num_allocations"]) == (0, 0, 0)

    fits = dev.allocate((8 * MiB,), "f32")  # 32 MiB
    assert dev.memory_stats()["live_bytes"] == 32 * MiB
    with pytest.raises(MemoryError, match=r"in use 32\.0 MiB"):
        dev.allocate((40 * MiB,), "u8")
    assert dev.memory_stats()["live_bytes"] == 32 * MiB
    del fits
    gc.collect()
    assert dev.memory_stats()["live_bytes"] == 0


def test_twenty_gib_on_the_share_of_a_23_gib_machine_fails_cleanly():
    # The defaults' share for 4 devices of a 23 GiB machine, set so the test means the same on
    # every machine; the 20 GiB are never allocated.
    rt = tessel.Runtime(num_cpu_devices=4, memory_limit=23 * GiB // 4)
    dev = rt.device(1)
    with pytest.raises(tessel.ResourceExhaustedError,
                       match=r"for \[5368709120\] f32: .*allocating 20\.0 GiB .*"
                             r"would exceed its memory limit 5\.8 GiB"):
        dev.allocate((5 * GiB,), "f32")
    assert dev.memory_stats()["live_bytes"] == 0


def test_default_device_limit_is_an_equal_share_of_the_host_limit():
    rt = tessel.Runtime(num_cpu_devices=4)
    share = tessel.host_memory_limit() // 4
    assert rt.memory_limit == share
    assert [d.memory_limit for d in rt.devices()] == [share] * 4
    assert rt.device(3).memory_stats()["limit_bytes"] == share


def test_default_limits_refuse_what_the_host_cannot_hold():
    request = max(tessel.host_available_memory(), tessel.host_memory_limit()) + GiB
    before = tessel.host_memory_stats()["live_bytes"]
    with pytest.raises(tessel.ResourceExhaustedError, match="host memory limit"):
        tessel.Tensor.zeros((request,), "u8")
    assert tessel.host_memory_stats()["live_bytes"] == before


def test_default_host_limit_is_a_fraction_of_the_available_memory():
    # In a fresh process, so that the limit (fixed on first use) and the available memory are
    # read a moment apart.
    code = ("import tessel; limit = tessel.host_memory_limit(); "
            "print(limit, tessel.host_available_memory())")
    rc, out = run_python(code, TESSEL_HOST_MEMORY_LIMIT="", TESSEL_PER_PROCESS_MEMORY_FRACTION="",
                         OMPI_COMM_WORLD_LOCAL_SIZE="", MPI_LOCALNRANKS="")
    assert rc == 0, out
    limit, available = (int(x) for x in out.split())
    assert available > 0
    expected = tessel.DEFAULT_PER_PROCESS_MEMORY_FRACTION * available
    assert abs(limit - expected) < 0.05 * available


def test_host_limit_refuses_100_mib_but_accepts_32_mib(host_limit):
    limit = tessel.host_memory_stats()["live_bytes"] + 64 * MiB  # 64 MiB beyond what is held
    host_limit(limit)
    assert tessel.host_memory_stats()["limit_bytes"] == limit
    before = tessel.host_memory_stats()
    with pytest.raises(tessel.ResourceExhaustedError) as info:
        tessel.Tensor.zeros((25 * MiB,), "f32")
    assert ("cannot allocate 104857600 bytes for [26214400] f32: Allocator: host: allocating "
            "100.0 MiB (104857600 bytes) would exceed the process's host memory limit "
            f"{limit / MiB:.1f} MiB" in str(info.value))
    assert "set_host_memory_limit" in str(info.value)
    after = tessel.host_memory_stats()
    assert after["live_bytes"] == before["live_bytes"]
    assert after["num_allocations"] == before["num_allocations"]
    fits = tessel.Tensor.zeros((8 * MiB,), "f32")
    assert tessel.host_memory_stats()["live_bytes"] >= before["live_bytes"] + 32 * MiB
    np.testing.assert_array_equal(fits.numpy()[-3:], np.zeros(3, np.float32))


def test_host_limit_covers_numpy_conversions_and_device_tensors(host_limit):
    host_limit(tessel.host_memory_stats()["live_bytes"] + 16 * MiB)
    with pytest.raises(MemoryError, match="host memory limit"):
        tessel.Tensor(np.zeros(32 * MiB, np.uint8))
    rt = tessel.Runtime(num_cpu_devices=2, memory_limit=GiB)
    with pytest.raises(tessel.ResourceExhaustedError,
                       match=f"'{CPU1}': host: allocating 32.0 MiB"):
        rt.device(1).allocate((32 * MiB,), "u8")
    assert rt.device(1).memory_stats()["live_bytes"] == 0


def test_set_memory_limit_below_what_is_in_use():
    rt = tessel.Runtime(num_cpu_devices=1, memory_limit=64 * MiB)
    dev = rt.device(0)
    held = dev.allocate((8 * MiB,), "f32")
    held.fill(2)
    dev.set_memory_limit(16 * MiB)
    assert dev.memory_stats()["limit_bytes"] == 16 * MiB
    assert held.numpy()[-1] == 2
    with pytest.raises(tessel.ResourceExhaustedError, match=r"limit 16\.0 MiB \(in use 32\.0 MiB\)"):
        dev.allocate((1,), "u8")
    del held
    gc.collect()
    dev.allocate((4 * MiB,), "f32")


def test_a_dtensor_over_one_devices_limit_raises_and_keeps_nothing():
    rt = tessel.Runtime(num_cpu_devices=2, memory_limit=8 * MiB)
    rt.device(1).set_memory_limit(MiB)
    mesh = tessel.create_mesh([("x", 2)], devices=["CPU:0", "CPU:1"])
    layout = tessel.Layout(["x"], mesh)
    # 4 MiB per device: device 0 takes its block, device 1 refuses, and device 0's goes back.
    with pytest.raises(tessel.ResourceExhaustedError,
                       match=f"'{CPU1}': allocating 4.0 MiB .* limit 1.0 MiB"):
        tessel.zeros((2 * MiB,), layout, "f32", runtime=rt)
    rt.synchronize(timeout_seconds=60)  # device 0's kernel may still hold its block until it runs
    assert [d.memory_stats()["live_bytes"] for d in rt.devices()] == [0, 0]
    small = tessel.zeros((2 * 1024,), layout, "f32", runtime=rt)  # 4 KiB per device fits
    assert [d.memory_stats()["live_bytes"] for d in rt.devices()] == [4096, 4096]
    del small


def test_bad_limits_are_value_errors(host_limit):
    with pytest.raises(ValueError, match="host memory limit must be at least 1 byte, got 0"):
        tessel.set_host_memory_limit(0)
    with pytest.raises(ValueError, match="memory_limit must be -1 or at least 1 byte, got -7"):
        tessel.Runtime(num_cpu_devices=1, memory_limit=-7)
    dev = tessel.Runtime(num_cpu_devices=1).device(0)
    with pytest.raises(ValueError, match="must be at least 1 byte, got 0"):
        dev.set_memory_limit(0)


def run_python(code, **env):
    """Runs `code` in a fresh interpreter with extra environment variables; (rc, stdout+stderr)."""
    full_env = dict(os.environ, **env)
    done = subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                          text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def test_environment_variables_set_the_defaults():
    code = ("import tessel; rt = tessel.Runtime(num_cpu_devices=2); "
            "print(tessel.host_memory_limit(), rt.device(1).memory_limit)")
    rc, out = run_python(code, TESSEL_HOST_MEMORY_LIMIT="3G", TESSEL_DEVICE_MEMORY_LIMIT="512MiB")
    assert rc == 0, out
    assert out.split() == [str(3 * GiB), str(512 * MiB)]
    rc, out = run_python(code, TESSEL_HOST_MEMORY_LIMIT="2G")
    assert rc == 0, out
    assert out.split() == [str(2 * GiB), str(GiB)]  # each of 2 devices: half the host limit
    rc, out = run_python("import tessel; tessel.Tensor.zeros((4,), 'f32')",
                         TESSEL_PER_PROCESS_MEMORY_FRACTION="1.5")
    assert rc != 0
    assert "TESSEL_PER_PROCESS_MEMORY_FRACTION='1.5' is not a fraction in (0, 1]" in out


def test_host_memory_stats_count_peak_and_reset():
    tessel.reset_host_peak_memory()
    base = tessel.host_memory_stats()
    assert base["peak_bytes"] == base["live_bytes"]
    t = tessel.Tensor.zeros((1000,), "f32")  # 4000 bytes, 4032 rounded to 64-byte lines
    stats = tessel.host_memory_stats()
    assert stats["live_bytes"] == base["live_bytes"] + 4032
    assert stats["num_allocations"] == base["num_allocations"] + 1
    del t
    gc.collect()
    assert tessel.host_memory_stats()["peak_bytes"] == base["live_bytes"] + 4032
    tessel.reset_host_peak_memory()
    assert tessel.host_memory_stats()["peak_bytes"] == base["live_bytes"]
