"""Issue 34's indexing and structural ops (bind_ops.cpp): gather, take_along_axis, scatter_add,
pad, cumsum, one_hot and top_k against numpy on meshes of 1, 2 and 2x2 devices over random layouts
(Partial inputs included; a sharded working axis goes through the sharding fallback), gradients
against central finite differences, and errors."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import tessel
from conftest import (distribute, finite_differences, host, put, rand, random_layout,
                      tape_gradients)

NAMES = ["gather", "take_along_axis", "scatter_add", "pad", "cumsum", "one_hot", "top_k"]

pytestmark = pytest.mark.usefixtures("fresh_fallbacks")


def indices(shape, n, seed):
    """i64 indices in [-n, n) (negative ones count from the end, as numpy)."""
    return np.random.default_rng(seed).integers(-n, n, shape).astype(np.int64)


def np_cumsum(a, axis, exclusive, reverse):
    """tf.math.cumsum in numpy."""
    a = np.flip(a, axis) if reverse else a
    out = np.cumsum(a, axis)
    if exclusive:
        out = out - a
    return np.flip(out, axis) if reverse else out


def np_top_k(a, k):
    """The k largest along the last axis, the lower index first on ties."""
    order = np.argsort(-a, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(a, order, -1), order


def test_names_are_exported():
    for name in NAMES:
        assert hasattr(tessel, name), name
        assert name in tessel.op_names(), name
        assert name in tessel.__all__, name
    assert "TopK" in tessel.__all__


# ---- values over random layouts -----------------------------------------------------------

GATHER_CASES = [((7, 3), (5,), 0), ((7, 3), (2, 3), 1), ((4, 5, 3), (6,), 1), ((5,), (), 0),
                ((3, 5), (4, 2), -1), ((6, 2), (0,), 0)]


def test_gather_matches_numpy_take_over_random_layouts(any_mesh):
    rng = np.random.default_rng(1)
    for seed, (shape, index_shape, axis) in enumerate(GATHER_CASES):
        a = rand(shape, seed)
        i = indices(index_shape, shape[axis], seed + 50)
        la, li = random_layout(shape, any_mesh, rng), random_layout(index_shape, any_mesh, rng, False)
        out = tessel.gather(distribute(a, la), distribute(i, li), axis=axis)
        assert_allclose(host(out), np.take(a, i, axis=axis), rtol=1e-12, atol=1e-14,
                        err_msg=f"{la} {li}")


def test_take_along_axis_matches_numpy_over_random_layouts(any_mesh):
    rng = np.random.default_rng(2)
    cases = [((7, 3), (4, 3), 0), ((7, 3), (7, 5), 1), ((4, 5, 3), (4, 2, 3), 1), ((5,), (9,), 0),
             ((3, 5), (3, 1), -1)]
    for seed, (shape, index_shape, axis) in enumerate(cases):
        a = rand(shape, seed)
        i = indices(index_shape, shape[axis], seed + 50)
        la, li = random_layout(shape, any_mesh, rng), random_layout(index_shape, any_mesh, rng, False)
        out = tessel.take_along_axis(distribute(a, la), distribute(i, li), axis)
        assert_allclose(host(out), np.take_along_axis(a, i, axis), rtol=1e-12, atol=1e-14,
                        err_msg=f"{la} {li}")


def test_scatter_add_matches_numpy_add_at_over_random_layouts(any_mesh):
    rng = np.random.default_rng(3)
    for seed, (shape, index_shape, axis) in enumerate(GATHER_CASES):
        axis = axis % len(shape)
        base = rand(shape, seed)
        i = indices(index_shape, shape[axis], seed + 50)
        updates = rand(shape[:axis] + index_shape + shape[axis + 1:], seed + 100)
        want = base.copy()
        np.add.at(want, (slice(None),) * axis + (i,), updates)
        layouts = [random_layout(base.shape, any_mesh, rng),
                   random_layout(i.shape, any_mesh, rng, False),
                   random_layout(updates.shape, any_mesh, rng)]
        out = tessel.scatter_add(*[distribute(x, l) for x, l in zip([base, i, updates], layouts)],
                                 axis=axis)
        assert_allclose(host(out), want, rtol=1e-12, atol=1e-13, err_msg=str(layouts))


def test_pad_matches_numpy_over_random_layouts(any_mesh):
    rng = np.random.default_rng(4)
    for seed, shape in enumerate([(5, 3), (7,), (2, 3, 4), (0, 2)]):
        a = rand(shape, seed)
        paddings = [(int(rng.integers(0, 3)), int(rng.integers(0, 2))) for _ in shape]
        constant = [0.0, -1.5][seed % 2]
        layout = random_layout(shape, any_mesh, rng)
        out = tessel.pad(distribute(a, layout), paddings, constant_values=constant)
        assert_allclose(host(out), np.pad(a, paddings, constant_values=constant), rtol=1e-12,
                        atol=1e-14, err_msg=f"{layout} {paddings}")


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_matches_numpy_over_random_layouts(any_mesh, exclusive, reverse):
    rng = np.random.default_rng(5)
    for seed, (shape, axis) in enumerate([((5, 3), 0), ((5, 3), 1), ((7,), 0), ((2, 3, 4), -2)]):
        a = rand(shape, seed)
        layout = random_layout(shape, any_mesh, rng)
        out = tessel.cumsum(distribute(a, layout), axis=axis, exclusive=exclusive, reverse=reverse)
        assert_allclose(host(out), np_cumsum(a, axis, exclusive, reverse), rtol=1e-12, atol=1e-13,
                        err_msg=str(layout))


def test_integer_cumsum(mesh):
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    out = tessel.cumsum(put(a, ("x", "y"), mesh), axis=1)
    assert out.dtype == "i64"
    assert_array_equal(host(out), np.cumsum(a, axis=1))


def test_one_hot_matches_numpy_over_random_layouts(any_mesh):
    rng = np.random.default_rng(6)
    for seed, shape in enumerate([(5,), (3, 4), ()]):
        i = np.random.default_rng(seed).integers(-1, 5, shape).astype(np.int64)  # -1, 4: off
        for axis in range(-1, len(shape) + 1):
            layout = random_layout(shape, any_mesh, rng, False)
            out = tessel.one_hot(distribute(i, layout), 4, on_value=2.5, off_value=-1.0,
                                 axis=axis, dtype="f64")
            want = np.where(np.arange(4) == i[..., None], 2.5, -1.0)
            assert_array_equal(host(out), np.moveaxis(want, -1, axis), err_msg=str(layout))


def test_one_hot_dtypes(mesh):
    labels = put(np.array([2, 0, 1, 2]), ("x",), mesh)
    assert tessel.one_hot(labels, 3).dtype == "f32"
    mask = tessel.one_hot(labels, 3, dtype="bool")
    assert mask.dtype == "bool"
    assert_array_equal(host(mask), np.eye(3, dtype=bool)[[2, 0, 1, 2]])
    assert_array_equal(host(tessel.one_hot(labels, 3, dtype="i32")), np.eye(3)[[2, 0, 1, 2]])


def test_top_k_matches_numpy_over_random_layouts(any_mesh):
    rng = np.random.default_rng(7)
    for seed, (shape, k) in enumerate([((5, 6), 3), ((7,), 7), ((2, 3, 4), 1), ((4, 5), 0)]):
        a = rand(shape, seed)
        a[..., 0] = a[..., -1]  # a tie: the lower index comes first
        layout = random_layout(shape, any_mesh, rng, False)
        result = tessel.top_k(distribute(a, layout), k=k)
        values, order = result
        assert isinstance(result, tuple) and result.values is values and result.indices is order
        want_values, want_order = np_top_k(a, k)
        assert order.dtype == "i64"
        assert_array_equal(host(order), want_order, err_msg=str(layout))
        assert_array_equal(host(values), want_values, err_msg=str(layout))


def test_top_k_of_integers_and_nan(mesh):
    values, order = tessel.top_k(put(np.array([[4, 9, 4, 1]]), ("x", "y"), mesh), 3)
    assert_array_equal(host(values), [[9, 4, 4]])
    assert_array_equal(host(order), [[1, 0, 2]])
    values, order = tessel.top_k(put(np.array([1.0, np.nan, 3.0, 2.0]), ("y",), mesh), 2)
    assert_array_equal(host(order), [1, 2])  # NaN counts as the largest, as argmax
    assert np.isnan(host(values)[0]) and host(values)[1] == 3.0


def test_a_sharded_working_axis_falls_back_or_raises_in_strict_mode(mesh):
    a = rand((4, 6), 8)
    d = put(a, ("x", "y"), mesh)
    out = tessel.cumsum(d, axis=1)
    assert out.layout == tessel.Layout(["x", "unsharded"], mesh)
    assert_allclose(host(out), np.cumsum(a, axis=1), rtol=1e-12)
    assert [r.op for r in tessel.sharding_fallbacks()] == ["cumsum"]
    tessel.set_sharding_fallback_strict(True)
    with pytest.raises(NotImplementedError, match="gather: no sharding rule"):
        tessel.gather(d, put(np.array([0, 2]), ("unsharded",), mesh))
    with pytest.raises(NotImplementedError, match="which the op works along, is sharded"):
        tessel.pad(d, [(0, 0), (1, 1)])
    # top_k gathers the last axis itself: no fallback.
    assert_array_equal(host(tessel.top_k(d, 2).indices), np_top_k(a, 2)[1])


# ---- gradients against finite differences ------------------------------------------------


def test_gather_and_take_along_axis_gradients(mesh):
    a = rand((4, 3), 9)
    i = np.array([[1, -1], [1, 0]])
    w = rand((4, 2, 2), 10)
    got = tape_gradients(lambda d: tessel.gather(d, put(i, ("x", "unsharded"), mesh), axis=1),
                         [put(a, ("x", "y"), mesh)], put(w, ("unsharded",) * 3, mesh))
    assert_allclose(got[0], finite_differences(lambda v: np.take(v, i, axis=1), [a], w)[0],
                    rtol=1e-6, atol=1e-8)
    j = indices((4, 5), 3, 11)
    w = rand((4, 5), 12)
    got = tape_gradients(lambda d: tessel.take_along_axis(d, put(j, ("x", "y"), mesh), 1),
                         [put(a, ("unsharded", "y"), mesh, partial=[("x", "sum")])],
                         put(w, ("unsharded", "unsharded"), mesh))
    want = finite_differences(lambda v: np.take_along_axis(v, j, 1), [a], w)[0]
    assert_allclose(got[0], want, rtol=1e-6, atol=1e-8)


def test_scatter_add_gradients_into_base_and_updates(mesh):
    base, updates = rand((4, 3), 13), rand((3, 3), 14)
    i = np.array([2, 0, 2])
    w = rand((4, 3), 15)

    def np_scatter(b, u):
        out = b.copy()
        np.add.at(out, i, u)
        return out

    got = tape_gradients(lambda b, u: tessel.scatter_add(b, put(i, ("x",), mesh), u),
                         [put(base, ("unsharded", "y"), mesh), put(updates, ("x", "y"), mesh)],
                         put(w, ("unsharded", "unsharded"), mesh))
    for g, want in zip(got, finite_differences(np_scatter, [base, updates], w)):
        assert_allclose(g, want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_gradients(mesh, exclusive, reverse):
    a, w = rand((4, 3), 16), rand((4, 3), 17)
    got = tape_gradients(lambda d: tessel.cumsum(d, 0, exclusive, reverse), [put(a, ("x", "y"), mesh)],
                         put(w, ("unsharded", "unsharded"), mesh))
    want = finite_differences(lambda v: np_cumsum(v, 0, exclusive, reverse), [a], w)[0]
    assert_allclose(got[0], want, rtol=1e-6, atol=1e-8)


def test_pad_and_top_k_gradients(mesh):
    a = rand((4, 3), 18)
    w = rand((5, 6), 19)
    paddings = [(1, 0), (2, 1)]
    got = tape_gradients(lambda d: tessel.pad(d, paddings, 3.0), [put(a, ("x", "unsharded"), mesh)],
                         put(w, ("unsharded", "unsharded"), mesh))
    want = finite_differences(lambda v: np.pad(v, paddings, constant_values=3.0), [a], w)[0]
    assert_allclose(got[0], want, rtol=1e-6, atol=1e-8)
    w = rand((4, 2), 20)
    got = tape_gradients(lambda d: tessel.top_k(d, 2).values, [put(a, ("x", "y"), mesh)],
                         put(w, ("unsharded", "unsharded"), mesh))
    want = finite_differences(lambda v: np_top_k(v, 2)[0], [a], w)[0]
    assert_allclose(got[0], want, rtol=1e-6, atol=1e-8)


# ---- errors -------------------------------------------------------------------------------


def test_errors_name_the_op_and_the_value(mesh):
    a = put(rand((2, 3), 21), ("x", "unsharded"), mesh)
    with pytest.raises(ValueError, match=r"gather: index 3 is not in \[-3, 3\) \(axis 1 has 3"):
        host(tessel.gather(a, put(np.array([0, 3]), ("x",), mesh), axis=1))
    with pytest.raises(ValueError, match=r"take_along_axis: index -4 is not in \[-3, 3\)"):
        host(tessel.take_along_axis(a, put(np.array([[0], [-4]]), ("x", "unsharded"), mesh), 1))
    with pytest.raises(ValueError, match=r"scatter_add: index 2 is not in \[-2, 2\)"):
        host(tessel.scatter_add(a, put(np.array([2]), ("unsharded",), mesh),
                                put(np.ones((1, 3)), ("unsharded", "unsharded"), mesh)))
    with pytest.raises(ValueError, match="gather: axis 2 is out of range for rank 2"):
        tessel.gather(a, put(np.array([0]), ("x",), mesh), axis=2)
    with pytest.raises(ValueError, match="indices must be i32 or i64, got f64"):
        tessel.gather(a, a)
    with pytest.raises(ValueError, match=r"top_k: k 4 is larger than the last axis \(3 elements\)"):
        tessel.top_k(a, 4)
    with pytest.raises(ValueError, match=r"pad: paddings\[1\] = \(0, -1\) is negative"):
        tessel.pad(a, [(0, 0), (0, -1)])
    with pytest.raises(ValueError, match="pad: paddings has 1 pairs for x of rank 2"):
        tessel.pad(a, [(1, 1)])
    with pytest.raises(ValueError, match="cumsum: axis -3 is out of range"):
        tessel.cumsum(a, axis=-3)
    with pytest.raises(ValueError, match="one_hot: on_value 0.5 is not a value of i64"):
        tessel.one_hot(put(np.array([0, 1]), ("x",), mesh), 2, on_value=0.5, dtype="i64")
