"""The transformer ops and training pieces against numpy: layer_norm, rms_norm,
rotary_embedding, causal_softmax, exact gelu,
dropout, stop_gradient, the vocabulary-parallel cross-entropy, AdamW, clip_by_global_norm and
WarmupCosineDecay, on sharded layouts of the 2x2 mesh."""
import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

import tessel
from conftest import host, put, rand


def np_layer_norm(x, w, b=None, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps) * w
    return y if b is None else y + b


@pytest.mark.parametrize("specs", [("x", "y", tessel.UNSHARDED), ("x", tessel.UNSHARDED, "y")])
def test_layer_norm_and_its_gradients(mesh, specs):
    x, w, b, g = rand((4, 6, 8), 1), rand((8,), 2), rand((8,), 3), rand((4, 6, 8), 4)
    dx, dw, db = put(x, specs, mesh), put(w, [tessel.UNSHARDED], mesh), put(b, [tessel.UNSHARDED], mesh)
    assert_allclose(host(tessel.layer_norm(dx, dw, db)), np_layer_norm(x, w, b), rtol=1e-12, atol=1e-12)
    assert_allclose(host(tessel.layer_norm(dx, dw)), np_layer_norm(x, w), rtol=1e-12, atol=1e-12)
    dg = put(g, [tessel.UNSHARDED] * 3, mesh)
    _, grads = tessel.value_and_grad(
        lambda p: tessel.reduce_sum(tessel.layer_norm(p[0], p[1], p[2]) * dg), [dx, dw, db])
    # numpy: the layer norm's backward pass written out.
    mean = x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    xhat = (x - mean) * rstd
    gw = g * w
    want_dx = rstd * (gw - gw.mean(-1, keepdims=True) - xhat * (gw * xhat).mean(-1, keepdims=True))
    assert_allclose(host(grads[0]), want_dx, rtol=1e-10, atol=1e-12)
    assert_allclose(host(grads[1]), (g * xhat).sum((0, 1)), rtol=1e-10)
    assert_allclose(host(grads[2]), g.sum((0, 1)), rtol=1e-12)


@pytest.mark.parametrize("specs", [("x", "y", tessel.UNSHARDED), ("x", tessel.UNSHARDED, "y")])
def test_rms_norm_and_its_gradients(mesh, specs):
    x, w, g = rand((4, 6, 8), 11), rand((8,), 12), rand((4, 6, 8), 13)
    dx, dw = put(x, specs, mesh), put(w, [tessel.UNSHARDED], mesh)
    rstd = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5)
    assert_allclose(host(tessel.rms_norm(dx, dw, 1e-5)), x * rstd * w, rtol=1e-12, atol=1e-12)
    assert_allclose(host(tessel.rms_norm(dx, dw)), x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w,
                    rtol=1e-12)  # epsilon 1e-6 by default, as Keras' RMSNormalization
    dg = put(g, [tessel.UNSHARDED] * 3, mesh)
    _, grads = tessel.value_and_grad(
        lambda p: tessel.reduce_sum(tessel.rms_norm(p[0], p[1], 1e-5) * dg), [dx, dw])
    xhat, gw = x * rstd, g * w  # numpy: the backward pass written out
    assert_allclose(host(grads[0]), rstd * (gw - xhat * (gw * xhat).mean(-1, keepdims=True)),
                    rtol=1e-10, atol=1e-12)
    assert_allclose(host(grads[1]), (g * xhat).sum((0, 1)), rtol=1e-10)
    with pytest.raises(ValueError, match="epsilon must be a finite number >= 0"):
        tessel.rms_norm(dx, dw, -1.0)


@pytest.mark.parametrize("specs", [("x", "y", tessel.UNSHARDED, tessel.UNSHARDED),
                                   (tessel.UNSHARDED, "x", "y", tessel.UNSHARDED)])
def test_rotary_embedding_and_its_gradient(mesh, specs):
    x, g = rand((2, 5, 2, 6), 14), rand((2, 5, 2, 6), 15)
    dx = put(x, specs, mesh)
    angle = np.arange(5)[:, None] * 500.0 ** (-np.arange(3) * 2 / 6)  # [T, D/2]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    x1, x2 = x[..., :3], x[..., 3:]
    want = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    assert_allclose(host(tessel.rotary_embedding(dx, 500.0)), want, rtol=1e-13, atol=1e-14)
    _, (grad,) = tessel.value_and_grad(
        lambda p: tessel.reduce_sum(tessel.rotary_embedding(p[0], theta=500.0) *
                                    put(g, [tessel.UNSHARDED] * 4, mesh)), [dx])
    g1, g2 = g[..., :3], g[..., 3:]  # the rotation's transpose: by the negative angle
    assert_allclose(host(grad), np.concatenate([g1 * cos + g2 * sin, g2 * cos - g1 * sin], -1),
                    rtol=1e-13, atol=1e-14)
    assert tessel.fetch_layout(grad) == tessel.fetch_layout(dx)
    with pytest.raises(ValueError, match="even head_dim, got \\[2,5,3\\]"):
        tessel.rotary_embedding(put(rand((2, 5, 3), 16), ("x", "y", tessel.UNSHARDED), mesh))


