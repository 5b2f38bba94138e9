"""Core bindings: dtypes, Tensor <-> numpy, factories, DeviceName, ReduceOp."""

import pickle

import numpy as np
import pytest

import tessel

# (tessel name, numpy dtype of the array it converts from and to)
NUMPY_DTYPES = [
    ("f32", np.float32),
    ("f64", np.float64),
    ("f16", np.float16),
    ("i32", np.int32),
    ("i64", np.int64),
    ("u8", np.uint8),
    ("bool", np.bool_),
]


def sample(np_dtype, shape=(2, 3)):
    if np_dtype == np.bool_:
        return (np.arange(np.prod(shape)) % 3 == 0).reshape(shape)
    return np.arange(np.prod(shape)).reshape(shape).astype(np_dtype)


# ---- dtypes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name,np_dtype", NUMPY_DTYPES)
def test_dtype_names_accept_numpy_dtypes(name, np_dtype):
    assert tessel.dtype_name(name) == name
    assert tessel.dtype_name(np_dtype) == name
    assert tessel.dtype_name(np.dtype(np_dtype)) == name
    assert tessel.dtype_name(np.dtype(np_dtype).name) == name
    assert tessel.dtype_size(name) == np.dtype(np_dtype).itemsize


def test_dtype_bf16_and_python_types():
    assert tessel.dtype_name("bfloat16") == "bf16"
    assert tessel.dtype_size("bf16") == 2
    assert tessel.dtype_name(float) == "f64"
    assert tessel.dtype_name(bool) == "bool"
    assert tessel.is_floating("bf16") and not tessel.is_floating("i32")


def test_unknown_dtype_is_value_error():
    with pytest.raises(ValueError, match="int16"):
        tessel.dtype_name("int16")
    with pytest.raises(ValueError):
        tessel.Tensor.from_numpy(np.zeros(3, dtype=np.int16))


def test_bf16_rounds_to_nearest_even():
    assert tessel.float_to_bf16_bits(1.00390625) == tessel.float_to_bf16_bits(1.0)  # tie -> even
    assert tessel.bf16_bits_to_float(tessel.float_to_bf16_bits(1.5)) == 1.5
    assert tessel.f16_bits_to_float(tessel.float_to_f16_bits(np.inf)) == np.inf
    assert np.isnan(tessel.f16_bits_to_float(tessel.float_to_f16_bits(np.nan)))
    assert tessel.float_to_f16_bits(1.0) == np.array(1.0, np.float16).view(np.uint16)


# ---- Tensor <-> numpy -----------------------------------------------------------------------


@pytest.mark.parametrize("name,np_dtype", NUMPY_DTYPES)
def test_numpy_round_trip_every_dtype(name, np_dtype):
    a = sample(np_dtype)
    t = tessel.Tensor.from_numpy(a)
    assert t.dtype == name
    assert t.shape == (2, 3)
    assert t.rank == 2
    assert t.num_elements == 6
    assert t.nbytes == a.nbytes
    out = t.numpy()
    assert out.dtype == np_dtype
    np.testing.assert_array_equal(out, a)


def test_f16_round_trip_keeps_inf_nan_and_subnormals():
    a = np.array([np.inf, -np.inf, np.nan, 2.0**-24, -0.0, 65504.0], np.float16)
    out = tessel.tensor(a).numpy()
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out.view(np.uint16), a.view(np.uint16))


def test_bf16_numpy_is_float32():
    # numpy has no bfloat16: a bf16 tensor comes back as float32 (documented).
    t = tessel.Tensor(np.array([1.5, -2.25, 1.00390625], np.float32), dtype="bf16")
    assert t.dtype == "bf16"
    out = t.numpy()
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [1.5, -2.25, 1.0])


def test_from_numpy_copies():
    a = np.arange(4, dtype=np.float32)
    t = tessel.tensor(a)
    a[0] = 100
    assert t.numpy()[0] == 0
    out = t.numpy()
    out[1] = 100
    assert t.numpy()[1] == 1


def test_non_contiguous_and_non_native_inputs():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    np.testing.assert_array_equal(tessel.tensor(a.T).numpy(), a.T)
    np.testing.assert_array_equal(tessel.tensor(a[:, ::2]).numpy(), a[:, ::2])
    big_endian = np.arange(5, dtype=">i4")
    t = tessel.tensor(big_endian)
    assert t.dtype == "i32"
    np.testing.assert_array_equal(t.numpy(), [0, 1, 2, 3, 4])


def test_broadcast_views_are_read_in_place():
    # Strides 0 (np.broadcast_to): read as they are, the copy holds every element.
    row = np.arange(3, dtype=np.float32)
    view = np.broadcast_to(row, (4, 3))
    assert view.strides == (0, 4)
    np.testing.assert_array_equal(tessel.Tensor(view).numpy(), np.tile(row, (4, 1)))
    np.testing.assert_array_equal(tessel.Tensor(np.broadcast_to(np.int64(7), (2, 5))).numpy(),
                                  np.full((2, 5), 7))


