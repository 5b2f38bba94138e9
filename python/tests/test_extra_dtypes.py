"""uint32, int8 and complex128 (dtypes TF's scoped allocator and cross-device ops take): numpy
round trips, scoped-allocator layout, and reductions through every CrossDeviceOps checked
against NumPy."""
import numpy as np
import pytest

import tessel

CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"
BOUNDED = tessel.CommunicationOptions(timeout_seconds=10)


@pytest.fixture
def rt():
    return tessel.Runtime(num_cpu_devices=2)


def all_ops(rt):
    return [tessel.ReductionToOneDevice(runtime=rt), tessel.NcclAllReduce(runtime=rt),
            tessel.HierarchicalCopyAllReduce(runtime=rt),
            tessel.CollectiveAllReduce([CPU.format(0), CPU.format(1)], 2, runtime=rt)]


@pytest.mark.parametrize("dtype,size", [(np.uint32, 4), (np.int8, 1), (np.complex128, 16)])
def test_sizes_names_and_numpy_round_trip(dtype, size):
    a = np.arange(6).reshape(2, 3).astype(dtype)
    if dtype is np.complex128:
        a = a + 1j * a[::-1]
    t = tessel.tensor(a)
    assert tessel.dtype_size(t.dtype) == size == np.dtype(dtype).itemsize
    np.testing.assert_array_equal(t.numpy(), a)
    assert t.numpy().dtype == np.dtype(dtype)


def test_scoped_allocator_aligns_complex128_fields():
    fields, total = tessel.scoped_layout([(3,), (1,)], "complex128", 0)
    assert [f.offset for f in fields] == [0, 64]
    assert [f.bytes_requested for f in fields] == [48, 16]
    assert total == 128


@pytest.mark.parametrize("dtype", [np.uint32, np.int8, np.complex128])
def test_cross_device_sum_and_mean_match_numpy(rt, dtype):
    values = [np.array([1, 7, 100], dtype), np.array([3, 2, 27], dtype)]
    if dtype is np.complex128:
        values = [v + 1j * (k + 1) for k, v in enumerate(values)]
    pr = tessel.PerReplica(values, [CPU.format(0), CPU.format(1)])
    want_sum = values[0] + values[1]  # numpy's own arithmetic (int8: 127 wraps to -129 + 256)
    for ops in all_ops(rt):
        got = ops.reduce(tessel.ReduceOp.SUM, pr, pr, BOUNDED)
        for v in got.values:
            np.testing.assert_array_equal(np.asarray(v), want_sum)
    mean = all_ops(rt)[0].reduce(tessel.ReduceOp.MEAN, pr, pr, BOUNDED)
    if dtype is np.complex128:
        np.testing.assert_allclose(np.asarray(mean.values[0]), want_sum / 2)
    else:  # integer means keep the dtype and truncate (tessel's rule, compatibility.md)
        np.testing.assert_array_equal(np.asarray(mean.values[0]),
                                      (want_sum.astype(np.int64) // 2).astype(dtype))


def test_complex128_has_no_max(rt):
    v = [np.array([1 + 1j]), np.array([2 - 1j])]
    pr = tessel.PerReplica(v, [CPU.format(0), CPU.format(1)])
    with pytest.raises(ValueError, match="max is not defined for c128"):
        tessel.NcclAllReduce(runtime=rt).reduce(tessel.ReduceOp.MAX, pr, pr, BOUNDED)
