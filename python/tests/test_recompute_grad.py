"""Recomputation and what gradient tapes keep (bind_autodiff.cpp): tessel.recompute_grad (TF's
tf.recompute_grad, jax.checkpoint, torch.utils.checkpoint) gives bit for bit the gradients of the
function itself, keeps only its arguments on the tape and runs the function again in the backward
pass; tape_memory_stats counts what tapes keep; GradientTape.gradient's output_gradients."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import conftest
import tessel
from conftest import host, put


def rand(shape, seed):
    return conftest.rand(shape, seed, -1.0, 1.0)


def kept_bytes():
    return sum(s.live_bytes for s in tessel.tape_memory_stats())


def held_bytes(d):
    """The bytes of d's blocks over every device (replicated blocks counted on each)."""
    return sum(t.nbytes for t in tessel.unpack(d))


def test_names_are_exported():
    for name in ["recompute_grad", "tape_memory_stats", "reset_tape_memory_peak",
                 "TapeMemoryStats"]:
        assert hasattr(tessel, name), name
        assert name in tessel.__all__, name


def block(x, w1, w2):
    """A residual MLP with dropout (its mask keyed by seed and element index)."""
    h = tessel.gelu(tessel.matmul(x, w1))
    return x + tessel.dropout(tessel.matmul(h, w2), 0.25, 7)


def test_gradients_are_those_of_the_function_bit_for_bit(mesh):
    x = put(rand((8, 6), 1), ("x", "unsharded"), mesh)
    w1 = put(rand((6, 12), 2), ("unsharded", "y"), mesh)
    w2 = put(rand((12, 6), 3), ("y", "unsharded"), mesh)
    results = []
    for f in [block, tessel.recompute_grad(block)]:
        with tessel.GradientTape() as tape:
            tape.watch([w1, w2])
            loss = tessel.reduce_sum(f(x, w1, w2) * f(x, w1, w2))
        results.append([host(loss)] + [host(g) for g in tape.gradient(loss, [w1, w2])])
    for plain, recomputed in zip(*results):
        assert_array_equal(recomputed, plain)


def test_the_function_runs_again_in_the_backward_pass_and_the_tape_keeps_its_arguments(mesh):
    calls = []

    def f(x, w):
        calls.append(1)
        t = x
        for _ in range(3):
            t = tessel.tanh(tessel.matmul(t, w))
        return t

    x = put(rand((16, 8), 4), ("x", "unsharded"), mesh)
    w = put(rand((8, 8), 5), ("unsharded", "unsharded"), mesh)
    g = tessel.recompute_grad(f)
    with tessel.GradientTape() as tape:
        tape.watch(w)
        h = x + 0.0 * tessel.reduce_sum(w)  # depends on w: kept as an argument
        before = kept_bytes()
        y = g(h, w)
        assert kept_bytes() - before == held_bytes(h)  # h only (w is a watched source)
        loss = tessel.reduce_sum(y)
    assert len(calls) == 1
    [gw] = tape.gradient(loss, [w])
    assert len(calls) == 2
    with tessel.GradientTape() as plain:
        plain.watch(w)
        loss2 = tessel.reduce_sum(f(x + 0.0 * tessel.reduce_sum(w), w))
    assert_array_equal(host(gw), host(plain.gradient(loss2, [w])[0]))


def test_a_captured_watched_tensor_is_a_value_error(mesh):
    x = put(rand((4, 4), 6), ("x", "y"), mesh)
    w = put(rand((4, 4), 7), ("x", "y"), mesh)
    with tessel.GradientTape() as tape:
        tape.watch(w)
        with pytest.raises(ValueError, match="recompute_grad: the function reads DTensor"):
            tessel.recompute_grad(lambda a: a * w)(x)


def test_bad_arguments_and_results_are_type_errors(mesh):
    x = put(rand((2, 2), 8), ("x", "y"), mesh)
    with pytest.raises(TypeError, match="must be DTensors"):
        tessel.recompute_grad(lambda a: a)(np.zeros(2))
    with tessel.GradientTape() as tape:
        tape.watch(x)
        with pytest.raises(TypeError, match="must return a DTensor"):
            tessel.recompute_grad(lambda a: 3.0)(x)


def test_without_a_tape_it_calls_the_function(mesh):
    x = put(rand((4, 2), 9), ("x", "unsharded"), mesh)
    assert_array_equal(host(tessel.recompute_grad(tessel.exp)(x)), host(tessel.exp(x)))


def test_tapes_let_go_of_what_they_kept_after_the_gradient(mesh):
    x = put(rand((8, 8), 10), ("x", "y"), mesh)
    tessel.reset_tape_memory_peak()
    before = kept_bytes()
    with tessel.GradientTape() as tape:
        tape.watch(x)
        e = tessel.exp(x)  # keeps its output
        loss = tessel.reduce_sum(e * 2.0)
    assert kept_bytes() - before == held_bytes(e)
    stats = tessel.tape_memory_stats()
    assert all(isinstance(s, tessel.TapeMemoryStats) and s.peak_bytes >= s.live_bytes
               for s in stats)
    assert "TapeMemoryStats(device=" in repr(stats[0])
    [g] = tape.gradient(loss, [x])
    assert kept_bytes() == before
    assert_allclose(host(g), 2 * np.exp(host(x)), rtol=1e-12)


def test_output_gradients_weight_the_target(mesh):
    a = rand((4, 4), 11)
    x = put(a, ("x", "y"), mesh)
    g = put(rand((4, 4), 12), ("x", "y"), mesh)
    with tessel.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    assert_array_equal(host(tape.gradient(y, x, output_gradients=g)), 2 * host(g) * a)