def test_huge_broadcast_view_is_a_clear_allocation_error(mesh):
    # 2^48 float32 elements (1 PiB) from one: numpy needs no memory for the view; tessel's copy
    # cannot be made, and says so (not a TypeError about converting the argument).
    huge = np.broadcast_to(np.float32(1), (1 << 24, 1 << 24))
    with pytest.raises(tessel.ResourceExhaustedError,
                       match=r"Tensor: cannot allocate 1125899906842624 bytes for \[16777216,16777216\] f32"):
        tessel.Tensor(huge)
    with pytest.raises(tessel.ResourceExhaustedError, match="cannot allocate 1125899906842624 bytes"):
        tessel.copy_to_mesh(huge, tessel.Layout(["x", "y"], mesh))


def test_scalar_and_empty_tensors():
    t = tessel.tensor(np.float32(2.5))
    assert t.shape == () and t.rank == 0
    assert t.numpy().shape == () and float(t.numpy()) == 2.5
    e = tessel.tensor(np.zeros((0, 3), np.int64))
    assert e.shape == (0, 3)
    assert e.numpy().shape == (0, 3)


def test_tensor_from_lists_and_dtype_conversion():
    t = tessel.tensor([[1, 2], [3, 4]], dtype="f32")
    assert t.dtype == "f32"
    np.testing.assert_array_equal(t.numpy(), [[1, 2], [3, 4]])
    assert tessel.tensor([1.5, 2.5], dtype=np.int32).numpy().tolist() == [1, 2]
    assert tessel.Tensor(np.ones(3), np.float16).dtype == "f16"


def test_array_protocol():
    t = tessel.tensor(np.arange(6, dtype=np.int32).reshape(2, 3))
    np.testing.assert_array_equal(np.asarray(t), np.arange(6).reshape(2, 3))
    assert np.asarray(t, dtype=np.float64).dtype == np.float64


def test_array_protocol_copy_keyword():
    # numpy 2 passes copy= to __array__; numpy 1 never does, so the method is called directly.
    t = tessel.tensor(np.arange(4, dtype=np.float32))
    for copy in (None, True):
        a = t.__array__(copy=copy)
        np.testing.assert_array_equal(a, np.arange(4, dtype=np.float32))
        a[0] = 7  # a copy: the tensor keeps its values
        assert t.numpy()[0] == 0
    assert t.__array__(np.float64, copy=True).dtype == np.float64
    with pytest.raises(tessel.InvalidArgumentError, match=r"Tensor.__array__.*copy=False"):
        t.__array__(copy=False)
    with pytest.raises(ValueError):  # numpy's protocol: a copy it cannot avoid is a ValueError
        t.__array__(copy=False)


@pytest.mark.skipif(np.lib.NumpyVersion(np.__version__) < "2.0.0", reason="copy= is numpy 2's")
def test_numpy2_copy_semantics():
    t = tessel.tensor(np.arange(3, dtype=np.int64))
    np.testing.assert_array_equal(np.array(t, copy=True), [0, 1, 2])
    np.testing.assert_array_equal(np.asarray(t, copy=None), [0, 1, 2])
    with pytest.raises(ValueError, match="copy=False"):
        np.asarray(t, copy=False)


def test_astype_converts():
    t = tessel.tensor(np.array([1.7, -1.7, 300.0]))
    assert t.astype("i32").numpy().tolist() == [1, -1, 300]
    assert t.astype(np.float32).dtype == "f32"


# ---- factories, views, printing -------------------------------------------------------------


def test_zeros_and_full():
    z = tessel.zeros((2, 3))
    assert z.dtype == "f32" and z.shape == (2, 3)
    np.testing.assert_array_equal(z.numpy(), np.zeros((2, 3)))
    f = tessel.full([4], "i64", 7)
    assert f.numpy().dtype == np.int64
    np.testing.assert_array_equal(f.numpy(), [7, 7, 7, 7])
    assert tessel.Tensor.full((2,), np.bool_, 1).numpy().tolist() == [True, True]


def test_random_is_deterministic():
    a = tessel.random_uniform((64,), "f32", seed=3, low=-1.0, high=1.0).numpy()
    b = tessel.random_uniform((64,), "f32", seed=3, low=-1.0, high=1.0).numpy()
    c = tessel.random_uniform((64,), "f32", seed=4, low=-1.0, high=1.0).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.min() >= -1.0 and a.max() < 1.0
    n = tessel.random_normal((4096,), "f64", seed=1, mean=2.0, stddev=0.5).numpy()
    assert abs(n.mean() - 2.0) < 0.05 and abs(n.std() - 0.5) < 0.05
    ints = tessel.random_uniform((256,), "i32", seed=0, low=0, high=10).numpy()
    assert ints.dtype == np.int32 and ints.min() >= 0 and ints.max() < 10


