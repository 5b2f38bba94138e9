"""Gradients, optimizers and batched relayouts with TF's names (bind_autodiff.cpp):
GradientTape against hand-computed numpy gradients with the parameters' layouts kept,
value_and_grad, SGD / Adam one-step updates against their formulas, relayout_batch and
relayout_stats."""

import gc
import threading

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import conftest
import tessel
from conftest import host, put


def rand(shape, seed):
    return conftest.rand(shape, seed, -1.0, 1.0)


def test_names_are_exported():
    for name in ["GradientTape", "value_and_grad", "relayout_batch", "relayout_stats",
                 "RelayoutStats", "Optimizer", "SGD", "Adam"]:
        assert hasattr(tessel, name), name
        assert name in tessel.__all__, name


# ---- GradientTape ---------------------------------------------------------------------------


def test_gradient_after_the_with_block_matches_numpy_and_keeps_layouts(mesh):
    x, w = rand((4, 6), 1), rand((6, 8), 2)
    dx, dw = put(x, ("x", "unsharded"), mesh), put(w, ("unsharded", "y"), mesh)
    with tessel.GradientTape() as tape:
        tape.watch(dw)
        loss = tessel.reduce_sum(tessel.tanh(tessel.matmul(dx, dw)))
    [gw] = tape.gradient(loss, [dw])
    t = np.tanh(x @ w)
    assert_allclose(host(loss), t.sum(), rtol=1e-12)
    assert tessel.fetch_layout(gw) == tessel.fetch_layout(dw)
    assert_allclose(host(gw), x.T @ (1 - t ** 2), rtol=1e-12, atol=1e-14)


def test_gradient_of_a_single_source_is_a_dtensor(mesh):
    a = rand((4, 4), 3)
    d = put(a, ("x", "y"), mesh)
    with tessel.GradientTape() as tape:
        tape.watch(d)
        y = d * d + d  # d used three times: gradients summed
    g = tape.gradient(y, d)
    assert isinstance(g, tessel.DTensor)
    assert g.layout == d.layout
    assert_array_equal(host(g), 2 * a + 1)


def test_broadcast_and_data_parallel_gradients_are_reduced_to_the_param_layout(mesh):
    x, w, b = rand((8, 6), 4), rand((6, 4), 5), rand((4,), 6)
    dx = put(x, ("x", "unsharded"), mesh)  # batch over x
    dw = put(w, ("unsharded", "unsharded"), mesh)  # replicated parameter
    db = put(b, ("unsharded",), mesh)
    with tessel.GradientTape() as tape:
        tape.watch([dw, db])
        z = tessel.matmul(dx, dw) + db
        loss = tessel.reduce_mean(z * z)
    gw, gb = tape.gradient(loss, [dw, db])
    dz = 2 * (x @ w + b) / z.shape[0] / z.shape[1]
    assert gw.layout == dw.layout and not gw.layout.is_partial()
    assert gb.layout == db.layout
    assert_allclose(host(gw), x.T @ dz, rtol=1e-12, atol=1e-14)
    assert_allclose(host(gb), dz.sum(0), rtol=1e-12, atol=1e-14)


def test_megatron_mlp_gradients_keep_the_weight_layouts():
    m = tessel.create_mesh([("batch", 2), ("model", 2)])
    x, w1, w2 = rand((6, 5), 7), rand((5, 8), 8), rand((8, 3), 9)
    dx = put(x, ("batch", "unsharded"), m)
    dw1, dw2 = put(w1, ("unsharded", "model"), m), put(w2, ("model", "unsharded"), m)
    with tessel.GradientTape() as tape:
        tape.watch([dw1, dw2])
        y = tessel.matmul(tessel.relu(tessel.matmul(dx, dw1)), dw2)
        loss = tessel.reduce_sum(y)
    g1, g2 = tape.gradient(loss, [dw1, dw2])
    assert tessel.fetch_layout(g1) == tessel.fetch_layout(dw1)
    assert tessel.fetch_layout(g2) == tessel.fetch_layout(dw2)
    pre = x @ w1
    h = np.maximum(pre, 0)
    dy = np.ones((6, 3))
    assert_allclose(host(g2), h.T @ dy, rtol=1e-12)
    assert_allclose(host(g1), x.T @ ((dy @ w2.T) * (pre > 0)), rtol=1e-12)


