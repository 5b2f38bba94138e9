"""TF's ScopedAllocatorContainer and _ScopedAllocatorConcat/_Split rules from Python: explicit field
scope ids, TF's duplicate-id error, ids free once a scope retires, concat's shape/reshape
attributes and split's N >= 2."""
import numpy as np
import pytest

import tessel


def test_explicit_field_ids_duplicates_and_reuse_after_retirement():
    mgr = tessel.ScopedAllocatorManager("dev0")
    s = mgr.add(1, 10, "grads", [(3,), (5,)], "f32", 2, field_scope_ids=[40, 30])
    assert [f.scope_id for f in s.fields] == [40, 30]
    with pytest.raises(RuntimeError, match="field scope_id 30 for name x already exists"):
        mgr.add(1, 50, "x", [(1,)], "f32", 1, field_scope_ids=[30])
    a = mgr.allocate(1, 40, 12)
    mgr.allocate(1, 30, 20)  # the last expected call: the scope retires
    assert mgr.num_live_scopes == 0
    mgr.add(1, 30, "reused", [(1,), (1,)], "f32", 2, field_scope_ids=[10, 40])
    a.fill(5)
    assert s.backing.numpy()[0] == 5  # the retired scope's tensors still work
    with pytest.raises(ValueError, match="field 1 scope_id 7 must be >= 0 and differ"):
        tessel.ScopedAllocator([(1,), (1,)], "f32", "bad", 7, 2, field_scope_ids=[8, 7])


def test_concat_shape_and_reshape_attributes():
    s = tessel.ScopedAllocator([(16,), (16,)], "f32", "grads", 7, 2)
    a, b = s.allocate_shape(0, (16,)), s.allocate_shape(1, (16,))
    b.fill(2)
    out = s.concat(s.backing, [a, b], shape=(4, 8), reshape=True)
    assert out.shape == (4, 8)
    expected = np.concatenate([np.zeros(16, np.float32), np.full(16, 2, np.float32)])
    np.testing.assert_array_equal(out.numpy(), expected.reshape(4, 8))
    assert s.concat(s.backing, [a, b], shape=(32,)).shape == (32,)
    with pytest.raises(ValueError, match="Backing tensor num elements 32 is not >= to expected 64"):
        s.concat(s.backing, [a, b], shape=(64,))
    with pytest.raises(ValueError, match="needs the backing's 32 elements"):
        s.concat(s.backing, [a, b], shape=(8,), reshape=True)


def test_split_needs_two_fields():
    s = tessel.ScopedAllocator([(4,)], "f32", "one", 3, 1)
    a = s.allocate(0, 16)
    with pytest.raises(ValueError, match="Value for attr 'N' of 1 must be at least minimum 2"):
        s.split(s.backing, [a])
