"""Replication metadata and device assignment (seed 105) from Python: TF's
TPUReplicateMetadata attributes and tf.tpu.experimental.DeviceAssignment."""

import numpy as np
import pytest

import tessel


def two_by_two():
    return tessel.Topology.for_hosts(2, 2)  # mesh (2, 2, 1, 1), device d of task t at [d, t, 0, 0]


def test_metadata_defaults_are_tfs():
    md = tessel.ReplicateMetadata(0)
    assert md.num_replicas == 0
    assert md.num_cores_per_replica == 1
    assert md.topology == b""
    assert md.use_tpu is True
    assert md.device_assignment == []
    assert md.step_marker_location == "STEP_MARK_AT_ENTRY"
    assert md.allow_soft_placement is False
    assert md.use_spmd_for_xla_partitioning is False
    assert md.use_shardy_partitioner is False
    assert md.tpu_compile_options_proto == b""
    md.validate()
    assert md.parsed_topology() is None and md.parsed_device_assignment() is None


def test_metadata_num_replicas_at_least_one_to_run():
    md = tessel.ReplicateMetadata(0)
    with pytest.raises(ValueError, match="num_replicas must be >= 1 to run"):
        md.validate_for_run()
    with pytest.raises(tessel.InvalidArgumentError, match="num_replicas must be >= 0; got -1"):
        tessel.ReplicateMetadata(-1).validate()
    tessel.ReplicateMetadata(2).validate_for_run()


def test_metadata_deprecated_attributes_rejected():
    with pytest.raises(ValueError, match="computation_shape .* deprecated.*use num_cores_per_replica"):
        tessel.ReplicateMetadata(1, computation_shape=[1, 1, 1, 2]).validate()
    with pytest.raises(ValueError, match="padding_map .* deprecated"):
        tessel.ReplicateMetadata(1, padding_map=["x"]).validate()


def test_br_105_04_step_marker_location():
    assert tessel.ReplicateMetadata(1).step_marker() == tessel.StepMarkerLocation.STEP_MARK_AT_ENTRY
    md = tessel.ReplicateMetadata(1, step_marker_location="STEP_MARK_AT_SECOND_LEVEL_WHILE_LOOP")
    assert int(md.step_marker()) == 3
    assert tessel.step_marker_location_name(tessel.StepMarkerLocation.STEP_MARK_NONE) == "STEP_MARK_NONE"
    md.step_marker_location = "AT_EXIT"
    with pytest.raises(ValueError, match="Malformed step_marker_location"):
        md.validate()


def test_metadata_host_compute_core():
    md = tessel.ReplicateMetadata(1, num_cores_per_replica=2, host_compute_core=["c:1"])
    assert md.parsed_host_compute_core() == [("c", 1)]
    md.host_compute_core = ["c"]
    with pytest.raises(ValueError, match="Malformed host_compute_core entry c should be"):
        md.validate()


def test_br_105_03_metadata_device_assignment():
    md = tessel.ReplicateMetadata(4, topology=two_by_two(),
                                  device_assignment=[0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0])
    md.validate_for_run()
    assert md.parsed_topology() == two_by_two()
    assert md.parsed_device_assignment().device(3) == "/job:localhost/replica:0/task:1/device:CPU:1"
    md.num_replicas = 3
    with pytest.raises(ValueError, match="device_assignment has 16 entries"):
        md.validate()
    with pytest.raises(ValueError, match="topology is empty"):
        tessel.ReplicateMetadata(1, device_assignment=[0, 0, 0, 0]).validate()


def test_br_105_03_device_assignment_accessors():
    da = tessel.DeviceAssignment(two_by_two(), np.array([[[0, 0, 0, 0], [1, 0, 0, 0]],
                                                         [[0, 1, 0, 0], [1, 1, 0, 0]]]))
    assert da.num_replicas == 2 and da.num_cores_per_replica == 2
    assert da.core_assignment.shape == (2, 2, 4) and da.core_assignment.dtype == np.int32
    assert da.coordinates(1, 0) == (0, 1, 0, 0)
    assert da.tpu_ordinal(1, 1) == 1
    assert da.tpu_device(1, 1) == "/job:localhost/replica:0/task:1/device:CPU:1"
    assert da.host_device(1, 0) == "/job:localhost/replica:0/task:1/device:CPU:0"
    assert da.host_device(1, 0, job=None) == "/task:1/device:CPU:0"
    assert da.lookup_replicas(1, 0) == [1]
    with pytest.raises(ValueError, match="Can not find any replica in task: 3 contains logical_core: 0"):
        da.lookup_replicas(3, 0)
    with pytest.raises(IndexError):
        da.coordinates(2, 0)


def test_br_105_03_device_assignment_errors():
    t = two_by_two()
    with pytest.raises(ValueError, match="topology must be a Topology object, got str"):
        tessel.DeviceAssignment("nope", [[[0, 0, 0, 0]]])
    with pytest.raises(ValueError, match=r"core_assignment must be a rank 3 numpy array, got shape \[1, 4\]"):
        tessel.DeviceAssignment(t, [[0, 0, 0, 0]])
    with pytest.raises(ValueError, match=r"minor dimension of core_assignment must have size equal "
                                         r"to topology rank \(4\), got shape \[1, 1, 2\]"):
        tessel.DeviceAssignment(t, [[[0, 0]]])
    with pytest.raises(ValueError, match="lie outside the topology mesh"):
        tessel.DeviceAssignment(t, [[[0, 2, 0, 0]]])
    with pytest.raises(ValueError, match="is assigned twice"):
        tessel.DeviceAssignment(t, [[[0, 0, 0, 0]], [[0, 0, 0, 0]]])
    missing = tessel.Topology(mesh_shape=[2, 2], device_coordinates=[[[0, 0], [1, 0]]])
    with pytest.raises(ValueError, match="no device at coordinates"):
        tessel.DeviceAssignment(missing, [[[1, 1]]])


def test_br_105_03_build():
    da = tessel.DeviceAssignment.build(two_by_two(), num_replicas=4)
    assert da.core_assignment.reshape(4, 4).tolist() == [[0, 0, 0, 0], [1, 0, 0, 0],
                                                         [0, 1, 0, 0], [1, 1, 0, 0]]
    da2 = tessel.DeviceAssignment.build(two_by_two().serialized(), computation_shape=[2, 1, 1, 1],
                                        num_replicas=2)
    assert da2.num_cores_per_replica == 2
    with pytest.raises(ValueError, match="requested 3 replicas but only 2 replicas"):
        tessel.DeviceAssignment.build(two_by_two(), [2, 1, 1, 1], num_replicas=3)
    with pytest.raises(ValueError, match="`topology` is not a Topology object; got int"):
        tessel.DeviceAssignment.build(3)
    assert tessel.SINGLE_CORE_ASSIGNMENT == [[[0, 0, 0, 0]]]