def test_unwatched_source_gets_zeros(mesh):
    a, c = rand((4,), 10), rand((4,), 11)
    d, other = put(a, ("x",), mesh), put(c, ("y",), mesh)
    with tessel.GradientTape() as tape:
        tape.watch(d)
        y = tessel.exp(d)
    gd, gother = tape.gradient(y, [d, other])
    assert_allclose(host(gd), np.exp(a), rtol=1e-13)
    assert gother.layout == other.layout
    assert_array_equal(host(gother), np.zeros(4))


def test_non_persistent_tape_gives_one_gradient(mesh):
    d = put(rand((4,), 12), ("x",), mesh)
    with tessel.GradientTape() as tape:
        tape.watch(d)
        y = tessel.reduce_sum(d * d)
    assert not tape.persistent
    tape.gradient(y, [d])
    with pytest.raises(RuntimeError, match="already called") as info:
        tape.gradient(y, [d])
    assert isinstance(info.value, tessel.FailedPreconditionError)


def test_backward_in_two_halves_matches_numpy_and_gradient(mesh):
    """backward_input then backward_weight (zero-bubble pipelines): the input's gradient first,
    the weights' after, each the numpy value and gradient()'s bit for bit."""
    x, w1, w2, g = rand((4, 6), 21), rand((6, 8), 22), rand((8, 6), 23), rand((4, 6), 24)
    dx, dg = put(x, ("x", "unsharded"), mesh), put(g, ("x", "unsharded"), mesh)
    d1, d2 = put(w1, ("unsharded", "y"), mesh), put(w2, ("y", "unsharded"), mesh)

    def recorded():
        with tessel.GradientTape() as tape:
            tape.watch([dx, d1, d2])
            y = tessel.matmul(tessel.tanh(tessel.matmul(dx, d1)), d2)
        return tape, y

    tape, y = recorded()
    whole = tape.gradient(y, [dx, d1, d2], output_gradients=dg)
    tape, y = recorded()
    gx = tape.backward_input(y, dx, output_gradients=dg)
    assert isinstance(gx, tessel.DTensor)
    g1, g2 = tape.backward_weight([d1, d2])
    t = np.tanh(x @ w1)
    dh = (g @ w2.T) * (1 - t ** 2)
    assert_allclose(host(gx), dh @ w1.T, rtol=1e-12, atol=1e-14)
    assert_allclose(host(g1), x.T @ dh, rtol=1e-12, atol=1e-14)
    assert_allclose(host(g2), t.T @ g, rtol=1e-12, atol=1e-14)
    for split, plain in zip([gx, g1, g2], whole):
        assert split.layout == plain.layout
        assert_array_equal(host(split), host(plain))
    with pytest.raises(tessel.FailedPreconditionError, match="needs backward_input"):
        tape.backward_weight([d1])
    tape, y = recorded()
    tape.backward_input(y, [dx], output_gradients=dg)
    with pytest.raises(tessel.FailedPreconditionError, match="half done"):
        tape.gradient(y, [d1])
    with tessel.GradientTape(persistent=True) as tape:
        tape.watch(dx)
        y = tessel.tanh(dx)
    with pytest.raises(tessel.FailedPreconditionError, match="persistent tape"):
        tape.backward_input(y, [dx])


def test_persistent_tape_gives_several_gradients(mesh):
    a = rand((4,), 13)
    d = put(a, ("x",), mesh)
    with tessel.GradientTape(persistent=True) as tape:
        tape.watch(d)
        y = tessel.reduce_sum(d * d)
        z = tessel.reduce_sum(tessel.exp(d))
    assert tape.persistent
    assert_array_equal(host(tape.gradient(y, d)), 2 * a)
    assert_allclose(host(tape.gradient(z, d)), np.exp(a), rtol=1e-13)
    assert_array_equal(host(tape.gradient(y, d)), 2 * a)


def test_tape_records_from_enter(mesh):
    d = put(rand((4,), 14), ("x",), mesh)
    tape = tessel.GradientTape()
    assert not tape.recording
    with pytest.raises(RuntimeError, match="not recording") as info:
        tape.watch(d)
    assert isinstance(info.value, tessel.FailedPreconditionError)
    with pytest.raises(RuntimeError, match="not recording"):
        tape.gradient(d, [d])
    with tape as entered:
        assert entered is tape and tape.recording
    assert tape.recording  # kept for gradient() after the block


