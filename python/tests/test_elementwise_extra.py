"""Issue 34's elementwise ops (bind_ops.cpp): square, abs, sin, cos, silu, pow, the comparisons and
where against numpy on meshes of 1, 2 and 2x2 devices over random layouts (Partial inputs
included), broadcasting, gradients against central finite differences, and the DTensor operators
** < <= > >= == != abs() and indexing."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import tessel
from conftest import distribute, host, put, rand, random_layout

UNARY = [("square", np.square), ("abs", np.abs), ("sin", np.sin), ("cos", np.cos),
         ("silu", lambda v: v / (1 + np.exp(-v)))]
COMPARISONS = [("less", np.less), ("less_equal", np.less_equal), ("greater", np.greater),
               ("greater_equal", np.greater_equal), ("equal", np.equal),
               ("not_equal", np.not_equal)]
SHAPE_PAIRS = [((5, 3), (5, 3)), ((5, 3), (3,)), ((5, 1), (1, 3)), ((7,), ()),
               ((2, 5, 3), (5, 1)), ((3,), (4, 3))]


def test_names_are_exported_and_star_import_keeps_abs_and_pow():
    names = ["square", "abs", "sin", "cos", "silu", "pow", "where"] + [n for n, _ in COMPARISONS]
    for name in names:
        assert hasattr(tessel, name), name
        assert name in tessel.op_names()
    scope = {}
    exec("from tessel import *", scope)
    assert "abs" not in scope and "pow" not in scope and "where" in scope


# ---- values over random layouts -----------------------------------------------------------


@pytest.mark.parametrize("name,fn", UNARY, ids=[n for n, _ in UNARY])
def test_unary_ops_match_numpy_over_random_layouts(any_mesh, name, fn):
    rng = np.random.default_rng(1)
    for seed, shape in enumerate([(5, 3), (7,), (2, 3, 5), ()]):
        a = rand(shape, seed)
        layout = random_layout(shape, any_mesh, rng)
        out = getattr(tessel, name)(distribute(a, layout))
        assert_allclose(host(out), fn(a), rtol=1e-12, atol=1e-14, err_msg=str(layout))
        assert out.dtype == "f64"


@pytest.mark.parametrize("name,fn", COMPARISONS + [("pow", None)],
                         ids=[n for n, _ in COMPARISONS] + ["pow"])
def test_binary_ops_broadcast_like_numpy_over_random_layouts(any_mesh, name, fn):
    rng = np.random.default_rng(2)
    for seed, (sa, sb) in enumerate(SHAPE_PAIRS):
        if name == "pow":
            a, b = rand(sa, seed, 0.5, 2.0), rand(sb, seed + 100)
            want = a ** b
        elif name in ("equal", "not_equal"):  # small integers: ties
            a, b = np.floor(rand(sa, seed, 0, 3)), np.floor(rand(sb, seed + 100, 0, 3))
            want = fn(a, b)
        else:
            a, b = rand(sa, seed), rand(sb, seed + 100)
            want = fn(a, b)
        # A reduced Partial is exact only to ~1 ulp: no Partial where ties are the point.
        partial = name not in ("equal", "not_equal")
        la = random_layout(sa, any_mesh, rng, partial)
        lb = random_layout(sb, any_mesh, rng, partial)
        out = host(getattr(tessel, name)(distribute(a, la), distribute(b, lb)))
        assert out.shape == want.shape
        if name == "pow":
            assert_allclose(out, want, rtol=1e-12, err_msg=f"{la} {lb}")
        else:
            assert out.dtype == np.bool_
            assert_array_equal(out, want, err_msg=f"{la} {lb}")


def test_where_broadcasts_three_inputs_over_random_layouts(any_mesh):
    rng = np.random.default_rng(3)
    triples = [((5, 3), (5, 3), (5, 3)), ((5, 3), (3,), ()), ((5, 1), (1, 3), (5, 3)),
               ((), (4, 5), (5,)), ((3,), (4, 3), (4, 1))]
    for seed, (sc, sx, sy) in enumerate(triples):
        c = rand(sc, seed) > 0
        x, y = rand(sx, seed + 10), rand(sy, seed + 20)
        lc = random_layout(sc, any_mesh, rng, partial=False)
        lx, ly = random_layout(sx, any_mesh, rng), random_layout(sy, any_mesh, rng)
        out = tessel.where(distribute(c, lc), distribute(x, lx), distribute(y, ly))
        assert_allclose(host(out), np.where(c, x, y), rtol=1e-12, atol=1e-15,
                        err_msg=f"{lc} {lx} {ly}")


def test_where_with_a_python_scalar(mesh):
    a = rand((4, 6), 29)
    d = put(a, ("x", "y"), mesh)
    assert_array_equal(host(tessel.where(d > 0, d, 0.0)), np.where(a > 0, a, 0.0))
    masked = tessel.where(d < 1, -1e9, d)
    assert masked.layout == d.layout
    assert_array_equal(host(masked), np.where(a < 1, -1e9, a))


def test_comparison_of_a_partial_sum_compares_the_sum(mesh):
    a = rand((4, 6), 4)
    d = put(a, ("x", "unsharded"), mesh, partial=[("y", "sum")])
    assert_array_equal(host(tessel.greater(d, put(np.zeros(6), ("unsharded",), mesh))), a > 0)


def test_integer_comparisons_count_correct_predictions(mesh):
    logits = rand((8, 5), 27)
    labels = np.random.default_rng(28).integers(0, 5, 8)
    guess = tessel.argmax(put(logits, ("x", "y"), mesh), axis=-1)
    hits = tessel.equal(guess, put(labels, ("x",), mesh))
    assert hits.dtype == "bool"
    assert_array_equal(host(hits), logits.argmax(-1) == labels)


def test_integer_tensors_against_python_scalars(mesh):
    labels = np.array([1, 2, 3, 2], dtype=np.int64)
    d = put(labels, ("x",), mesh)
    assert_array_equal(host(d == 2), labels == 2)
    assert_array_equal(host(d >= 2.0), labels >= 2)
    assert_array_equal(host(tessel.where(d > 1, d, 0)), np.where(labels > 1, labels, 0))
    # A scalar the integer dtype cannot hold is refused, not truncated.
    with pytest.raises(ValueError, match="less: the scalar 2.5 is not a value of the i64"):
        d < 2.5
    with pytest.raises(ValueError, match="where: the scalar 0.5"):
        tessel.where(d > 1, d, 0.5)


def test_pow_with_a_scalar_exponent(mesh):
    a = rand((4, 6), 5, 0.5, 2.0)
    d = put(a, ("x", "y"), mesh)
    assert_allclose(host(tessel.pow(d, 3.0)), a ** 3.0, rtol=1e-14)
    assert_allclose(host(tessel.pow(d, -0.5)), a ** -0.5, rtol=1e-14)


def test_errors_name_the_op(mesh):
    d = put(rand((4,), 6), ("x",), mesh)
    with pytest.raises(ValueError, match="cond must be bool"):
        tessel.where(d, d, d)
    with pytest.raises(ValueError, match="less"):
        tessel.less(d, put(rand((3,), 7), ("unsharded",), mesh))


# ---- gradients against finite differences --------------------------------------------------


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


@pytest.mark.parametrize("name,fn", UNARY, ids=[n for n, _ in UNARY])
def test_unary_gradients_match_finite_differences(mesh, name, fn):
    a = rand((4, 3), 8, 0.3, 2.0) * np.where(rand((4, 3), 9) > 0, 1, -1)  # away from abs's kink
    w = rand((4, 3), 10)
    got = tape_gradients(getattr(tessel, name), [put(a, ("x", "y"), mesh)],
                         put(w, ("x", "unsharded"), mesh))
    assert_allclose(got[0], finite_differences(fn, [a], w)[0], rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("sa,sb", [((4, 3), (4, 3)), ((4, 3), (3,)), ((4, 1), (1, 3))])
def test_pow_gradients_into_both_operands(mesh, sa, sb):
    a, b = rand(sa, 11, 0.5, 2.0), rand(sb, 12)
    w = rand(np.broadcast_shapes(sa, sb), 13)
    got = tape_gradients(tessel.pow, [put(a, ("x",) + ("unsharded",) * (len(sa) - 1), mesh),
                                      put(b, ("unsharded",) * (len(sb) - 1) + ("y",), mesh)],
                         put(w, ("unsharded",) * len(w.shape), mesh))
    for g, want in zip(got, finite_differences(np.power, [a, b], w)):
        assert_allclose(g, want, rtol=1e-6, atol=1e-8)


def test_where_gradients_into_x_and_y(mesh):
    c = rand((4, 3), 14) > 0
    x, y = rand((4, 3), 15), rand((3,), 16)
    w = rand((4, 3), 17)
    dc = put(c, ("x", "y"), mesh)
    got = tape_gradients(lambda dx, dy: tessel.where(dc, dx, dy),
                         [put(x, ("x", "unsharded"), mesh), put(y, ("y",), mesh)],
                         put(w, ("unsharded", "unsharded"), mesh))
    want = finite_differences(lambda px, py: np.where(c, px, py), [x, y], w)
    for g, ref in zip(got, want):
        assert_allclose(g, ref, rtol=1e-6, atol=1e-8)


def test_no_gradient_flows_through_a_comparison(mesh):
    a, b = rand((4, 3), 18), rand((3,), 19)
    w = rand((4, 3), 20)
    fn = lambda da, db: da * tessel.cast(da < db, "f64")  # noqa: E731
    got = tape_gradients(fn, [put(a, ("x", "y"), mesh), put(b, ("y",), mesh)],
                         put(w, ("unsharded", "unsharded"), mesh))
    assert_allclose(got[0], w * (a < b))
    assert_array_equal(got[1], np.zeros(3))


# ---- operators ------------------------------------------------------------------------------


def test_power_comparison_and_abs_operators(mesh):
    a, b = rand((4, 6), 21, 0.5, 2.0), rand((4, 6), 22)
    da, db = put(a, ("x", "y"), mesh), put(b, ("unsharded", "y"), mesh)
    assert_allclose(host(da ** db), a ** b, rtol=1e-14)
    assert_allclose(host(da ** 2), a ** 2, rtol=1e-14)
    assert_allclose(host(2.0 ** db), 2.0 ** b, rtol=1e-14)
    assert_array_equal(host(abs(db)), np.abs(b))
    for got, want in [(da < db, a < b), (da <= db, a <= b), (da > db, a > b), (da >= db, a >= b),
                      (da == da, a == a), (da != db, a != b), (db < 0.5, b < 0.5),
                      (0.5 < db, 0.5 < b), (db >= 0, b >= 0), (db == 1.0, b == 1.0),
                      (np.float64(0.1) > db, 0.1 > b)]:
        assert got.dtype == "bool"
        assert_array_equal(host(got), want)


def test_dtensors_stay_hashable_and_truth_needs_one_element(mesh):
    d = put(rand((4,), 23), ("x",), mesh)
    e = put(rand((4,), 24), ("x",), mesh)
    assert {d: 1, e: 2}[d] == 1 and len({d, e}) == 2
    assert (d == None) is False and (d != None) is True  # noqa: E711: not elementwise
    with pytest.raises(ValueError, match="ambiguous"):
        bool(d == e)
    with pytest.raises(ValueError, match="ambiguous"):
        d in [e]
    assert d in [d]  # identity first, as Python's containment checks
    assert bool(d[1] == d[1]) and not bool(d[1] != d[1])


def test_indexing_with_ints_and_slices(mesh):
    a = rand((4, 6, 5), 25)
    d = put(a, ("x", "y", "unsharded"), mesh)
    for key in [(slice(1, 3),), (slice(None), 2), (1, slice(None), slice(-2, None)),
                (Ellipsis, 0), (slice(0, 4), slice(2, 5), slice(1, 4)), -1, (2, 3, 4),
                (slice(10, 20),), (Ellipsis,), (0, Ellipsis, slice(1, 2))]:
        got = d[key]
        want = a[key]
        assert got.shape == list(want.shape) or tuple(got.shape) == want.shape, key
        assert_array_equal(host(got), want, err_msg=str(key))


def test_indexing_errors(mesh):
    d = put(rand((4, 6), 26), ("x", "y"), mesh)
    with pytest.raises(ValueError, match="step 2 in dim 0"):
        d[::2]
    with pytest.raises(IndexError, match="out of range"):
        d[4]
    with pytest.raises(IndexError, match="too many indices"):
        d[0, 0, 0]
    with pytest.raises(TypeError, match="indices must be"):
        d[None]
    with pytest.raises(ValueError, match="more than one"):
        d[..., ...]
