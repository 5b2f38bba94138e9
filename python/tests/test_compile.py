"""compile(): trace a replica computation once, replay it on every replica (compile.h), from
Python. The Python function runs once, at compile time; run() never calls it."""

import numpy as np
import pytest

import tessel

RUNTIME = tessel.Runtime(num_cpu_devices=4)


def options(replicas, **kwargs):
    return tessel.CompileOptions(tessel.ReplicateMetadata(replicas), runtime=RUNTIME, **kwargs)


class SgdStep:
    """A data-parallel SGD step of a linear model; counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, ctx, inputs):
        self.calls += 1
        x, y, w = inputs
        with tessel.GradientTape() as tape:
            tape.watch(w)
            err = tessel.subtract(tessel.matmul(x, w), y)
            loss = tessel.reduce_mean(tessel.multiply(err, err))
        grad = ctx.all_reduce(tape.gradient(loss, [w])[0], tessel.ReduceOp.MEAN)
        return [loss, tessel.subtract(w, tessel.multiply(grad, 0.1))]


SIGNATURE = [tessel.InputSpec((8, 4)), tessel.InputSpec((8, 2)), tessel.InputSpec((4, 2))]


def sgd_data(replicas):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((8, 4)).astype(np.float32) for _ in range(replicas)]
    ys = [rng.standard_normal((8, 2)).astype(np.float32) for _ in range(replicas)]
    w = rng.standard_normal((4, 2)).astype(np.float32)
    return xs, ys, w


def expected_sgd(xs, ys, w):
    grads, losses = [], []
    for x, y in zip(xs, ys):
        err = x @ w - y
        losses.append(np.mean(err * err))
        grads.append(x.T @ err * (2.0 / err.size))
    return losses, w - 0.1 * np.mean(grads, axis=0)


def test_traces_once_and_replays_without_calling_the_function():
    step = SgdStep()
    r = tessel.compile(tessel.Function("sgd", step), SIGNATURE, options(4))
    assert r.ok(), r.status_string()
    assert r.status_string() == "OK" and r.code is None and r.message is None
    assert step.calls == 1
    xs, ys, w = sgd_data(4)
    losses, new_w = expected_sgd(xs, ys, w)
    for _ in range(3):
        outs = r.computation.run([xs, ys], [w])
        assert len(outs) == 4
        for k in range(4):
            np.testing.assert_allclose(tessel.to_host(outs[k][0]), losses[k], rtol=1e-5)
            np.testing.assert_allclose(tessel.to_host(outs[k][1]), new_w, rtol=1e-5, atol=1e-6)
    assert step.calls == 1


def test_the_graph_prints_one_line_per_node():
    r = tessel.compile(tessel.Function("sgd", SgdStep()), SIGNATURE, options(2))
    graph = r.computation.graph
    text = str(graph)
    assert text.startswith("graph on mesh replica_0|core=1|")
    assert text.count("\n") == len(graph.nodes) + 1
    assert "all_reduce[mean](" in text
    assert graph.num_inputs == 3 and len(graph.outputs) == 2
    assert graph.count(tessel.GraphNodeKind.COLLECTIVE) == 1
    assert graph.nodes[3].op == "matmul" and graph.nodes[3].inputs == [0, 2]


def test_cache_hit_without_tracing_and_no_stale_hit_for_another_function():
    step = SgdStep()
    fn = tessel.Function("sgd", step)
    before = tessel.compile_cache_stats()
    first = tessel.compile(fn, SIGNATURE, options(2))
    second = tessel.compile(fn, SIGNATURE, options(2))
    assert not first.cache_hit and second.cache_hit
    assert step.calls == 1
    assert tessel.compile_cache_stats().hits == before.hits + 1
    assert not tessel.compile(fn, SIGNATURE, options(4)).cache_hit  # options are in the key
    assert not tessel.compile(tessel.Function("sgd", step), SIGNATURE, options(2)).cache_hit
    assert step.calls == 3


def compile_error(body, signature, opts=None):
    r = tessel.compile(tessel.Function("bad", body), signature, opts or options(2))
    assert not r.ok() and r.computation is None
    return r


def test_shape_mismatch_is_a_compile_error():
    r = compile_error(lambda ctx, xs: [tessel.matmul(xs[0], xs[1])],
                      [tessel.InputSpec((8, 4)), tessel.InputSpec((3, 2))])
    assert r.code == tessel.ErrorCode.INVALID_ARGUMENT
    assert "compile: function 'bad': matmul" in r.message
    with pytest.raises(ValueError, match="matmul"):
        r.raise_if_error()


def test_unknown_op_and_bad_device_assignment_are_compile_errors():
    r = compile_error(lambda ctx, xs: [tessel.call_op("no_such_op", [xs[0]])], [tessel.InputSpec((2,))])
    assert r.code == tessel.ErrorCode.NOT_FOUND
    r = compile_error(lambda ctx, xs: xs, [tessel.InputSpec((2,))], options(8))
    assert r.code == tessel.ErrorCode.INVALID_ARGUMENT
    assert "8 replicas x 1 cores per replica need 8 devices; the runtime has 4" in r.message


def test_wrong_outputs_and_python_exceptions_are_compile_errors():
    r = compile_error(lambda ctx, xs: [xs[0]], [tessel.InputSpec((2,))],
                      options(2, output_types=["f32", "f32"]))
    assert r.code == tessel.ErrorCode.INVALID_ARGUMENT
    assert "returned 1 outputs; output_types has 2" in r.message

    def boom(ctx, xs):
        raise KeyError("no such layer")

    r = compile_error(boom, [])
    assert r.code == tessel.ErrorCode.INTERNAL
    assert "no such layer" in r.message


def test_br_74_05_pack_and_unpack_are_eager_only():
    def packs(ctx, xs):
        return [tessel.pack([np.zeros(2, np.float32)], tessel.Layout(["unsharded"], ctx.mesh), ctx.runtime)]

    r = compile_error(packs, [])
    assert r.code == tessel.ErrorCode.FAILED_PRECONDITION
    assert "pack() is eager-only (BR-74-05)" in r.message

    def unpacks(ctx, xs):
        tessel.unpack(xs[0])
        return xs

    r = compile_error(unpacks, [tessel.InputSpec((2,))])
    assert r.code == tessel.ErrorCode.FAILED_PRECONDITION
    assert "unpack() is eager-only (BR-74-05)" in r.message
    with pytest.raises(RuntimeError, match="BR-74-05"):
        r.raise_if_error()


def test_reading_a_traced_value_is_eager_only():
    r = compile_error(lambda ctx, xs: [tessel.add(xs[0], float(tessel.to_host(xs[0])[0]))],
                      [tessel.InputSpec((2,))])
    assert r.code == tessel.ErrorCode.FAILED_PRECONDITION
    assert "eager-only" in r.message


def test_collectives_are_traced_and_replayed_on_every_replica():
    def body(ctx, xs):
        return [ctx.all_reduce(xs[0]), ctx.all_gather(xs[0], 0), ctx.broadcast(xs[0], 1)]

    r = tessel.compile(tessel.Function("collectives", body), [tessel.InputSpec((2,))], options(2))
    assert r.ok(), r.status_string()
    xs = [np.array([1, 2], np.float32), np.array([10, 20], np.float32)]
    outs = r.computation.run([xs])
    for k in range(2):
        np.testing.assert_array_equal(tessel.to_host(outs[k][0]), [11, 22])
        np.testing.assert_array_equal(tessel.to_host(outs[k][1]), [1, 2, 10, 20])
        np.testing.assert_array_equal(tessel.to_host(outs[k][2]), [10, 20])


def test_run_checks_inputs_against_the_signature():
    r = tessel.compile(tessel.Function("sgd", SgdStep()), SIGNATURE, options(2))
    xs, ys, w = sgd_data(2)
    with pytest.raises(ValueError, match="'sgd' was compiled for 3 inputs; got 2"):
        r.computation.run([xs, ys])