def test_ops_after_the_block_do_not_change_the_gradient(mesh):
    a = rand((4,), 15)
    d = put(a, ("x",), mesh)
    with tessel.GradientTape() as tape:
        tape.watch(d)
        y = tessel.reduce_sum(d * 3.0)
    later = tessel.reduce_sum(d * d)  # still recorded (the C++ tape cannot pause): not on y's path
    assert_array_equal(host(tape.gradient(y, [d])[0]), np.full(4, 3.0))
    assert_array_equal(host(later), (a * a).sum())


def test_reset_forgets_the_records(mesh):
    a = rand((4,), 16)
    d = put(a, ("x",), mesh)
    with tessel.GradientTape() as tape:
        tape.watch(d)
        tessel.exp(d)
        tape.reset()  # inside the block: records afresh, nothing watched
        tape.watch(d)
        y = tessel.reduce_sum(d * d)
    assert_array_equal(host(tape.gradient(y, d)), 2 * a)
    tape.reset()  # outside: released
    assert not tape.recording


def test_nested_tapes_record_independently(mesh):
    a = rand((4,), 17)
    d = put(a, ("x",), mesh)
    with tessel.GradientTape() as outer:
        outer.watch(d)
        with tessel.GradientTape() as inner:
            inner.watch(d)
            y = tessel.reduce_sum(d * d * d)
        g = inner.gradient(y, d)  # 3 d^2, recorded by the outer tape
        s = tessel.reduce_sum(g)
    assert_allclose(host(g), 3 * a * a, rtol=1e-13)
    assert_allclose(host(outer.gradient(s, d)), 6 * a, rtol=1e-13)


def test_tape_from_another_thread_is_refused(mesh):
    d = put(rand((4,), 18), ("x",), mesh)
    with tessel.GradientTape() as tape:
        tape.watch(d)
        y = tessel.reduce_sum(d)
    errors = []

    def other():
        try:
            tape.gradient(y, [d])
        except RuntimeError as e:
            errors.append(e)

    worker = threading.Thread(target=other)
    worker.start()
    worker.join()
    assert len(errors) == 1 and "another thread" in str(errors[0])
    assert_array_equal(host(tape.gradient(y, d)), np.ones(4))


def test_tape_freed_on_another_thread_does_not_break_this_one(mesh):
    d = put(rand((4,), 19), ("x",), mesh)
    holder = []
    with tessel.GradientTape() as tape:
        tape.watch(d)
    holder.append(tape)
    del tape
    worker = threading.Thread(target=holder.clear)  # the last reference dies there
    worker.start()
    worker.join()
    gc.collect()
    assert_array_equal(host(tessel.reduce_sum(d * 2.0)), 2 * host(d).sum())


def test_gradient_argument_errors(mesh):
    d = put(rand((4,), 20), ("x",), mesh)
    with tessel.GradientTape() as tape:
        with pytest.raises(TypeError):
            tape.watch(3)
        tape.watch(d)
        y = tessel.reduce_sum(d)
    with pytest.raises(TypeError):
        tape.gradient(y, "d")


# ---- value_and_grad -------------------------------------------------------------------------


def test_value_and_grad_matches_numpy(mesh):
    x, w, b = rand((8, 6), 21), rand((6, 4), 22), rand((4,), 23)
    dx = put(x, ("x", "unsharded"), mesh)
    params = [put(w, ("unsharded", "y"), mesh), put(b, ("y",), mesh)]
    seen = []

    def loss_fn(p):
        seen.append(p)
        return tessel.reduce_sum(tessel.tanh(tessel.matmul(dx, p[0]) + p[1]))

    value, grads = tessel.value_and_grad(loss_fn, params)
    assert isinstance(seen[0], list) and all(isinstance(p, tessel.DTensor) for p in seen[0])
    t = np.tanh(x @ w + b)
    assert_allclose(host(value), t.sum(), rtol=1e-12)
    assert [g.layout for g in grads] == [p.layout for p in params]
    assert_allclose(host(grads[0]), x.T @ (1 - t ** 2), rtol=1e-12, atol=1e-14)
    assert_allclose(host(grads[1]), (1 - t ** 2).sum(0), rtol=1e-12, atol=1e-14)


