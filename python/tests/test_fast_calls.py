"""The direct entry points of the binary ops (python/fast_calls.cpp): tessel.add(x, y) and the
other binary elementwise ops on two DTensors skip pybind11's overload dispatcher. Every other
call goes to the pybind11 overloads; both paths give the same results and the same errors."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import tessel
from conftest import host, put, rand

BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]


@pytest.mark.parametrize("name", BINARY)
def test_positional_and_keyword_calls_agree(mesh, name):
    a, b = put(rand((4, 6), 1), ("x", "y"), mesh), put(rand((4, 6), 2, 0.5, 2.0), ("y", "x"), mesh)
    fn = getattr(tessel, name)
    assert fn.__name__ == name and "DTensor" in fn.__doc__
    fast, overload = fn(a, b), fn(x=a, y=b)  # keywords: the pybind11 overloads
    assert fast.layout == overload.layout and fast.dtype == overload.dtype
    assert_array_equal(host(fast), host(overload))


def test_scalars_and_other_arguments_reach_the_overloads(mesh):
    x = put(np.ones((4, 4)), ("x", "y"), mesh)
    assert_array_equal(host(tessel.add(x, 2.0)), np.full((4, 4), 3.0))
    assert_array_equal(host(tessel.multiply(x, 3)), np.full((4, 4), 3.0))
    with pytest.raises(TypeError, match="incompatible function arguments"):
        tessel.add(x, "a")
    with pytest.raises(TypeError, match="incompatible function arguments"):
        tessel.add(x)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        tessel.subtract(x, x, x)


def test_errors_read_the_same_on_both_paths(mesh):
    x = put(np.ones((4, 4)), ("x", "y"), mesh)
    z = put(np.ones((4, 3)), ("x", "unsharded"), mesh)
    with pytest.raises(tessel.InvalidArgumentError) as fast:
        tessel.add(x, z)
    with pytest.raises(tessel.InvalidArgumentError) as overload:
        tessel.add(x=x, y=z)
    assert str(fast.value) == str(overload.value)
    assert "add: shapes [4,4] and [4,3] do not broadcast" in str(fast.value)
