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


def test_nothing_is_recorded_while_off(mesh):
    host(tessel.exp(put(np.zeros((4, 4), np.float32), ["x", "y"], mesh)))
    assert tessel.stop_op_profile().rows == []


def test_an_empty_phase_name_is_refused():
    with pytest.raises(ValueError, match="ProfilePhase"):
        tessel.ProfilePhase("")
