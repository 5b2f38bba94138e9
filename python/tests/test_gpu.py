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


def test_gpu_ordinals_must_be_visible_and_not_beside_a_count():
    past = tessel.visible_gpu_count()
    with pytest.raises(tessel.InvalidArgumentError, match=rf"gpu_ordinals\[0\] = {past} is not a visible"):
        tessel.Runtime(num_cpu_devices=1, gpu_ordinals=[past])
    with pytest.raises(tessel.InvalidArgumentError, match="both given"):
        tessel.Runtime(num_cpu_devices=1, num_gpu_devices=0, gpu_ordinals=[0])


@needs_gpu
def test_several_devices_share_one_gpu():
    rt = tessel.Runtime(num_cpu_devices=1, gpu_ordinals=[0, 0])
    assert rt.gpu_ordinals == [0, 0]
    gpus = rt.gpu_devices()
    assert [g.name for g in gpus] == ["/job:localhost/replica:0/task:0/device:GPU:0",
                                      "/job:localhost/replica:0/task:0/device:GPU:1"]
    assert [g.gpu_ordinal for g in gpus] == [0, 0]
    whole = tessel.Runtime(num_cpu_devices=1, gpu_ordinals=[0]).gpu_devices()[0].memory_limit
    assert gpus[1].memory_limit == whole // 2


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
    comms[0].all_reduce(x, x, tessel.ReduceOp.SUM)
    np.testing.assert_array_equal(x.to_host().numpy(), np.full(8, 3, dtype=np.float32))
    event = tessel.GpuEvent(gpus[0])
    event.record()
    event.synchronize(10.0)
    assert event.done()


@pytest.mark.skipif(tessel.built_with_cuda(), reason="the build has CUDA")
def test_without_cuda_nccl_is_unavailable():
    with pytest.raises(tessel.UnavailableError, match="without CUDA"):
        tessel.make_nccl_communicators([])


def test_simulated_gpus_keep_device_memory_apart_and_compute_through_the_host():
    rt = tessel.Runtime(num_cpu_devices=1, num_simulated_gpu_devices=2)
    gpus = rt.gpu_devices()
    assert [g.name for g in gpus] == [
        "/job:localhost/replica:0/task:0/device:GPU:0",
        "/job:localhost/replica:0/task:0/device:GPU:1",
    ]
    assert all(g.is_simulated_gpu and g.device_type == "GPU" for g in gpus)
    assert gpus[1].memory_space == tessel.MemorySpace.simulated_gpu(1)
    t = gpus[0].allocate([2, 3], "f32")
    with pytest.raises(tessel.FailedPreconditionError, match="simulated_gpu:0"):
        t.numpy()
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    t.copy_from(tessel.Tensor.from_numpy(host))
    np.testing.assert_array_equal(t.to_host().numpy(), host)
    expected = tessel.InvalidArgumentError if tessel.built_with_cuda() else tessel.UnavailableError
    with pytest.raises(expected):  # NCCL needs real GPUs
        tessel.make_nccl_communicators(gpus)


def matmul_operands(rt, mesh, a_layout, b_layout, seed):
    """Random f32 operands a [8, 6] and b [6, 4], and their DTensors in the given layouts."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((8, 6)).astype(np.float32)
    b = rng.standard_normal((6, 4)).astype(np.float32)
    da = tessel.copy_to_mesh(a, tessel.Layout(a_layout, mesh), runtime=rt)
    db = tessel.copy_to_mesh(b, tessel.Layout(b_layout, mesh), runtime=rt)
    return a, b, da, db


def test_a_matmul_on_a_simulated_gpu_mesh_matches_numpy():
    rt = tessel.Runtime(num_cpu_devices=1, num_simulated_gpu_devices=2)
    mesh = tessel.Mesh.create_on_devices([("x", 2)], [g.name for g in rt.gpu_devices()])
    a, b, da, db = matmul_operands(rt, mesh, ["x", "unsharded"], ["unsharded", "unsharded"], seed=0)
    before = tessel.host_staged_kernel_calls().get("matmul", 0)
    out = tessel.matmul(da, db)
    np.testing.assert_allclose(tessel.to_host(out), a @ b, rtol=1e-5, atol=1e-5)
    assert tessel.host_staged_kernel_calls()["matmul"] == before + 2  # one block per device


def test_unpack_of_a_gpu_mesh_dtensor_gives_host_copies():
    rt = tessel.Runtime(num_cpu_devices=1, num_simulated_gpu_devices=2)
    mesh = tessel.Mesh.create_on_devices([("x", 2)], [g.name for g in rt.gpu_devices()])
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    d = tessel.copy_to_mesh(a, tessel.Layout(["x", "unsharded"], mesh), runtime=rt)
    assert [str(c.memory_space) for c in d.components] == ["simulated_gpu:0", "simulated_gpu:1"]
    parts = tessel.unpack(d)
    np.testing.assert_array_equal(parts[0], a[:2])
    np.testing.assert_array_equal(parts[1], a[2:])


@pytest.mark.parametrize("name", ["NcclAllReduce", "ReductionToOneDevice", "HierarchicalCopyAllReduce"])
def test_cross_device_ops_reduce_values_on_simulated_gpus(name):
    rt = tessel.Runtime(num_cpu_devices=1, num_simulated_gpu_devices=2)
    gpus = [g.name for g in rt.gpu_devices()]
    v = tessel.PerReplica([np.full((4,), i + 1.0, np.float32) for i in range(2)], gpus)
    ops = getattr(tessel, name)(runtime=rt)
    out = ops.reduce(tessel.ReduceOp.MEAN, v, v)
    for i, c in enumerate(out.values):
        assert c.memory_space == tessel.MemorySpace.simulated_gpu(i)
        np.testing.assert_array_equal(c.to_host().numpy(), np.full(4, 1.5, np.float32))
    batch = ops.batch_reduce(tessel.ReduceOp.SUM, [(v, v), (v, v)])
    np.testing.assert_array_equal(batch[1].values[1].to_host().numpy(), np.full(4, 3.0, np.float32))


@needs_gpu
def test_a_2x2_mesh_of_devices_sharing_a_gpu_matches_numpy():
    # Four devices on GPU 0: matmul on cuBLAS per block, the relayout's collectives host-staged
    # (devices sharing a GPU make no NCCL group).
    rt = tessel.Runtime(num_cpu_devices=1, gpu_ordinals=[0, 0, 0, 0])
    mesh = tessel.Mesh.create_on_devices([("x", 2), ("y", 2)], [g.name for g in rt.gpu_devices()])
    a, b, da, db = matmul_operands(rt, mesh, ["x", "unsharded"], ["unsharded", "y"], seed=1)
    before = tessel.host_staged_kernel_calls().get("matmul", 0)
    out = tessel.matmul(da, db)
    assert all(str(c.memory_space) == "cuda:0" for c in out.components)
    np.testing.assert_allclose(tessel.unpack(out)[3], (a @ b)[4:, 2:], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tessel.to_host(out), a @ b, rtol=1e-5, atol=1e-5)
    assert tessel.host_staged_kernel_calls().get("matmul", 0) == before  # on the GPU
    moved = tessel.relayout(out, tessel.Layout(["unsharded", "unsharded"], mesh))
    np.testing.assert_allclose(tessel.to_host(moved), a @ b, rtol=1e-5, atol=1e-5)
