"""DLPack: Tensor.__dlpack__ / __dlpack_device__ and tessel.from_dlpack, zero-copy both ways,
checked against numpy's own from_dlpack (numpy >= 1.22)."""

import gc
import weakref

import numpy as np
import pytest

import tessel

DTYPES = {"float32": "f32", "float64": "f64", "float16": "f16", "int32": "i32", "int64": "i64",
          "uint8": "u8"}


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_to_tessel_to_numpy_round_trip_shares_memory(dtype):
    a = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    t = tessel.from_dlpack(a)
    assert t.shape == (2, 3, 4) and t.dtype == DTYPES[dtype]
    np.testing.assert_array_equal(t.numpy(), a)
    back = np.from_dlpack(t)
    np.testing.assert_array_equal(back, a)
    assert np.shares_memory(back, a)  # numpy -> tessel -> numpy: one buffer throughout
    t.fill(5)  # a write through tessel is seen by both numpy arrays
    assert (a == 5).all() and (back == 5).all()


def test_tessel_to_numpy_is_a_view_that_keeps_the_storage_alive():
    t = tessel.Tensor.random_normal([64, 32], seed=3)
    expected = t.numpy()
    a = np.from_dlpack(t)
    assert a.shape == (64, 32) and a.dtype == np.float32
    np.testing.assert_array_equal(a, expected)
    del t
    gc.collect()
    np.testing.assert_array_equal(a, expected)  # the capsule holds the storage, not the Tensor


def test_tessel_view_exports_its_strides_and_offset():
    t = tessel.Tensor(np.arange(20, dtype=np.float64).reshape(4, 5))
    view = t.slice(1, 1, 4)  # strided: columns 1..3
    a = np.from_dlpack(view)
    np.testing.assert_array_equal(a, np.arange(20.0).reshape(4, 5)[:, 1:4])
    assert a.strides == (5 * 8, 8)


def test_numpy_memory_stays_alive_while_tessel_views_it():
    a = np.arange(1000, dtype=np.float32)
    ref = weakref.ref(a)
    t = tessel.from_dlpack(a)
    del a
    gc.collect()
    assert ref() is not None  # tessel's storage holds the producer's DLManagedTensor
    np.testing.assert_array_equal(t.numpy(), np.arange(1000, dtype=np.float32))
    del t
    gc.collect()
    assert ref() is None  # the last view gone: the deleter ran


def test_unaligned_slices_import_without_a_copy():
    base = np.arange(100, dtype=np.int64)
    for start in (0, 1, 3, 7, 9):
        part = base[start:start + 10]
        t = tessel.from_dlpack(part)
        np.testing.assert_array_equal(t.numpy(), part)
        assert np.shares_memory(np.from_dlpack(t), base)


def test_scalars_and_empty_arrays():
    t = tessel.from_dlpack(np.array(2.5))
    assert t.shape == () and t.numpy() == 2.5
    e = tessel.from_dlpack(np.zeros((3, 0), np.float32))
    assert e.shape == (3, 0)
    assert np.from_dlpack(e).shape == (3, 0)


def test_non_contiguous_input_is_refused_with_the_strides_named():
    a = np.arange(12, dtype=np.float32).reshape(3, 4).T
    with pytest.raises(ValueError, match=r"DLPack: strides \[1,4\] of shape \[4,3\] are not row-major"):
        tessel.from_dlpack(a)
    np.testing.assert_array_equal(tessel.from_dlpack(np.ascontiguousarray(a)).numpy(), a)


def test_unsupported_types_are_errors():
    with pytest.raises(tessel.UnimplementedError, match="DLPack 0.6 has no type for bool"):
        np.from_dlpack(tessel.Tensor(np.array([True, False])))
    with pytest.raises(TypeError, match="from_dlpack: expected an object with __dlpack__"):
        tessel.from_dlpack([1, 2, 3])
    with pytest.raises(BufferError, match="stream=None"):
        tessel.Tensor.zeros([2]).__dlpack__(stream=1)


def test_capsule_is_consumed_once():
    capsule = np.arange(4.0).__dlpack__()
    t = tessel.from_dlpack(capsule)
    np.testing.assert_array_equal(t.numpy(), np.arange(4.0))
    with pytest.raises(TypeError, match="unconsumed 'dltensor' capsule"):
        tessel.from_dlpack(capsule)


def test_dlpack_device_is_host():
    assert tessel.Tensor.zeros([1]).__dlpack_device__() == (1, 0)  # (kDLCPU, 0)
