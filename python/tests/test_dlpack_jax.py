"""DLPack between tessel and JAX in one process, zero-copy both ways. JAX is not in the module's
environment (Debian's python and numpy 1.x): this runs where a JAX that works with numpy 1.x is
importable beside tessel, e.g. a venv made with --system-site-packages and jax[cpu]==0.4.20, and
is skipped elsewhere:

    /usr/bin/python3 -m venv --system-site-packages /tmp/jaxvenv
    /tmp/jaxvenv/bin/pip install "jax[cpu]==0.4.20" "numpy==1.24.2"
    PYTHONPATH=build/python /tmp/jaxvenv/bin/python -m pytest -q python/tests/test_dlpack_jax.py
"""

import numpy as np
import pytest

import tessel

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax_dlpack = pytest.importorskip("jax.dlpack")
jax.config.update("jax_enable_x64", True)  # else JAX turns 64-bit arrays into 32-bit copies


def address(array):
    return np.from_dlpack(array).__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8"])
def test_jax_to_tessel_shares_the_buffer(dtype):
    x = jnp.arange(24, dtype=dtype).reshape(2, 3, 4)
    t = tessel.from_dlpack(x)
    assert t.shape == (2, 3, 4) and np.dtype(x.dtype) == np.dtype(dtype)
    np.testing.assert_array_equal(t.numpy(), np.asarray(x))
    assert address(t) == x.unsafe_buffer_pointer()


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8"])
def test_tessel_to_jax_shares_the_buffer(dtype):
    t = tessel.from_dlpack((np.arange(24) % 7).astype(dtype).reshape(4, 6))
    x = jax_dlpack.from_dlpack(t)
    assert x.shape == (4, 6) and x.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(x), t.numpy())
    assert x.unsafe_buffer_pointer() == address(t)


def test_a_jax_computation_on_a_tessel_tensor_matches_numpy():
    t = tessel.Tensor.random_normal([64, 32], seed=7)
    x = jax_dlpack.from_dlpack(t)
    np.testing.assert_allclose(np.asarray(x.T @ x), t.numpy().T @ t.numpy(), rtol=1e-5)
