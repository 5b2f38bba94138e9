"""The op profile (op_profile.h): kernels per op and phase, the table, ProfilePhase as a context
manager, and nothing recorded while off."""

import numpy as np
import pytest

import tessel
from conftest import host, put


def test_ops_are_counted_per_phase_and_device(mesh):
    a = put(np.ones((128, 64), np.float32), ["x", "unsharded"], mesh)
    b = put(np.ones((64, 32), np.float32), ["unsharded", "unsharded"], mesh)
    tessel.start_op_profile()
    assert tessel.op_profile_enabled()
    with tessel.ProfilePhase("forward"):
        c = tessel.matmul(a, b)
        with tessel.ProfilePhase("backward"):
            c = tessel.exp(tessel.multiply(c, 1e-3))
    host(c)
    profile = tessel.stop_op_profile()
    assert not tessel.op_profile_enabled()
    rows = {(r.phase, r.op): r for r in profile.rows}
    assert rows[("forward", "matmul")].calls == 4  # one block on each of the 2x2 mesh's devices
    assert rows[("backward", "exp")].calls == 4
    assert ("forward", "exp") not in rows
    assert profile.phase_seconds("forward") > 0
    assert profile.wall_seconds > 0
    table = profile.table(steps=2)
    assert "matmul" in table and "wall clock" in table


def test_collectives_count_toward_the_launching_phase(mesh):
    """A tape's final reduction of its sources' gradients is the phase "gradient reduction"."""
    x = put(np.ones((32, 16), np.float32), ["x", "unsharded"], mesh)
    w = put(np.full((16, 8), 0.5, np.float32), ["unsharded", "unsharded"], mesh)
    tessel.start_op_profile()
    with tessel.ProfilePhase("step"):
        with tessel.GradientTape() as tape:
            tape.watch(w)
            loss = tessel.reduce_sum(tessel.matmul(x, w))
        [gw] = tape.gradient(loss, [w])
        np.testing.assert_array_equal(host(gw), np.full((16, 8), 32.0, np.float32))
    profile = tessel.stop_op_profile()
    rows = {(r.phase, r.op): r for r in profile.collective_rows}
    reduction = rows[("gradient reduction", "fused all_reduce")]
    assert reduction.calls == 4 and reduction.seconds > 0  # one part per device
    assert profile.phase_collective_seconds("gradient reduction") == reduction.seconds
    assert ("step", "matmul") in {(r.phase, r.op) for r in profile.rows}
    assert "(collective) fused all_reduce" in profile.table()


def test_nothing_is_recorded_while_off(mesh):
    host(tessel.exp(put(np.zeros((4, 4), np.float32), ["x", "y"], mesh)))
    profile = tessel.stop_op_profile()
    assert profile.rows == [] and profile.collective_rows == []


def test_an_empty_phase_name_is_refused():
    with pytest.raises(ValueError, match="ProfilePhase"):
        tessel.ProfilePhase("")
