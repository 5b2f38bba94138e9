"""Shared fixtures for the tessel Python tests."""

import threading

import numpy as np
import pytest

import tessel

CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"
TPU = "/job:localhost/replica:0/task:0/device:TPU:{}"


def devices(n, template=CPU):
    return [template.format(i) for i in range(n)]


@pytest.fixture
def fake_programs(tmp_path):
    """--tessel and --venv-python pointing at an executable that does nothing: the arguments
    bench/peers' side-by-side drivers (compare_pipeline.py, compare_bf16.py) check exist."""
    tool = tmp_path / "tessel"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    return ["--tessel", str(tool), "--venv-python", str(tool)]


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


# ---- op tests over random layouts (meshes of 1, 2 and 2x2 devices) --------------------------

MESHES = [[("x", 1)], [("x", 2)], [("x", 2), ("y", 2)]]


@pytest.fixture(params=range(len(MESHES)), ids=["1", "2", "2x2"])
def any_mesh(request):
    return tessel.create_mesh(MESHES[request.param])


@pytest.fixture
def fresh_fallbacks():
    """Out of strict mode and no sharding-fallback records, before the test and after it."""
    tessel.set_sharding_fallback_strict(False)
    tessel.reset_sharding_fallbacks()
    yield
    tessel.set_sharding_fallback_strict(False)
    tessel.reset_sharding_fallbacks()


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


def finite_differences(fn, arrays, w, h=1e-6):
    """d sum(fn(*arrays) * w) / d arrays[i], by central differences."""
    grads = []
    for i, a in enumerate(arrays):
        g = np.zeros_like(a)
        for j in np.ndindex(a.shape):
            plus = [x.copy() for x in arrays]
            minus = [x.copy() for x in arrays]
            plus[i][j] += h
            minus[i][j] -= h
            g[j] = ((fn(*plus) * w).sum() - (fn(*minus) * w).sum()) / (2 * h)
        grads.append(g)
    return grads


def tape_gradients(fn, dtensors, w):
    with tessel.GradientTape() as tape:
        for d in dtensors:
            tape.watch(d)
        loss = tessel.reduce_sum(fn(*dtensors) * w)
    return [host(g) for g in tape.gradient(loss, list(dtensors))]


def client_runtimes(n, devices_per_client=2):
    """n Runtimes of one program's simulated clients (make_in_process_cluster, as processes under
    mpirun): /job:worker task c, each with its cluster set."""
    clusters = tessel.make_in_process_cluster(n)
    runtimes = [tessel.Runtime(num_cpu_devices=devices_per_client, job="worker", task=c)
                for c in range(n)]
    for rt, cluster in zip(runtimes, clusters):
        tessel.set_cluster(rt, cluster)
    return runtimes


def run_as_clients(runtimes, body, timeout):
    """body(c) on one thread per client runtime at once; the clusters are unset afterwards.
    Returns the results in client order; a client's exception, or one still running after
    `timeout` seconds, fails the test."""
    results, errors = [None] * len(runtimes), []

    def client(c):
        try:
            results[c] = body(c)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(len(runtimes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    for rt in runtimes:
        tessel.set_cluster(rt, None)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), f"a client ran past {timeout} s"
    return results
