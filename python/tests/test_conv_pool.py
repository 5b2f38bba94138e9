"""conv2d, max_pool2d and avg_pool2d (bind_ops.cpp; ops_conv.cpp, ops_pool.cpp) against a
straightforward NumPy convolution and pooling written here, on meshes of 1, 2 and 2x2 devices
over random layouts (every sharding the rules claim: batch, output channels, input channels with
a Partial output, Partial inputs, and sharded height or width through the sharding fallback),
TF's argument forms, the sharding rules, gradients against central finite differences of the
NumPy functions, and errors."""

import zlib

import numpy as np
import pytest
from numpy.testing import assert_allclose

import tessel
from conftest import distribute, host, rand, random_layout

# (strides, padding, dilations): TF's forms; explicit padding as TF's NHWC pairs.
CONV_CASES = [
    ((1, 1), "VALID", (1, 1)),
    ((1, 1), "SAME", (1, 1)),
    ((2, 2), "SAME", (1, 1)),
    ((2, 1), "VALID", (1, 1)),
    ((1, 3), "SAME", (1, 1)),
    ((1, 1), "SAME", (2, 1)),
    ((2, 2), "VALID", (2, 2)),
    ((1, 1), [[0, 0], [1, 0], [2, 1], [0, 0]], (1, 1)),
    ((2, 1), [[0, 0], [0, 1], [1, 1], [0, 0]], (1, 2)),
]
# (ksize, strides, padding) for the pools: windows 3x2, explicit pads smaller than them.
POOL_CASES = [
    ((3, 2), (1, 1), "VALID"),
    ((3, 2), (1, 1), "SAME"),
    ((3, 2), (2, 2), "SAME"),
    ((3, 2), (2, 1), "VALID"),
    ((2, 2), (2, 2), "VALID"),
    ((3, 2), (1, 3), "SAME"),
    ((3, 2), (2, 1), [[0, 0], [1, 2], [1, 0], [0, 0]]),
]


def case_id(case):
    return "-".join(str(part).replace(" ", "") for part in case)


# ---- the NumPy reference ------------------------------------------------------------------------


def pads_along(size, taps, stride, dilation, padding, axis):
    """(before, after) padding along one spatial axis, TF's rule for "SAME"."""
    if isinstance(padding, list):
        return tuple(padding[axis])
    if padding == "VALID":
        return 0, 0
    span = (taps - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + span - size, 0)
    return total // 2, total - total // 2


def windows(x, taps, strides, padding, dilations, fill):
    """Each tap's view of the padded input: a list of (tap, [n, out_h, out_w, c]) slices."""
    (kh, kw), (sh, sw), (dh, dw) = taps, strides, dilations
    ph = pads_along(x.shape[1], kh, sh, dh, padding, 1)
    pw = pads_along(x.shape[2], kw, sw, dw, padding, 2)
    xp = np.pad(x, ((0, 0), ph, pw, (0, 0)), constant_values=fill)
    out_h = (xp.shape[1] - (kh - 1) * dh - 1) // sh + 1
    out_w = (xp.shape[2] - (kw - 1) * dw - 1) // sw + 1
    return [((i, j), xp[:, i * dh:i * dh + (out_h - 1) * sh + 1:sh,
                        j * dw:j * dw + (out_w - 1) * sw + 1:sw, :])
            for i in range(kh) for j in range(kw)]


def np_conv2d(x, w, strides, padding, dilations=(1, 1)):
    taps = windows(x, w.shape[:2], strides, padding, dilations, 0.0)
    return sum(np.einsum("nhwc,co->nhwo", view, w[i, j]) for (i, j), view in taps)


def np_pool(x, ksize, strides, padding, kind):
    if kind == "max":
        return np.max([v for _, v in windows(x, ksize, strides, padding, (1, 1), -np.inf)], 0)
    total = sum(v for _, v in windows(x, ksize, strides, padding, (1, 1), 0.0))
    cells = sum(v for _, v in windows(np.ones_like(x), ksize, strides, padding, (1, 1), 0.0))
    return total / cells


def tf_ints(pair):
    """TF's 4-int form of a (height, width) pair."""
    return [1, pair[0], pair[1], 1]


# ---- names ----------------------------------------------------------------------------------