def test_random_block_equals_block_of_full_tensor():
    full = tessel.random_uniform((6, 4), "f32", seed=9).numpy()
    block = tessel.Tensor.random_uniform_block((6, 4), [2, 1], [3, 2], "f32", seed=9)
    np.testing.assert_array_equal(block.numpy(), full[2:5, 1:3])
    normal = tessel.random_normal((8,), "f64", seed=2).numpy()
    np.testing.assert_array_equal(
        tessel.Tensor.random_normal_block((8,), [4], [4], "f64", seed=2).numpy(), normal[4:])


def test_allclose_accepts_tensors_and_arrays():
    a = tessel.tensor(np.array([1.0, 2.0, 3.0]))
    assert tessel.allclose(a, np.array([1.0, 2.0, 3.0 + 1e-9]))
    assert not tessel.allclose(a, np.array([1.0, 2.0, 3.1]))
    nan = tessel.tensor(np.array([np.nan]))
    assert not tessel.allclose(nan, nan)
    assert tessel.allclose(nan, nan, equal_nan=True)
    with pytest.raises(ValueError):
        tessel.allclose(a, np.zeros(2))


def test_views_share_storage():
    t = tessel.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    col = t.slice(1, 1, 2)
    assert col.shape == (2, 1)
    assert col.shares_storage_with(t)
    col.fill(0)
    np.testing.assert_array_equal(t.numpy(), [[0, 0, 2], [3, 0, 5]])
    assert t.block([1, 0], [1, 2]).numpy().tolist() == [[3, 0]]
    assert t.slice(0, 1, 2).storage_offset == 3
    assert t.reshape((3, 2)).shape == (3, 2)
    c = t.clone()
    assert not c.shares_storage_with(t)
    assert t.at([1, 2]) == 5.0


def test_to_string():
    t = tessel.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert str(t) == "Tensor(shape=[2,3], dtype=f32,\n[[0, 1, 2],\n [3, 4, 5]])"
    assert repr(t) == str(t) == t.to_string()


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16", "i64", "bool"])
def test_tensor_pickle(dtype):
    t = tessel.Tensor(np.array([[1.5, -2.0], [0.0, 3.0]]), dtype=dtype)
    u = pickle.loads(pickle.dumps(t))
    assert u.dtype == dtype and u.shape == (2, 2)
    np.testing.assert_array_equal(u.numpy(), t.numpy())


def test_null_tensor():
    t = tessel.Tensor()
    assert not t.defined
    with pytest.raises(RuntimeError):
        t.numpy()


def test_negative_shape_is_value_error():
    with pytest.raises(ValueError):
        tessel.zeros((2, -1))


# ---- DeviceName, ReduceOp -------------------------------------------------------------------


def test_device_name_parse_and_print():
    d = tessel.DeviceName.parse("/job:localhost/replica:0/task:0/device:CPU:3")
    assert (d.job, d.replica, d.task, d.type, d.id) == ("localhost", 0, 0, "CPU", 3)
    assert d.to_string() == "/job:localhost/replica:0/task:0/device:CPU:3"
    assert str(d) == d.to_string()
    assert d.is_fully_specified()
    assert tessel.DeviceName.make("localhost", 0, 0, "CPU", 3) == d


def test_device_name_partial_forms():
    legacy = tessel.DeviceName.parse("/cpu:0")
    assert legacy.type == "CPU" and legacy.id == 0 and legacy.job is None
    wildcard = tessel.DeviceName.parse("/device:GPU:*")
    assert wildcard.type == "GPU" and wildcard.id is None
    assert wildcard.to_string() == "/device:GPU:*"
    partial = tessel.DeviceName.parse("/job:worker/task:1")
    assert partial.matches(tessel.DeviceName.make("worker", 0, 1, "GPU", 2))
    assert not partial.is_fully_specified()
    assert tessel.DeviceName(job="a", task=1).to_string() == "/job:a/task:1"


def test_device_name_errors_and_pickle():
    with pytest.raises(ValueError):
        tessel.DeviceName.parse("/job:localhost/bogus:1")
    assert tessel.DeviceName.try_parse("/job:localhost/bogus:1") is None
    d = tessel.DeviceName.parse("/job:w/replica:1/task:2/device:GPU:3")
    assert pickle.loads(pickle.dumps(d)) == d


def test_reduce_op_names():
    assert tessel.reduce_op_name(tessel.ReduceOp.SUM) == "sum"
    assert tessel.reduce_op_name(tessel.ReduceOp.PROD) == "prod"
    assert tessel.reduce_op_from_name("mean") == tessel.ReduceOp.MEAN
    assert tessel.reduce_op_from_name("SUM") == tessel.ReduceOp.SUM
    with pytest.raises(ValueError, match="median"):
        tessel.reduce_op_from_name("median")


def test_version():
    assert tessel.__version__.count(".") == 2