def test_causal_softmax_masks_the_future(mesh):
    s = rand((2, 2, 5, 5), 5)
    got = host(tessel.causal_softmax(put(s, ("x", "y", tessel.UNSHARDED, tessel.UNSHARDED), mesh), 0.5))
    masked = np.where(np.tril(np.ones((5, 5))) == 1, 0.5 * s, -np.inf)
    e = np.exp(masked - masked.max(-1, keepdims=True))
    assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-13, atol=1e-15)


def test_exact_gelu(mesh):
    v = rand((4, 4), 6, -4, 4)
    got = host(tessel.gelu(put(v, ("x", "y"), mesh), approximate=False))
    assert_allclose(got, 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2))), rtol=1e-14)


def test_dropout_is_the_same_on_every_layout(mesh):
    ones = np.ones((6, 10))
    a = host(tessel.dropout(put(ones, (tessel.UNSHARDED, tessel.UNSHARDED), mesh), 0.3, 11))
    b = host(tessel.dropout(put(ones, ("y", "x"), mesh), rate=0.3, seed=11))
    np.testing.assert_array_equal(a, b)
    assert set(np.unique(a)) <= {0.0, 1 / 0.7}
    with pytest.raises(ValueError, match="rate must be in"):
        tessel.dropout(put(ones, ("x", "y"), mesh), 1.5, 1)


def test_stop_gradient(mesh):
    x = put(np.full((4,), 3.0), ("x",), mesh)
    _, (g,) = tessel.value_and_grad(lambda p: tessel.reduce_sum(p[0] * tessel.stop_gradient(p[0])), [x])
    assert_allclose(host(g), [3.0] * 4)


def test_vocabulary_parallel_cross_entropy_matches_numpy(mesh):
    logits, labels = rand((6, 65), 7, -3, 3), np.random.default_rng(8).integers(0, 65, 6).astype(np.int32)
    dl = put(logits, ("x", "y"), mesh)  # classes 33/32 over y
    dy = put(labels, ("x",), mesh)
    loss, (g,) = tessel.value_and_grad(
        lambda p: tessel.reduce_sum(tessel.sparse_softmax_cross_entropy_with_logits(dy, p[0])), [dl])
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    assert_allclose(host(loss), (lse - logits[np.arange(6), labels]).sum(), rtol=1e-12)
    softmax = np.exp(logits - lse[:, None])
    softmax[np.arange(6), labels] -= 1
    assert_allclose(host(g), softmax, rtol=1e-10, atol=1e-12)


def test_adamw_clip_and_schedule(mesh):
    w0, g = rand((4, 4), 9), rand((4, 4), 10)
    params = [put(w0, ("x", "y"), mesh)]
    opt = tessel.AdamW(learning_rate=0.1, beta_1=0.9, beta_2=0.99, epsilon=1e-8, weight_decay=0.5)
    opt.learning_rate = 0.05
    params = opt.apply(params, [put(g, ("x", "y"), mesh)])
    m, v = 0.1 * g, 0.01 * g * g
    want = w0 * (1 - 0.05 * 0.5) - 0.05 * (m / 0.1) / (np.sqrt(v / 0.01) + 1e-8)
    assert_allclose(host(params[0]), want, rtol=1e-12)
    assert opt.learning_rate == 0.05 and opt.weight_decay == 0.5
    clipped, norm = tessel.clip_by_global_norm([put(g, ("x", "y"), mesh)], 0.5)
    assert_allclose(host(norm), np.linalg.norm(g), rtol=1e-12)
    assert_allclose(host(clipped[0]), g * 0.5 / np.linalg.norm(g), rtol=1e-12)
    schedule = tessel.WarmupCosineDecay(peak=1e-3, minimum=1e-4, warmup_steps=10, decay_steps=110)
    assert schedule(0) == pytest.approx(1e-3 / 11)
    assert schedule(60) == pytest.approx(1e-4 + 0.5 * 9e-4)
    assert schedule(500) == pytest.approx(1e-4)


def test_argmax_and_sample_categorical(mesh):
    logits = rand((8, 65), 12)
    d = put(logits, ("x", "y"), mesh)
    np.testing.assert_array_equal(host(tessel.argmax(d)), logits.argmax(-1))
    np.testing.assert_array_equal(host(tessel.argmax(d, axis=0)), logits.argmax(0))
    a = host(tessel.sample_categorical(d, seed=3))
    b = host(tessel.sample_categorical(put(logits, (tessel.UNSHARDED, tessel.UNSHARDED), mesh), 3))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(host(tessel.sample_categorical(d, 3, top_k=1)), logits.argmax(-1))
    with pytest.raises(ValueError, match="temperature"):
        tessel.sample_categorical(d, 3, temperature=0.0)
