"""GPU devices and NCCL communicators from Python. Without a GPU (or without CUDA in the build)
the GPU cases skip with "skipped: no GPU"; what must hold everywhere is checked always."""
import numpy as np
import pytest

import tessel

needs_gpu = pytest.mark.skipif(tessel.visible_gpu_count() == 0, reason="skipped: no GPU")


def test_the_build_and_the_machine_say_what_they_have():
    assert isinstance(tessel.built_with_cuda(), bool)
    assert tessel.nccl_available() == tessel.built_with_cuda()
    assert (tessel.nccl_version() != "") == tessel.built_with_cuda()
    rt = tessel.Runtime(num_cpu_devices=1)
    assert len(rt.gpu_devices()) == tessel.visible_gpu_count()
    assert rt.device(0).device_type == "CPU"
    assert rt.device(0).gpu_ordinal == -1
    assert rt.device(0).memory_space == tessel.MemorySpace.host()
    assert str(tessel.Tensor.zeros([2], "f32").memory_space) == "host"


def test_asking_for_more_gpus_than_visible_names_the_count():
    with pytest.raises(tessel.InvalidArgumentError, match="num_gpu_devices"):
        tessel.Runtime(num_cpu_devices=1, num_gpu_devices=tessel.visible_gpu_count() + 1)


@needs_gpu
def test_a_gpu_tensor_round_trips_and_refuses_host_access():
    rt = tessel.Runtime(num_cpu_devices=1)
    gpu = rt.gpu_devices()[0]
    assert gpu.name == "/job:localhost/replica:0/task:0/device:GPU:0"
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = gpu.allocate([3, 4], "f32")
    assert str(t.memory_space) == "cuda:0"
    t.copy_from(tessel.Tensor.from_numpy(host))
    np.testing.assert_array_equal(t.to_host().numpy(), host)
    with pytest.raises(tessel.FailedPreconditionError, match="cuda:0"):
        t.fill(1.0)


@needs_gpu
def test_nccl_all_reduce_sums_over_the_gpus():
    rt = tessel.Runtime(num_cpu_devices=1)
    gpus = rt.gpu_devices()
    comms = tessel.make_nccl_communicators(gpus)
    assert len(comms) == len(gpus)
    if len(comms) > 1:
        pytest.skip("one rank per thread is needed for several GPUs; covered in C++")
    x = gpus[0].allocate([8], "f32")
    x.copy_from(tessel.Tensor.from_numpy(np.full(8, 3, dtype=np.float32)))
    comms[0].all_reduce(x, x, "sum")
    np.testing.assert_array_equal(x.to_host().numpy(), np.full(8, 3, dtype=np.float32))
    event = tessel.GpuEvent(gpus[0])
    event.record()
    event.synchronize(10.0)
    assert event.done()


@pytest.mark.skipif(tessel.built_with_cuda(), reason="the build has CUDA")
def test_without_cuda_nccl_is_unavailable():
    with pytest.raises(tessel.UnavailableError, match="without CUDA"):
        tessel.make_nccl_communicators([])
