"""The sharding fallback (bind_sharding_fallback.cpp): an op whose rule has no answer for its
inputs' layouts runs on the nearest layouts the rule accepts and matches the replicated
computation (values and gradients) on meshes 2 and 2x2; each (op, layouts) pair is counted with
its bytes and warned about once; strict mode (and TESSEL_STRICT_SHARDING=1) raises naming the op
and the layouts; ops with rules never count. The op without a rule for a sharded dim 0 is cumsum
along axis 0 (a running sum down dim 0), called through call_op as "cumsum"."""

import os
import subprocess
import sys

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import tessel
from conftest import host, put, rand

CUMSUM = "cumsum"
NAMES = ["FallbackRecord", "sharding_fallbacks", "reset_sharding_fallbacks",
         "sharding_fallbacks_text", "set_sharding_fallback_strict", "sharding_fallback_strict"]

pytestmark = pytest.mark.usefixtures("fresh_fallbacks")


def test_names_are_exported():
    for name in NAMES:
        assert hasattr(tessel, name), name
        assert name in tessel.__all__, name


@pytest.mark.parametrize("dims,specs,kept", [
    ([("x", 2)], ("x", "unsharded"), ("unsharded", "unsharded")),
    ([("x", 2), ("y", 2)], ("x", "y"), ("unsharded", "y")),
    ([("x", 2), ("y", 2)], ("y", "x"), ("unsharded", "x")),
])
def test_result_equals_the_replicated_computation(capfd, dims, specs, kept):
    mesh = tessel.create_mesh(dims)
    a = rand((6, 4), 1)
    before = tessel.relayout_stats()
    out = tessel.call_op(CUMSUM, [put(a, specs, mesh)])
    after = tessel.relayout_stats()
    assert tessel.fetch_layout(out) == tessel.Layout(list(kept), mesh)
    assert_allclose(host(out), np.cumsum(a, axis=0), rtol=1e-12)
    replicated = tessel.call_op(CUMSUM, [put(a, ("unsharded", "unsharded"), mesh)])
    assert_array_equal(host(out), host(replicated))
    [record] = tessel.sharding_fallbacks()
    op, layouts, count, nbytes = record
    assert op == CUMSUM and count == 1
    assert layouts == [tessel.Layout(list(specs), mesh)]
    assert nbytes == after.bytes - before.bytes > 0
    assert capfd.readouterr().err.count("tessel: warning: op 'cumsum'") == 1


def test_each_pair_is_warned_about_once_and_counted_per_call(capfd, mesh):
    a = rand((8, 4), 2)
    rows, both = put(a, ("x", "unsharded"), mesh), put(a, ("x", "y"), mesh)
    for _ in range(3):
        tessel.call_op(CUMSUM, [rows])
    for _ in range(2):
        tessel.call_op(CUMSUM, [both])
    err = capfd.readouterr().err
    assert err.count("tessel: warning:") == 2, err
    assert err.count("[8,4] f64 in sharding_specs:x,unsharded on mesh x=2,y=2") == 1, err
    assert err.count("[8,4] f64 in sharding_specs:x,y on mesh x=2,y=2") == 1, err
    counts = {str(r.layouts[0]): (r.count, r.bytes) for r in tessel.sharding_fallbacks()}
    per_call = {
        str(rows.layout): tessel.plan_relayout(
            [8, 4], rows.layout, tessel.Layout(["unsharded", "unsharded"], mesh), "f64"),
        str(both.layout): tessel.plan_relayout(
            [8, 4], both.layout, tessel.Layout(["unsharded", "y"], mesh), "f64"),
    }
    assert counts == {str(rows.layout): (3, 3 * per_call[str(rows.layout)].bytes_total),
                      str(both.layout): (2, 2 * per_call[str(both.layout)].bytes_total)}
    assert "cumsum (input 0: sharding_specs:x,y on mesh x=2,y=2): 2 calls" in \
        tessel.sharding_fallbacks_text()
    tessel.reset_sharding_fallbacks()
    assert tessel.sharding_fallbacks() == [] and tessel.sharding_fallbacks_text() == ""
    tessel.call_op(CUMSUM, [rows])
    assert capfd.readouterr().err.count("tessel: warning:") == 1  # warns again after a reset


