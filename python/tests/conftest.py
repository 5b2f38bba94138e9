"""Shared fixtures for the tessel Python tests."""

import numpy as np
import pytest

import tessel

CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"
TPU = "/job:localhost/replica:0/task:0/device:TPU:{}"


def devices(n, template=CPU):
    return [template.format(i) for i in range(n)]


@pytest.fixture
def mesh_2x2():
    """x=2,y=2 over 4 local CPU devices, built with TF's constructor."""
    return tessel.Mesh(["x", "y"], np.arange(4).reshape(2, 2), [0, 1, 2, 3], devices(4))


@pytest.fixture
def mesh_1d():
    return tessel.Mesh(["x"], np.arange(2), [0, 1], devices(2))
