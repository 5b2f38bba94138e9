"""DLPack between tessel and PyTorch in one process, zero-copy both ways. PyTorch is not in the
module's environment (Debian's python and numpy 1.x): this runs where a torch that works with
numpy 1.x is importable beside tessel, e.g. a venv made with --system-site-packages and
torch==2.2.2, and is skipped elsewhere:

    /usr/bin/python3 -m venv --system-site-packages /tmp/dlpackvenv
    /tmp/dlpackvenv/bin/pip install "torch==2.2.2" "numpy==1.24.2"
    PYTHONPATH=build/python /tmp/dlpackvenv/bin/python -m pytest -q python/tests/test_dlpack_torch.py
"""

import numpy as np
import pytest

import tessel

torch = pytest.importorskip("torch")

DTYPES = ["float32", "float64", "int32", "int64", "uint8"]


def address(array):
    return np.from_dlpack(array).__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_to_tessel_shares_the_buffer(dtype):
    x = torch.from_numpy((np.arange(24) % 7).astype(dtype).reshape(2, 3, 4))
    t = tessel.from_dlpack(x)
    assert t.shape == (2, 3, 4)
    np.testing.assert_array_equal(t.numpy(), x.numpy())
    assert address(t) == x.data_ptr()
    x.add_(1)  # a write through torch is seen through tessel
    np.testing.assert_array_equal(t.numpy(), x.numpy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_tessel_to_torch_shares_the_buffer(dtype):
    t = tessel.from_dlpack((np.arange(24) % 7).astype(dtype).reshape(4, 6))
    x = torch.from_dlpack(t)
    assert tuple(x.shape) == (4, 6) and x.numpy().dtype == np.dtype(dtype)
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    assert x.data_ptr() == address(t)


def test_a_strided_tessel_view_reaches_torch_with_its_strides():
    t = tessel.Tensor(np.arange(20, dtype=np.float64).reshape(4, 5))
    x = torch.from_dlpack(t.slice(1, 1, 4))  # columns 1..3: a strided view
    np.testing.assert_array_equal(x.numpy(), np.arange(20.0).reshape(4, 5)[:, 1:4])
    assert x.stride() == (5, 1) and x.data_ptr() == address(t) + 8


def test_a_torch_computation_on_a_tessel_tensor_matches_numpy():
    t = tessel.Tensor.random_normal([64, 32], seed=7)
    x = torch.from_dlpack(t)
    np.testing.assert_allclose((x.T @ x).numpy(), t.numpy().T @ t.numpy(), rtol=1e-5)