def test_names_are_exported():
    for name in ("conv2d", "max_pool2d", "avg_pool2d"):
        assert hasattr(tessel, name) and name in tessel.op_names()
    for name in ("conv2d_backprop_input", "conv2d_backprop_filter", "max_pool2d_grad",
                 "avg_pool2d_grad"):
        assert name in tessel.op_names()


# ---- values over random layouts ---------------------------------------------------------------


@pytest.mark.parametrize("strides,padding,dilations", CONV_CASES,
                         ids=[case_id(c) for c in CONV_CASES])
def test_conv2d_matches_numpy_over_random_layouts(any_mesh, strides, padding, dilations):
    rng = np.random.default_rng(zlib.crc32(case_id((strides, padding, dilations)).encode()))
    for trial in range(3):
        x, w = rand((5, 7, 6, 4), 10 + trial), rand((3, 2, 4, 6), 20 + trial)
        lx, lw = random_layout(x.shape, any_mesh, rng), random_layout(w.shape, any_mesh, rng)
        out = tessel.conv2d(distribute(x, lx), distribute(w, lw), list(strides), padding,
                            dilations=list(dilations))
        want = np_conv2d(x, w, strides, padding, dilations)
        assert out.shape == want.shape
        assert_allclose(host(out), want, rtol=1e-11, atol=1e-11, err_msg=f"{lx} {lw}")


@pytest.mark.parametrize("ksize,strides,padding", POOL_CASES, ids=[case_id(c) for c in POOL_CASES])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pools_match_numpy_over_random_layouts(any_mesh, ksize, strides, padding, kind):
    rng = np.random.default_rng(zlib.crc32(case_id((ksize, strides, padding, kind)).encode()))
    op = tessel.max_pool2d if kind == "max" else tessel.avg_pool2d
    for trial in range(3):
        x = rand((5, 7, 6, 4), 30 + trial)
        layout = random_layout(x.shape, any_mesh, rng)
        out = op(distribute(x, layout), list(ksize), list(strides), padding)
        assert_allclose(host(out), np_pool(x, ksize, strides, padding, kind), rtol=1e-12,
                        atol=1e-14, err_msg=str(layout))


def test_every_sharding_the_rules_claim_needs_no_gather(mesh):
    """Batch, output-channel and input-channel sharding on a 2x2 mesh: the output's layout is the
    rule's (no fallback counted) and the values are NumPy's."""
    x, w = rand((4, 6, 5, 4), 1), rand((3, 3, 4, 6), 2)
    want = np_conv2d(x, w, (1, 1), "SAME")
    u = "unsharded"
    cases = [
        (("x", u, u, u), (u, u, u, u), ["x", u, u, u], False),   # batch
        ((u, u, u, u), (u, u, u, "y"), [u, u, u, "y"], False),   # output channels
        (("x", u, u, u), (u, u, u, "y"), ["x", u, u, "y"], False),
        ((u, u, u, "y"), (u, u, "y", u), [u, u, u, u], True),     # input channels: Partial
        (("x", u, u, "y"), (u, u, "y", u), ["x", u, u, u], True),
    ]
    tessel.reset_sharding_fallbacks()
    for sx, sw, out_specs, partial in cases:
        out = tessel.conv2d(tessel.copy_to_mesh(x, tessel.Layout(list(sx), mesh)),
                            tessel.copy_to_mesh(w, tessel.Layout(list(sw), mesh)), 1, "SAME")
        want_layout = tessel.Layout(out_specs, mesh)
        if partial:
            want_layout = want_layout.with_partial([("y", "sum")])
        assert out.layout == want_layout, (sx, sw)
        assert_allclose(host(out), want, rtol=1e-12, atol=1e-12)
    pooled = tessel.max_pool2d(tessel.copy_to_mesh(x, tessel.Layout(["x", u, u, "y"], mesh)),
                               2, 2, "SAME")
    assert pooled.layout == tessel.Layout(["x", u, u, "y"], mesh)
    assert tessel.sharding_fallbacks() == []


