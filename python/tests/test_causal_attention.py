"""The fused causal-attention op ([batch, sequence, heads, head_dim] operands) against numpy (forward and the three gradients, with and
without dropout, over tiles of queries and on sharded layouts) and against the composed ops
it replaces (matmul, causal_softmax, dropout, matmul) in float32 at 1e-5."""
import numpy as np
import pytest
from numpy.testing import assert_allclose

import tessel
from conftest import host, put, rand

U = tessel.UNSHARDED


def np_attention(q, k, v, scale, keep):
    """q, k, v [B, H, T, D]; keep: the dropout factor per probability (0 or 1 / (1 - rate)),
    [B, H, T, T]."""
    t = q.shape[2]
    s = np.where(np.tril(np.ones((t, t))) == 1, scale * q @ k.swapaxes(-1, -2), -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    a = p * keep
    return p, a, a @ v


def np_attention_grads(q, k, v, g, scale, keep):
    p, a, _ = np_attention(q, k, v, scale, keep)
    dv = a.swapaxes(-1, -2) @ g
    dp = (g @ v.swapaxes(-1, -2)) * keep
    ds = p * (dp - (p * dp).sum(-1, keepdims=True)) * scale
    return ds @ k, ds.swapaxes(-1, -2) @ q, dv


def keep_factors(shape, rate, seed, mesh):
    """dropout's factor per element of the [B, H, T, T] probabilities: tessel's mask by
    definition (keyed by global index), read off dropout(ones)."""
    if rate == 0:
        return np.ones(shape)
    return host(tessel.dropout(put(np.ones(shape), [U] * 4, mesh), rate, seed))


@pytest.mark.parametrize("specs", [("x", "y", U, U), (U, "x", U, "y"), (U, U, "x", U)])
@pytest.mark.parametrize("rate", [0.0, 0.3])
def test_forward_and_gradients_match_numpy(mesh, specs, rate):
    b, t, h, d = 2, 70, 2, 4  # 70 queries: a whole tile of 64 and a part
    q, k, v, g = (rand((b, t, h, d), seed) for seed in (1, 2, 3, 4))  # [B, T, H, D]
    scale, seed = 0.5, 17
    keep = keep_factors((b, h, t, t), rate, seed, mesh)
    dq_, dk_, dv_ = (put(x, specs, mesh) for x in (q, k, v))
    swap = lambda x: x.swapaxes(1, 2)  # [B, T, H, D] <-> [B, H, T, D]
    out = tessel.causal_attention(dq_, dk_, dv_, scale, rate, seed)
    want = np_attention(swap(q), swap(k), swap(v), scale, keep)[2]
    assert_allclose(host(out), swap(want), rtol=1e-12, atol=1e-12)
    dg = put(g, [U] * 4, mesh)
    _, grads = tessel.value_and_grad(
        lambda p: tessel.reduce_sum(tessel.causal_attention(p[0], p[1], p[2], scale, rate, seed) * dg),
        [dq_, dk_, dv_])
    for got, want in zip(grads, np_attention_grads(swap(q), swap(k), swap(v), swap(g), scale, keep)):
        assert_allclose(host(got), swap(want), rtol=1e-11, atol=1e-12)
    assert [tessel.fetch_layout(x) for x in grads] == [tessel.fetch_layout(x) for x in (dq_, dk_, dv_)]


def composed(q, k, v, scale, rate, seed):
    q, k, v = (tessel.transpose(x, [0, 2, 1, 3]) for x in (q, k, v))
    p = tessel.causal_softmax(tessel.matmul(q, k, transpose_b=True), scale)
    return tessel.transpose(tessel.matmul(tessel.dropout(p, rate, seed) if rate else p, v), [0, 2, 1, 3])


@pytest.mark.parametrize("rate", [0.0, 0.2])
def test_float32_equals_the_composed_ops_within_1e_5(mesh, rate):
    b, t, h, d = 2, 130, 2, 8
    arrays = [rand((b, t, h, d), seed).astype(np.float32) for seed in (5, 6, 7, 8)]
    q, k, v, g = (put(x, ("x", U, "y", U), mesh) for x in arrays)
    scale = 1 / np.sqrt(d)
    grads = {}
    for name, fn in (("fused", tessel.causal_attention), ("composed", composed)):
        out, grad = tessel.value_and_grad(
            lambda p: tessel.reduce_sum(fn(p[0], p[1], p[2], scale, rate, 23) * g), [q, k, v])
        grads[name] = [host(out)] + [host(x) for x in grad]
    for fused, composed_ in zip(grads["fused"], grads["composed"]):
        assert fused.dtype == np.float32
        assert_allclose(fused, composed_, rtol=1e-5, atol=1e-5)


def test_has_gpu_kernel_says_whether_the_op_has_cuda_kernels():
    # The CUDA kernels (gpu_attention.cu) are in every build with CUDA.
    assert tessel.has_gpu_kernel("causal_attention") == tessel.built_with_cuda()
    with pytest.raises(tessel.NotFoundError, match="no op named 'flash'"):
        tessel.has_gpu_kernel("flash")


def test_bad_operands_are_refused(mesh):
    q = put(rand((2, 2, 4, 4), 9), ("x", "y", U, U), mesh)
    k = put(rand((2, 2, 5, 4), 10), ("x", "y", U, U), mesh)
    with pytest.raises(ValueError, match=r"causal_attention.*one shape.*\[2,2,4,4\].*\[2,2,5,4\]"):
        tessel.causal_attention(q, k, q)
    with pytest.raises(ValueError, match=r"dropout rate must be in \[0, 1\), got 1.5"):
        tessel.causal_attention(q, q, q, 1.0, 1.5, 1)
    flat = put(rand((4, 4), 11), ("x", "y"), mesh)
    with pytest.raises(ValueError, match="one shape"):
        tessel.causal_attention(flat, flat, flat)