def test_value_and_grad_errors_from_fn(mesh):
    params = [put(rand((4,), 24), ("x",), mesh)]
    with pytest.raises(TypeError, match="fn must return a DTensor"):
        tessel.value_and_grad(lambda p: 3.0, params)

    def failing(p):
        raise KeyError("inside fn")

    with pytest.raises(KeyError, match="inside fn"):
        tessel.value_and_grad(failing, params)
    value, [g] = tessel.value_and_grad(lambda p: tessel.reduce_sum(p[0] * 2.0), params)
    assert_array_equal(host(g), np.full(4, 2.0))


# ---- optimizers -----------------------------------------------------------------------------


def params_and_grads(mesh):
    p = [rand((4, 6), 25), rand((6,), 26)]
    g = [rand((4, 6), 27), rand((6,), 28)]
    specs = [("x", "y"), ("y",)]
    return p, g, [put(a, s, mesh) for a, s in zip(p, specs)], \
        [put(a, s, mesh) for a, s in zip(g, specs)]


def test_sgd_one_step(mesh):
    p, g, dp, dg = params_and_grads(mesh)
    opt = tessel.SGD(learning_rate=0.1)
    assert isinstance(opt, tessel.Optimizer) and opt.iterations == 0
    new = opt.apply(dp, dg)
    assert opt.iterations == 1
    assert isinstance(new, list) and len(new) == 2
    for n, old, pa, ga in zip(new, dp, p, g):
        assert n.layout == old.layout
        assert_allclose(host(n), pa - 0.1 * ga, rtol=1e-15)
        assert_array_equal(host(old), pa)  # the inputs are values: unchanged


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_two_steps(mesh, nesterov):
    p, g, dp, dg = params_and_grads(mesh)
    lr, mom = 0.05, 0.9
    opt = tessel.SGD(lr, momentum=mom, nesterov=nesterov)
    want = [a.copy() for a in p]
    v = [np.zeros_like(a) for a in p]
    for _ in range(2):
        dp = opt.apply(dp, dg)
        for i in range(2):
            v[i] = mom * v[i] - lr * g[i]
            want[i] = want[i] + mom * v[i] - lr * g[i] if nesterov else want[i] + v[i]
    assert opt.iterations == 2
    for n, w in zip(dp, want):
        assert_allclose(host(n), w, rtol=1e-14, atol=1e-15)


def test_adam_one_step(mesh):
    p, g, dp, dg = params_and_grads(mesh)
    lr, b1, b2, eps = 0.01, 0.8, 0.95, 1e-6
    opt = tessel.Adam(learning_rate=lr, beta_1=b1, beta_2=b2, epsilon=eps)
    new = opt.apply(dp, dg)
    assert opt.iterations == 1
    lr_t = lr * np.sqrt(1 - b2) / (1 - b1)
    for n, old, pa, ga in zip(new, dp, p, g):
        m = (1 - b1) * ga
        v = (1 - b2) * ga * ga
        assert n.layout == old.layout
        assert_allclose(host(n), pa - lr_t * m / (np.sqrt(v) + eps), rtol=1e-14)


def test_adam_defaults_follow_keras(mesh):
    p, g, dp, dg = params_and_grads(mesh)
    new = tessel.Adam().apply(dp, dg)
    lr_t = 0.001 * np.sqrt(1 - 0.999) / (1 - 0.9)
    m, v = 0.1 * g[0], 0.001 * g[0] * g[0]
    assert_allclose(host(new[0]), p[0] - lr_t * m / (np.sqrt(v) + 1e-7), rtol=1e-14)


def test_optimizer_errors_are_value_errors(mesh):
    _, _, dp, dg = params_and_grads(mesh)
    with pytest.raises(ValueError, match="2 parameters but 1 gradients"):
        tessel.SGD().apply(dp, dg[:1])
    with pytest.raises(ValueError, match="parameter 0"):
        tessel.SGD().apply(dp, [dg[1], dg[0]])  # shapes swapped
    with pytest.raises(ValueError):
        tessel.SGD(learning_rate=-1.0)
    with pytest.raises(ValueError):
        tessel.Adam(beta_1=1.0)
    with pytest.raises(TypeError):
        tessel.Optimizer()


def test_training_loop_reduces_the_loss(mesh):
    x, y = rand((8, 4), 29), rand((8, 2), 30)
    dx, dy = put(x, ("x", "unsharded"), mesh), put(y, ("x", "unsharded"), mesh)
    params = [put(rand((4, 2), 31), ("unsharded", "y"), mesh)]
    opt = tessel.SGD(learning_rate=0.1)

    def loss_fn(p):
        err = tessel.matmul(dx, p[0]) - dy
        return tessel.reduce_mean(err * err)

    losses = []
    for _ in range(5):
        value, grads = tessel.value_and_grad(loss_fn, params)
        losses.append(float(host(value)))
        params = opt.apply(params, grads)
    assert losses == sorted(losses, reverse=True) and losses[-1] < losses[0]
    assert params[0].layout == tessel.Layout(["unsharded", "y"], mesh)