def test_sharded_height_falls_back_and_strict_mode_refuses_it(mesh):
    x, w = rand((2, 6, 5, 3), 3), rand((3, 3, 3, 2), 4)
    u = "unsharded"
    dx = tessel.copy_to_mesh(x, tessel.Layout([u, "x", "y", u], mesh))
    dw = tessel.copy_to_mesh(w, tessel.Layout.replicated(mesh, 4))
    tessel.reset_sharding_fallbacks()
    assert_allclose(host(tessel.conv2d(dx, dw, 1, "SAME")), np_conv2d(x, w, (1, 1), "SAME"),
                    rtol=1e-12, atol=1e-12)
    assert [r.op for r in tessel.sharding_fallbacks()] == ["conv2d"]
    tessel.set_sharding_fallback_strict(True)
    try:
        with pytest.raises(NotImplementedError, match="height and width"):
            tessel.max_pool2d(dx, 2, 2, "VALID")
    finally:
        tessel.set_sharding_fallback_strict(False)
        tessel.reset_sharding_fallbacks()


# ---- TF's argument forms ----------------------------------------------------------------------


def test_tf_argument_forms(mesh):
    x, w = rand((2, 7, 6, 3), 5), rand((3, 3, 3, 2), 6)
    dx = tessel.copy_to_mesh(x, tessel.Layout(["x", "unsharded", "unsharded", "unsharded"], mesh))
    dw = tessel.copy_to_mesh(w, tessel.Layout.replicated(mesh, 4))
    want = np_conv2d(x, w, (2, 2), "SAME")
    for strides in (2, [2], [2, 2], tf_ints((2, 2)), (2, 2)):
        assert_allclose(host(tessel.conv2d(dx, dw, strides, "SAME")), want, rtol=1e-12)
    assert_allclose(host(tessel.conv2d(dx, dw, 1, "VALID", dilations=2)),
                    np_conv2d(x, w, (1, 1), "VALID", (2, 2)), rtol=1e-12)
    assert_allclose(host(tessel.conv2d(input=dx, filters=dw, strides=[1, 1, 1, 1],
                                       padding="SAME", data_format="NHWC",
                                       dilations=[1, 2, 1, 1])),
                    np_conv2d(x, w, (1, 1), "SAME", (2, 1)), rtol=1e-12)
    explicit = [[0, 0], [2, 1], [0, 1], [0, 0]]
    assert_allclose(host(tessel.conv2d(dx, dw, 1, explicit)), np_conv2d(x, w, (1, 1), explicit),
                    rtol=1e-12)
    for ksize, strides in ((2, 2), ([1, 2, 2, 1], [1, 2, 2, 1]), ([2, 2], 2)):
        assert_allclose(host(tessel.max_pool2d(dx, ksize, strides, "SAME")),
                        np_pool(x, (2, 2), (2, 2), "SAME", "max"))
        assert_allclose(host(tessel.avg_pool2d(input=dx, ksize=ksize, strides=strides,
                                               padding="SAME")),
                        np_pool(x, (2, 2), (2, 2), "SAME", "avg"), rtol=1e-14)
    pads = [[0, 0], [1, 1], [0, 1], [0, 0]]
    assert_allclose(host(tessel.max_pool2d(dx, 2, 1, pads)), np_pool(x, (2, 2), (1, 1), pads,
                                                                     "max"))
    assert tessel.conv2d(tessel.cast(dx, "f32"), tessel.cast(dw, "f32"), 1, "SAME").dtype == "f32"


# ---- sharding rules -----------------------------------------------------------------------------


def test_plan_op_rules(mesh):
    u = "unsharded"
    batch = tessel.Layout(["x", u, u, u], mesh)
    whole = tessel.Layout.replicated(mesh, 4)
    spec = tessel.TensorSpec
    d = tessel.plan_op("conv2d", [spec([8, 6, 6, 3], "f32", batch), spec([3, 3, 3, 8], "f32", whole)],
                       strides=[1], padding="SAME")
    assert d.output == batch and list(d.inputs) == [batch, whole]
    d = tessel.plan_op("conv2d_backprop_filter",
                       [spec([8, 6, 6, 3], "f32", batch), spec([8, 6, 6, 8], "f32", batch)],
                       strides=[1], padding="SAME", shape=[3, 3, 3, 8])
    assert d.output == whole.with_partial([("x", "sum")])
    d = tessel.plan_op("avg_pool2d", [spec([8, 6, 6, 3], "f32", batch.with_partial([("y", "sum")]))],
                       ksize=[2], strides=[2], padding="VALID")
    assert d.output == batch.with_partial([("y", "sum")])


