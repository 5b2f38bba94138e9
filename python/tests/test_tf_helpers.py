"""TF's helpers around cross-device ops and device assignment, under TF's names and defaults:
ReduceOp.from_variable_aggregation, CollectiveHints, select_cross_device_ops, CollectiveKeys,
HierarchicalCopyAllReduce's copy plan, group_by_size with unknown shapes, tpu_device/host_device."""
import copy

import pytest

import tessel


def test_reduce_op_from_variable_aggregation():
    agg = tessel.VariableAggregation
    assert tessel.ReduceOp.from_variable_aggregation(agg.SUM) == tessel.ReduceOp.SUM
    assert tessel.reduce_op_from_variable_aggregation(agg.MEAN) == tessel.ReduceOp.MEAN
    for bad in (agg.NONE, agg.ONLY_FIRST_REPLICA):
        with pytest.raises(ValueError, match="Could not convert from `tf.VariableAggregation` "
                                             f"VariableAggregation.{bad.name} to`tf.distribute"):
            tessel.ReduceOp.from_variable_aggregation(bad)
    assert [int(a) for a in (agg.NONE, agg.SUM, agg.MEAN, agg.ONLY_FIRST_REPLICA)] == [0, 1, 2, 3]


def test_collective_hints_are_communication_options():
    hints = tessel.CollectiveHints(bytes_per_pack=1024, timeout_seconds=3.0)
    assert isinstance(hints, tessel.CommunicationOptions)
    assert hints == tessel.CommunicationOptions(1024, 3.0)
    assert tessel.Hints() == tessel.CommunicationOptions()
    with pytest.raises(ValueError, match="bytes_per_pack must be non-negative"):
        tessel.CollectiveHints(bytes_per_pack=-1)


def test_select_cross_device_ops():
    assert isinstance(tessel.select_cross_device_ops(["/gpu:0", "/gpu:1"]), tessel.NcclAllReduce)
    assert isinstance(tessel.select_cross_device_ops(["/cpu:0", "/cpu:1"]),
                      tessel.ReductionToOneDevice)
    assert isinstance(tessel.select_cross_device_ops(["/gpu:0", "/cpu:0"]),
                      tessel.ReductionToOneDevice)
    with pytest.raises(ValueError, match="devices must not be empty"):
        tessel.select_cross_device_ops([])


def test_collective_keys():
    keys = tessel.CollectiveKeys()
    assert keys.get_group_key(["/cpu:0", "/cpu:1"]) == 1
    assert keys.get_group_key(["/cpu:0"]) == 2
    assert keys.get_group_key(["/cpu:0", "/cpu:1"]) == 1
    assert [keys.get_instance_key(1, "/cpu:1") for _ in range(3)] == [100, 101, 102]
    copied = copy.deepcopy(keys)
    assert copied.get_instance_key(1, "/cpu:1") == 103
    assert keys.get_instance_key(1, "/cpu:1") == 103
    with pytest.raises(ValueError, match="Group 5 is not found."):
        keys.get_instance_key(5, "/cpu:0")
    with pytest.raises(ValueError, match="Device /cpu:1 is not present in group 2"):
        keys.get_instance_key(2, "/cpu:1")


def test_hierarchical_copy_plan():
    plan = tessel.hierarchical_copy_plan(4, 3)
    assert [(s.group_0_main, s.group_1_main) for s in plan] == [(0, 2), (1, 3), (2, 0)]
    assert plan[2].group_0 == [2, 3] and plan[2].group_1 == [0, 1]
    assert plan[1].copy_from == [1, 1, 3, 3]
    with pytest.raises(ValueError, match="even number of devices"):
        tessel.hierarchical_copy_plan(5, 1)


def test_group_by_size_with_an_unknown_shape_is_one_pack():
    assert tessel.group_by_size([400, None, 400], 100) == [[0, 1, 2]]
    assert tessel.group_by_size([400, 400, 400], 100) == [[0], [1], [2]]


def test_tpu_device_and_host_device_default_to_job_none():
    da = tessel.DeviceAssignment(tessel.Topology.for_hosts(2, 2, "TPU"),
                                 [[[1, 1, 0, 0]], [[0, 0, 0, 0]]])
    assert da.tpu_device() == "/task:1/device:TPU:1"
    assert da.host_device() == "/task:1/device:CPU:0"
    assert da.tpu_device(1, job="worker") == "/job:worker/task:0/device:TPU:0"
    assert da.host_device(replica=1, job="worker") == "/job:worker/task:0/device:CPU:0"