# ---- relayout_batch / relayout_stats --------------------------------------------------------


def test_relayout_batch_fuses_all_reduces(mesh):
    arrays = [rand((4, 6), 32 + i) for i in range(3)] + [rand((6,), 40)]
    partial = [put(arrays[0], ("x", "unsharded"), mesh, [("y", "sum")]),
               put(arrays[1], ("unsharded", "unsharded"), mesh, [("y", "sum")]),
               put(arrays[2], ("x", "unsharded"), mesh, [("y", "sum")]),
               put(arrays[3], ("unsharded",), mesh, [("y", "sum")])]
    targets = [p.layout.without_partial() for p in partial]
    before = tessel.relayout_stats()
    out = tessel.relayout_batch(partial, targets)
    after = tessel.relayout_stats()
    assert [o.layout for o in out] == targets
    for o, a in zip(out, arrays):
        assert_array_equal(host(o), a)
    # One fused bucket: fewer collectives than tensors.
    assert 1 <= after.collectives - before.collectives < len(partial)
    assert after.bytes > before.bytes
    # A tiny bucket size splits the buckets, with the same values.
    out = tessel.relayout_batch(partial, targets, bucket_bytes=8)
    for o, a in zip(out, arrays):
        assert_array_equal(host(o), a)


def test_relayout_batch_fuses_all_gathers_and_reduce_scatters(mesh):
    # Uneven shards (5 and 7 rows over x = 2) gathered over x in one collective; Partial sums
    # over x reduce-scattered to x shards in another; values against NumPy.
    arrays = [rand((5, 3), 50), rand((7,), 51), rand((3, 9), 52)]
    sharded = [put(arrays[0], ("x", "unsharded"), mesh), put(arrays[1], ("x",), mesh),
               put(arrays[2], ("unsharded", "x"), mesh)]
    whole = [tessel.Layout(["unsharded"] * a.ndim, mesh) for a in arrays]
    before = tessel.relayout_stats()
    out = tessel.relayout_batch(sharded, whole)
    after = tessel.relayout_stats()
    assert after.collectives - before.collectives == 1
    for o, a, layout in zip(out, arrays, whole):
        assert o.layout == layout
        assert_array_equal(host(o), a)
    partial = [put(a, ["unsharded"] * a.ndim, mesh, [("x", "sum")]) for a in arrays]
    targets = [tessel.Layout(["x"] + ["unsharded"] * (a.ndim - 1), mesh) for a in arrays]
    before = tessel.relayout_stats()
    out = tessel.relayout_batch(partial, targets)
    after = tessel.relayout_stats()
    assert after.collectives - before.collectives == 1
    for o, a, layout in zip(out, arrays, targets):
        assert o.layout == layout
        assert_allclose(host(o), a, rtol=1e-6, atol=1e-6)


def test_relayout_batch_mixed_plans_and_errors(mesh):
    a = rand((4, 6), 41)
    d = put(a, ("x", "unsharded"), mesh)
    out = tessel.relayout_batch([d, d], [tessel.Layout(["unsharded", "y"], mesh), d.layout])
    assert out[0].layout == tessel.Layout(["unsharded", "y"], mesh)
    assert_array_equal(host(out[0]), a)
    assert_array_equal(host(out[1]), a)
    with pytest.raises(ValueError):
        tessel.relayout_batch([d, d], [d.layout])


def test_relayout_stats_counts_collectives(mesh):
    stats = tessel.relayout_stats()
    assert isinstance(stats, tessel.RelayoutStats)
    collectives, nbytes = stats
    assert (collectives, nbytes) == (stats.collectives, stats.bytes)
    assert repr(stats).startswith("RelayoutStats(collectives=")
    d = put(rand((4, 6), 42), ("x", "unsharded"), mesh)
    tessel.relayout(d, tessel.Layout(["unsharded", "unsharded"], mesh))
    after = tessel.relayout_stats()
    assert after.collectives == collectives + 1  # one all_gather
    assert after.bytes > nbytes
