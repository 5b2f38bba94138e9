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


@pytest.fixture
def mesh():
    """x=2,y=2 over the default runtime's devices (the op and autodiff tests)."""
    return tessel.create_mesh([("x", 2), ("y", 2)])


def put(array, specs, mesh, partial=None):
    """A numpy array laid out on `mesh` by TF-style specs, optionally Partial over dims."""
    layout = tessel.Layout(list(specs), mesh)
    if partial:
        layout = layout.with_partial(partial)
    return tessel.copy_to_mesh(np.asarray(array), layout)


def host(d):
    return tessel.to_host(d)


def rand(shape, seed, low=-2.0, high=2.0, dtype=np.float64):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)


# Meshes of 1, 2 and 2x2 devices: the `any_mesh` fixture runs a test on each.
MESHES = [[("x", 1)], [("x", 2)], [("x", 2), ("y", 2)]]


@pytest.fixture(params=range(len(MESHES)), ids=["1", "2", "2x2"])
def any_mesh(request):
    return tessel.create_mesh(MESHES[request.param])


def random_layout(shape, mesh, rng, partial=True):
    """Each dim unsharded or sharded over a free mesh dim; a free mesh dim left may be Partial."""
    free = [name for name in mesh.dim_names]
    rng.shuffle(free)
    specs = []
    for _ in shape:
        specs.append(free.pop() if free and rng.random() < 0.6 else "unsharded")
    layout = tessel.Layout(specs, mesh)
    if partial and free and rng.random() < 0.5:
        layout = layout.with_partial([(free.pop(), "sum")])
    return layout


def distribute(array, layout):
    return tessel.copy_to_mesh(np.asarray(array), layout)