# ---- gradients ----------------------------------------------------------------------------------


def numeric_gradient(f, arrays, index, h=1e-6):
    """d sum(f(*arrays) * weights) / d arrays[index] by central differences (weights fixed)."""
    weights = np.random.default_rng(99).uniform(-1, 1, f(*arrays).shape)
    grad = np.zeros_like(arrays[index])
    for pos in np.ndindex(*grad.shape):
        plus = [a.copy() for a in arrays]
        minus = [a.copy() for a in arrays]
        plus[index][pos] += h
        minus[index][pos] -= h
        grad[pos] = (np.sum(f(*plus) * weights) - np.sum(f(*minus) * weights)) / (2 * h)
    return weights, grad


@pytest.mark.parametrize("strides,padding,dilations", CONV_CASES[1:8:2],
                         ids=[case_id(c) for c in CONV_CASES[1:8:2]])
def test_conv2d_gradients_match_finite_differences(any_mesh, strides, padding, dilations):
    rng = np.random.default_rng(7)
    x, w = rand((2, 5, 4, 2), 8), rand((2, 3, 2, 3), 9)

    def f(a, b):
        return np_conv2d(a, b, strides, padding, dilations)

    weights, gx = numeric_gradient(f, [x, w], 0)
    _, gw = numeric_gradient(f, [x, w], 1)
    lx, lw = random_layout(x.shape, any_mesh, rng), random_layout(w.shape, any_mesh, rng)
    dweights = tessel.copy_to_mesh(weights, tessel.Layout.replicated(any_mesh, 4))
    params = [distribute(x, lx), distribute(w, lw)]
    _, grads = tessel.value_and_grad(lambda p: tessel.reduce_sum(
        tessel.conv2d(p[0], p[1], list(strides), padding, dilations=list(dilations)) * dweights),
        params)
    assert grads[0].layout == lx and grads[1].layout == lw
    assert_allclose(host(grads[0]), gx, rtol=1e-6, atol=1e-7)
    assert_allclose(host(grads[1]), gw, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("ksize,strides,padding", POOL_CASES[1::2],
                         ids=[case_id(c) for c in POOL_CASES[1::2]])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_gradients_match_finite_differences(any_mesh, ksize, strides, padding, kind):
    rng = np.random.default_rng(11)
    # Distinct values spaced far beyond the step: no ties for the max.
    x = (rng.permutation(2 * 5 * 4 * 2) * 0.1).reshape(2, 5, 4, 2).astype(np.float64)
    op = tessel.max_pool2d if kind == "max" else tessel.avg_pool2d
    weights, gx = numeric_gradient(lambda a: np_pool(a, ksize, strides, padding, kind), [x], 0)
    layout = random_layout(x.shape, any_mesh, rng, partial=kind == "avg")
    dweights = tessel.copy_to_mesh(weights, tessel.Layout.replicated(any_mesh, 4))
    _, grads = tessel.value_and_grad(
        lambda p: tessel.reduce_sum(op(p[0], list(ksize), list(strides), padding) * dweights),
        [distribute(x, layout)])
    assert grads[0].layout == layout
    assert_allclose(host(grads[0]), gx, rtol=1e-6, atol=1e-7)


def test_max_pool_gradient_goes_to_the_first_of_ties(mesh):
    x = np.full((2, 2, 2, 2), 3.0)
    d = tessel.copy_to_mesh(x, tessel.Layout(["x", "unsharded", "unsharded", "y"], mesh))
    _, grads = tessel.value_and_grad(
        lambda p: tessel.reduce_sum(tessel.max_pool2d(p[0], 2, 2, "VALID")), [d])
    want = np.zeros_like(x)
    want[:, 0, 0, :] = 1
    assert_allclose(host(grads[0]), want)


# ---- errors -----------------------------------------------------------------------------------


def test_errors_name_the_op_and_the_value(mesh):
    whole = tessel.Layout.replicated(mesh, 4)
    x = tessel.copy_to_mesh(rand((2, 5, 5, 3), 1), whole)
    w = tessel.copy_to_mesh(rand((3, 3, 3, 4), 2), whole)
    with pytest.raises(ValueError, match=r"conv2d: the input must have rank 4 \(NHWC\)"):
        tessel.conv2d(tessel.copy_to_mesh(rand((5, 5, 3), 1), tessel.Layout.replicated(mesh, 3)),
                      w, 1, "SAME")
    with pytest.raises(ValueError, match="the input has 3 channels .* but the filters take 2"):
        tessel.conv2d(x, tessel.copy_to_mesh(rand((3, 3, 2, 4), 2), whole), 1, "SAME")
    with pytest.raises(ValueError, match=r"strides must be >= 1, got \[0\]"):
        tessel.conv2d(x, w, 0, "SAME")
    with pytest.raises(ValueError, match=r"padding must be .*got \"same\""):
        tessel.conv2d(x, w, 1, "same")
    with pytest.raises(ValueError, match=r"dilations \[2,2,1,1\] acts on the batch"):
        tessel.conv2d(x, w, 1, "SAME", dilations=[2, 2, 1, 1])
    with pytest.raises(ValueError, match="explicit padding must be .before, after. pairs"):
        tessel.conv2d(x, w, 1, [[0, 0], [1, 1, 1], [0, 0], [0, 0]])
    with pytest.raises(ValueError, match="pads the batch or channel dimension"):
        tessel.conv2d(x, w, 1, [[1, 0], [1, 1], [0, 0], [0, 0]])
    with pytest.raises(ValueError, match="the window spans 7 cells in height"):
        tessel.conv2d(x, w, 1, "VALID", dilations=3)
    with pytest.raises(NotImplementedError, match="data_format \"NCHW\" is not supported"):
        tessel.conv2d(x, w, 1, "SAME", data_format="NCHW")
    with pytest.raises(TypeError, match="strides must be an int or a list of ints"):
        tessel.conv2d(x, w, "1", "SAME")
    with pytest.raises(ValueError, match=r"max_pool2d: ksize must have 1, 2 or 4 entries"):
        tessel.max_pool2d(x, [2, 2, 2], 1, "SAME")
    with pytest.raises(ValueError, match=r"avg_pool2d: .*must be smaller than the window"):
        tessel.avg_pool2d(x, 2, 1, [[0, 0], [2, 0], [0, 0], [0, 0]])


# ---- GPU meshes -------------------------------------------------------------------------------


def test_on_a_simulated_gpu_mesh_the_ops_run_host_staged(mesh):
    """No GPU kernels yet (docs/gpu.md): every block runs its CPU kernel on host copies, with
    the CPU mesh's values and gradients."""
    rt = tessel.Runtime(num_cpu_devices=1, num_simulated_gpu_devices=2)
    gpus = tessel.Mesh.create_on_devices([("x", 2)], [g.name for g in rt.gpu_devices()])
    x, w = rand((4, 6, 5, 3), 1), rand((3, 3, 3, 2), 2)
    u = "unsharded"

    def run(m, runtime):
        dx = tessel.copy_to_mesh(x, tessel.Layout(["x", u, u, u], m), runtime=runtime)
        dw = tessel.copy_to_mesh(w, tessel.Layout.replicated(m, 4), runtime=runtime)

        def f(p):
            h = tessel.max_pool2d(tessel.conv2d(p[0], p[1], 1, "SAME"), 2, 1, "SAME")
            return tessel.reduce_sum(tessel.avg_pool2d(h, 2, 2, "SAME"))

        value, grads = tessel.value_and_grad(f, [dx, dw])
        # (to_host of a Partial DTensor on a GPU mesh reads device memory: reduced first.)
        value = tessel.relayout(value, tessel.Layout.replicated(m, 0))
        return [host(value)] + [host(g) for g in grads]

    before = tessel.host_staged_kernel_calls()
    on_gpus = run(gpus, rt)
    after = tessel.host_staged_kernel_calls()
    for op in ("conv2d", "conv2d_backprop_input", "conv2d_backprop_filter", "max_pool2d",
               "max_pool2d_grad", "avg_pool2d", "avg_pool2d_grad"):
        assert after.get(op, 0) >= before.get(op, 0) + 2, op  # one block per device
    for got, want in zip(on_gpus, run(mesh, None)):
        assert_allclose(got, want, rtol=1e-12, atol=1e-12)
