"""The comm layer from Python: collectives across threads, groups of a mesh, errors."""
import threading
import time

import numpy as np
import pytest

import tessel


def run_ranks(n, body):
    """Runs body(rank) on n threads; returns the exception each raised (None if none)."""
    errors = [None] * n

    def target(r):
        try:
            body(r)
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors[r] = e

    threads = [threading.Thread(target=target, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return errors


def options(**kw):
    kw.setdefault("timeout_seconds", 10)
    return tessel.CollectiveOptions(**kw)


@pytest.mark.parametrize("algorithm", ["direct", "ring", "halving_doubling", "reduce_to_one"])
def test_all_reduce_sums_every_rank(algorithm):
    comms = tessel.make_in_process_communicators(3)
    results = [None] * 3

    def body(r):
        t = tessel.tensor(np.full((5,), r + 1, dtype=np.float32))
        comms[r].all_reduce(t, t, tessel.ReduceOp.SUM, options(algorithm=algorithm))
        results[r] = t.numpy()

    assert run_ranks(3, body) == [None] * 3
    for r in range(3):
        np.testing.assert_array_equal(results[r], np.full((5,), 6, dtype=np.float32))


def test_all_gather_unequal_sizes():
    comms = tessel.make_in_process_communicators(2)
    results = [None] * 2

    def body(r):
        t = tessel.tensor(np.arange(r + 1, dtype=np.int64))
        results[r] = comms[r].all_gather(t, 0, options()).numpy()

    assert run_ranks(2, body) == [None, None]
    np.testing.assert_array_equal(results[0], [0, 0, 1])


def test_failing_rank_aborts_the_others():
    comms = tessel.make_in_process_communicators(2)
    errors = run_ranks(2, lambda r: comms[r].all_reduce(
        tessel.tensor(np.zeros(4 if r == 0 else 3, dtype=np.float32)),
        tessel.tensor(np.zeros(4, dtype=np.float32)), tessel.ReduceOp.SUM, options()))
    assert isinstance(errors[1], ValueError) and "does not match input" in str(errors[1])
    assert isinstance(errors[0], RuntimeError) and "rank 1" in str(errors[0])


def test_deadline_names_the_missing_rank():
    comms = tessel.make_in_process_communicators(2)
    with pytest.raises(TimeoutError, match=r"ranks \[1 \(rank 1\)\]"):
        comms[0].barrier(options(timeout_seconds=0.2))


def test_collective_groups_of_a_mesh():
    mesh = tessel.Mesh.from_string("|x=2,y=2|*CPU")
    assert tessel.collective_groups(mesh, ["x"]) == [[0, 2], [1, 3]]
    assert tessel.collective_groups(mesh, ["x", "y"]) == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match="mesh dimension z is not in mesh"):
        tessel.collective_groups(mesh, ["z"])
    assert tessel.group_position(mesh, ["y"], 3).rank == 1


def test_algorithm_names():
    assert tessel.algorithm_from_name("tree") == tessel.Algorithm.HALVING_DOUBLING
    with pytest.raises(ValueError, match="unknown algorithm 'bogus'"):
        tessel.algorithm_from_name("bogus")


def test_timeout_seconds_setter_rounds_up_and_rejects_nan():
    # The setter converts as the constructor does (casters.h seconds_arg): a sub-millisecond
    # timeout stays positive instead of truncating to 0 (= the default deadline).
    o = tessel.CollectiveOptions()
    o.timeout_seconds = 0.0004
    assert o.timeout_seconds == 0.001
    o.timeout_seconds = 2.5
    assert o.timeout_seconds == 2.5
    with pytest.raises(ValueError, match="timeout_seconds is NaN"):
        o.timeout_seconds = float("nan")


def test_absolute_deadline_on_the_monotonic_clock_wins_over_the_timeout():
    o = tessel.CollectiveOptions()
    assert o.deadline is None
    at = time.monotonic() + 0.2
    o = tessel.CollectiveOptions(timeout_seconds=30, deadline=at)
    assert abs(o.deadline - at) < 1e-6
    comms = tessel.make_in_process_communicators(2)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"rank 1"):
        comms[0].barrier(o)
    assert 0.19 <= time.monotonic() - start < 5
    o.deadline = None
    assert o.deadline is None
    with pytest.raises(ValueError, match="deadline is NaN"):
        o.deadline = float("nan")
