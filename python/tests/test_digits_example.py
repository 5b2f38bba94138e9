"""examples/digits/train_digits.py: the small convolutional network trained data parallel over a
4-device mesh on scikit-learn's digits reaches at least 95 % accuracy on the held-out split.

Skipped where scikit-learn is missing (scripts/install-deps.sh installs Debian's python3-sklearn
for /usr/bin/python3; a PyPI numpy-2 virtual environment has none)."""
import os
import sys

import pytest

import tessel

pytest.importorskip("sklearn", reason="the digits data ship with scikit-learn (python3-sklearn)")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "examples", "digits"))
import train_digits  # noqa: E402


def test_trains_to_95_percent_on_the_held_out_digits():
    tessel.reset_sharding_fallbacks()
    result = train_digits.train(epochs=train_digits.DEFAULT_EPOCHS, log=None)
    # Every op had a rule for the batch-sharded layouts: nothing was gathered.
    assert tessel.sharding_fallbacks() == []
    assert result["steps"] == train_digits.DEFAULT_EPOCHS * (1437 // 64)
    assert result["train_loss"] < 0.2
    assert result["test_accuracy"] >= 0.95, result


def test_the_split_holds_out_a_fifth_of_every_class():
    x_train, y_train, x_test, y_test = train_digits.load_split(seed=0)
    assert x_train.shape == (1437, 8, 8, 1) and x_test.shape == (360, 8, 8, 1)
    assert x_train.dtype == "float32" and 0 <= x_train.min() and x_train.max() <= 1
    for c in range(10):
        share = (y_test == c).sum() / ((y_test == c).sum() + (y_train == c).sum())
        assert 0.18 < share < 0.22, c


def test_a_data_parallel_step_runs_one_collective():
    """Images sharded over `batch`, parameters replicated: the forward and backward ops need no
    communication, and the parameters' Partial gradients are all-reduced in one fused bucket."""
    x_train, y_train, _, _ = train_digits.load_split(seed=0)
    mesh = tessel.create_mesh([("batch", 4)])
    u = train_digits.U
    params = train_digits.init(mesh, seed=0)
    x = tessel.copy_to_mesh(x_train[:64], tessel.Layout(["batch", u, u, u], mesh))
    y = tessel.copy_to_mesh(y_train[:64], tessel.Layout(["batch"], mesh))
    before = tessel.relayout_stats().collectives
    _, grads = tessel.value_and_grad(lambda p: train_digits.loss(p, x, y), params)
    assert tessel.relayout_stats().collectives == before + 1
    assert [g.layout for g in grads] == [p.layout for p in params]
