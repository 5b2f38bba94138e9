"""The alloc layer from Python: scoped allocator, fusion planner, fused batch all-reduce."""
import threading

import pytest

import tessel


def test_layout_matches_tensorflow():
    fields, total = tessel.scoped_layout([(3,), (5,)], "f32", 7)
    assert [f.offset for f in fields] == [0, 64]
    assert [f.bytes_requested for f in fields] == [12, 20]
    assert [f.scope_id for f in fields] == [8, 9]
    assert total == 128


def test_scoped_allocator_aliases_and_errors():
    s = tessel.ScopedAllocator([(3,), (5,)], "f32", "grads", 7, 2)
    a = s.allocate(0, 12)
    b = s.allocate_shape(1, (5,))
    assert a.shares_storage_with(s.backing) and b.shares_storage_with(s.backing)
    assert b.storage_offset == 16
    b.fill(2)
    assert s.concat(s.backing, [a, b]).numpy()[16] == 2
    with pytest.raises(RuntimeError, match="expected uses exhausted"):
        s.allocate(0, 12)
    with pytest.raises(RuntimeError, match="field 0: concat: alias 0"):
        s.concat(s.backing, [b, a])
    s.close()


def test_manager_already_exists():
    mgr = tessel.ScopedAllocatorManager("dev0")
    mgr.add(1, 10, "grads", [(3,), (5,)], "f32", 2)
    with pytest.raises(RuntimeError, match="scope_id 11 for name x already exists"):
        mgr.add(1, 11, "x", [(1,)], "f32", 1)
    assert mgr.num_live_scopes == 1


def test_plan_and_fused_all_reduce():
    tensors = [tessel.FusionTensor(f"t{i}", (4,)) for i in range(6)]
    plan = tessel.plan_fusion(tensors, tessel.FusionOptions(num_packs=2))
    assert [b.tensors for b in plan.buckets] == [[0, 1, 2], [3, 4, 5]]
    assert "bucket 1: f32" in plan.report()

    comms = tessel.make_in_process_communicators(2)
    results = [None, None]
    errors = [None, None]

    def body(r):
        try:
            fused = tessel.FusedAllReducer(comms[r], tensors, tessel.FusionOptions(num_packs=2))
            for i in range(6):
                fused.tensor_view(i).fill(r + i)
            out = fused.all_reduce_buckets(tessel.ReduceOp.SUM,
                                           tessel.CollectiveOptions(timeout_seconds=10))
            results[r] = [t.numpy()[0] for t in out]
        except BaseException as e:  # noqa: BLE001 - checked below
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == [None, None]
    assert results[0] == [1 + 2 * i for i in range(6)] == results[1]