def test_gradients_match_and_keep_the_inputs_layouts(mesh):
    a, w = rand((5, 3), 3), rand((5, 3), 4)
    for specs in [("x", "y"), ("x", "unsharded"), ("y", "x")]:
        d = put(a, specs, mesh)
        with tessel.GradientTape() as tape:
            tape.watch(d)
            loss = tessel.reduce_sum(tessel.call_op(CUMSUM, [d]) * put(w, ("unsharded",) * 2, mesh))
        [g] = tape.gradient(loss, [d])
        assert tessel.fetch_layout(g) == tessel.fetch_layout(d)
        assert_allclose(host(g), np.flip(np.cumsum(np.flip(w, 0), axis=0), 0), rtol=1e-12)


def test_strict_mode_raises_naming_the_op_and_layouts(mesh):
    d = put(rand((4, 4), 5), ("x", "y"), mesh)
    tessel.call_op(CUMSUM, [d])  # planned and cached before strict mode
    tessel.set_sharding_fallback_strict(True)
    assert tessel.sharding_fallback_strict() is True
    with pytest.raises(NotImplementedError,
                       match=r"cumsum: no sharding rule for input 0: \[4,4\] f64 in "
                             r"sharding_specs:x,y on mesh x=2,y=2.*strict sharding is on"):
        tessel.call_op(CUMSUM, [d])
    assert [r.count for r in tessel.sharding_fallbacks()] == [1]


def test_strict_mode_from_the_environment():
    code = ("import tessel\n"
            "assert tessel.sharding_fallback_strict()\n"
            "m = tessel.create_mesh([('x', 2)])\n"
            "d = tessel.copy_to_mesh(tessel.tensor([[1.0], [2.0]]),\n"
            "                        tessel.Layout(['x', 'unsharded'], m))\n"
            "try:\n"
            "    tessel.cumsum(d)\n"
            "except NotImplementedError as e:\n"
            "    print('raised:', e)\n")
    env = dict(os.environ, TESSEL_STRICT_SHARDING="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "raised: cumsum: no sharding rule" in out.stdout
    env["TESSEL_STRICT_SHARDING"] = "sometimes"
    out = subprocess.run([sys.executable, "-c", "import tessel; tessel.sharding_fallback_strict()"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "TESSEL_STRICT_SHARDING='sometimes'" in out.stderr


def test_ops_with_rules_never_fall_back(mesh):
    # A small GPT-like step: layer norm, column- and row-parallel matmuls, causal attention
    # scores, GELU, cross-entropy, gradients and an Adam update.
    rng = np.random.default_rng(6)
    x = put(rng.normal(size=(2, 4, 8)), ("x", "unsharded", "unsharded"), mesh)
    params = [put(np.ones(8), ("unsharded",), mesh),
              put(rng.normal(size=(8, 16)) * 0.1, ("unsharded", "y"), mesh),
              put(rng.normal(size=(16, 8)) * 0.1, ("y", "unsharded"), mesh),
              put(rng.normal(size=(8, 8)) * 0.1, ("unsharded", "y"), mesh)]
    labels = put(np.arange(8).reshape(2, 4) % 8, ("x", "unsharded"), mesh)
    adam = tessel.Adam(1e-3)
    for _ in range(2):
        with tessel.GradientTape() as tape:
            for p in params:
                tape.watch(p)
            h = tessel.layer_norm(x, params[0])
            h = h + tessel.matmul(tessel.causal_softmax(tessel.matmul(h, h, transpose_b=True)), h)
            h = h + tessel.matmul(tessel.gelu(tessel.matmul(h, params[1])), params[2])
            loss = tessel.reduce_mean(tessel.sparse_softmax_cross_entropy_with_logits(
                labels, tessel.matmul(h, params[3])))
        params = adam.apply(params, tape.gradient(loss, params))
        assert np.isfinite(host(loss))
    assert tessel.sharding_fallbacks() == [], tessel.sharding_fallbacks_text()
