"""Replication metadata and device assignment (seed 105) from Python: TF's
TPUReplicateMetadata attributes and tf.tpu.experimental.DeviceAssignment."""

import numpy as np
import pytest

import tessel
from conftest import client_runtimes, run_as_clients


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
    # TF's tpu_device / host_device: job=None by default (job-less names), no replica part.
    assert da.tpu_device(1, 1) == "/task:1/device:CPU:1"
    assert da.tpu_device(1, 1, job="worker") == "/job:worker/task:1/device:CPU:1"
    assert da.host_device(1, 0) == "/task:1/device:CPU:0"
    assert da.host_device(1, 0, job="worker") == "/job:worker/task:1/device:CPU:0"
    assert da.device(1, 1) == "/job:localhost/replica:0/task:1/device:CPU:1"
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
    # Full replication follows TF's ring in AUTO order; MESH keeps the replica grid.
    da = tessel.DeviceAssignment.build(two_by_two(), num_replicas=4)
    assert da.core_assignment.reshape(4, 4).tolist() == [[0, 0, 0, 0], [1, 0, 0, 0],
                                                         [1, 1, 0, 0], [0, 1, 0, 0]]
    mesh = tessel.DeviceAssignment.build(two_by_two(), num_replicas=4,
                                         device_order_mode=tessel.DeviceOrderMode.MESH)
    assert mesh.core_assignment.reshape(4, 4).tolist() == [[0, 0, 0, 0], [1, 0, 0, 0],
                                                           [0, 1, 0, 0], [1, 1, 0, 0]]
    da2 = tessel.DeviceAssignment.build(two_by_two().serialized(), computation_shape=[2, 1, 1, 1],
                                        num_replicas=2)
    assert da2.num_cores_per_replica == 2
    with pytest.raises(ValueError, match="requested 3 replicas but only 2 replicas"):
        tessel.DeviceAssignment.build(two_by_two(), [2, 1, 1, 1], num_replicas=3)
    with pytest.raises(ValueError, match="`topology` is not a Topology object; got int"):
        tessel.DeviceAssignment.build(3)
    assert tessel.SINGLE_CORE_ASSIGNMENT == [[[0, 0, 0, 0]]]


# ---- replicate(), ReplicaContext, replicated inputs and outputs ---------------------------

import threading
import time

from numpy.testing import assert_allclose, assert_array_equal


@pytest.fixture(scope="module")
def runtime():
    return tessel.Runtime(4)


def options(runtime, replicas, cores=1, timeout=60.0, **metadata):
    md = tessel.ReplicateMetadata(replicas, num_cores_per_replica=cores,
                                  use_spmd_for_xla_partitioning=cores > 1, **metadata)
    return tessel.ReplicateOptions(md, runtime=runtime, timeout=timeout)


def f32(*values):
    return np.array(values, dtype=np.float32)


def test_partial_shape_merge_is_tfs():
    a = tessel.PartialShape([2, None])
    assert a.rank == 2 and a.dims == [2, None] and not a.is_fully_defined()
    assert a.merge([None, 3]) == tessel.PartialShape([2, 3])
    assert a.merge_with(None) == a
    assert tessel.PartialShape().rank is None and str(tessel.PartialShape()) == "<unknown>"
    assert str(tessel.PartialShape([2, -1])) == "[2,?]"
    assert tessel.PartialShape([2, 3]).to_shape() == (2, 3)
    with pytest.raises(ValueError, match="Dimension 0 in both shapes must be equal, but are 2 and 3"):
        a.merge([3, 3])
    with pytest.raises(ValueError, match="Shapes must be equal rank, but are 2 and 1"):
        a.merge([1])


def test_br_105_01_merges_from_last_to_first_naming_replicas_and_shapes():
    assert tessel.merge_replicated_input_shapes([[None, 3], [2, None], None]) == \
        tessel.PartialShape([2, 3])
    with pytest.raises(tessel.InvalidArgumentError,
                       match=r"replica 0 has shape \[2,4\] and replica 1 has shape \[2,3\].*"
                             r"From merging shape 0 with other shapes"):
        tessel.merge_replicated_input_shapes([[2, 4], [2, 3], [2, 3]])


def test_br_105_02_variable_handles_merge_across_replicas():
    v = tessel.ReplicatedVariable.per_replica("w", [f32(1, 2), f32(3, 4)], handle_shape=[None])
    assert v.dtype == "f32" and not v.is_mirrored_variable
    assert tessel.merge_variable_handles(v, 2) == tessel.HandleShapeAndType([2], "f32")
    m = tessel.ReplicatedVariable.mirrored("m", f32(5))
    assert m.is_mirrored_variable and len(m.values) == 1
    bad = tessel.ReplicatedVariable.per_replica("w", [f32(1, 2), f32(3)])
    with pytest.raises(ValueError, match=r"variable 'w': replica 0 has handle shape \[2\] and "
                                         r"replica 1 has handle shape \[1\]"):
        tessel.merge_variable_handles(bad, 2)
    with pytest.raises(ValueError, match="replica 0's handle has dtype f32 and replica 1's has "
                                         "dtype f64"):
        tessel.merge_variable_handles(
            tessel.ReplicatedVariable.per_replica("w", [f32(1, 2), np.zeros(2, np.float64)]), 2)


def test_br_105_02_resource_handle_data_as_tf_merges_it():
    H = tessel.HandleShapeAndType
    # The last input with handle data wins, unrefined; the inputs below it are refined in place.
    r = tessel.merge_replicated_handle_shapes_and_types([[H([2, None], "f32")],
                                                        [H([None, 3], "f32")], None])
    assert r.source == 1 and r.output == [H([None, 3], "f32")]
    assert r.inputs == [[H([2, 3], "f32")], [H([None, 3], "f32")], None]
    # Conflicts are ignored: another dtype or entry count leaves an input as it was, a shape
    # that does not merge is kept; an input without handle data takes a copy.
    r = tessel.merge_replicated_handle_shapes_and_types(
        [None, [H([5], "f64")], [H([4], "f32")], [], [H([None], "f32")]])
    assert r.inputs == [[H([None], "f32")], [H([5], "f64")], [H([4], "f32")], [],
                        [H([None], "f32")]]
    none = tessel.merge_replicated_handle_shapes_and_types([None])
    assert none.output is None and none.source == -1
    with pytest.raises(tessel.InvalidArgumentError, match="N >= 1"):
        tessel.merge_replicated_handle_shapes_and_types([])


def test_parameter_info_is_tfs_host_argument_layout():
    # TF's rewrite-pass example: A0 B0 C0 A1 B1 C1 E F X Y V W; each replica sees A B C E F X Y V W.
    p = tessel.ParameterInfo(2, 3, num_distributed_args=2, num_broadcast_args=2, num_variables=2,
                             num_retvals_per_replica=1)
    host = ["A0", "B0", "C0", "A1", "B1", "C1", "E", "F", "X", "Y", "V", "W"]
    assert p.num_inputs_from_host() == 12 and p.num_inputs_to_each_replica() == 9
    assert p.first_broadcast_arg_from_host() == 8 and p.num_outputs_to_host() == 2
    assert [host[p.host_input_index(1, a)] for a in range(9)] == \
        ["A1", "B1", "C1", "E", "F", "X", "Y", "V", "W"]
    assert p.kind(4) == tessel.ParameterInfo.Kind.DISTRIBUTED
    assert p.kind(7) == tessel.ParameterInfo.Kind.VARIABLE
    assert p.host_output_index(1, 0) == 1
    with pytest.raises(tessel.InvalidArgumentError, match="argument 9 is out of range"):
        p.kind(9)
    with pytest.raises(tessel.InvalidArgumentError, match="num_replicas must be >= 1; got 0"):
        tessel.ParameterInfo(0, 1)


def test_replicated_output_and_dummy_input():
    outs = tessel.replicated_output(tessel.Tensor(f32(1, 2)), 3)
    assert len(outs) == 3 and all(o.shape == (2,) for o in outs)
    with pytest.raises(ValueError, match="num_replicas must be >= 1; got 0"):
        tessel.replicated_output(tessel.Tensor(f32(1)), 0)
    d = tessel.dummy_input("bf16", (2, 3))
    assert d.dtype == "bf16" and d.shape == (2, 3)
    assert_array_equal(tessel.dummy_input("f32", (2,)).numpy(), [0, 0])
    with pytest.raises(ValueError, match="dtype i32 is not allowed: TPUDummyInput makes f32 or bf16"):
        tessel.dummy_input("i32", (2,))


def test_replicate_runs_every_replica_on_its_own_thread_with_its_inputs(runtime):
    threads = set()
    lock = threading.Lock()

    def step(ctx, inputs):
        with lock:
            threads.add(threading.get_ident())
        assert ctx.num_replicas == 4
        assert ctx.mesh.local_devices()[0].endswith(f"CPU:{ctx.replica_id}")
        x, w = inputs
        return [tessel.multiply(x, w), ctx.all_reduce(x)]

    xs = [f32(r, r) for r in range(4)]
    outs = tessel.replicate(step, [xs], [f32(10, 100)], options=options(runtime, 4))
    assert len(outs) == 4
    for r, (y, total) in enumerate(outs):
        assert_array_equal(tessel.to_host(y), [10 * r, 100 * r])
        assert_array_equal(tessel.to_host(total), [6, 6])
    assert len(threads) == 4 and threading.get_ident() not in threads


def test_inputs_arrive_in_tpu_replicate_order(runtime):
    variables = [tessel.ReplicatedVariable.per_replica("v", [f32(5), f32(6)]),
                 tessel.ReplicatedVariable.mirrored("m", f32(7))]
    opts = options(runtime, 2)
    opts.packed_inputs = [1]
    outs = tessel.replicate(lambda ctx, xs: xs, [[f32(0), f32(1)], [f32(9)]], [f32(100)],
                            variables, [f32(-1)], opts)
    for r in range(2):
        assert [float(tessel.to_host(d)[0]) for d in outs[r]] == [r, 9, 100, 5 + r, 7, -1]


def test_assigned_variables_are_written_back(runtime):
    w = tessel.ReplicatedVariable.per_replica("w", [f32(1, 2), f32(3, 4)])
    m = tessel.ReplicatedVariable.mirrored("m", f32(1, 2),
                                           aggregation=tessel.VariableAggregation.MEAN)
    assert m.aggregation == tessel.VariableAggregation.MEAN

    def step(ctx, inputs):
        for k in range(2):
            ctx.assign_variable(k, tessel.multiply(ctx.read_variable(k), ctx.replica_id + 1.0))
        return [ctx.read_variable(0)]

    outs = tessel.replicate(step, variables=[w, m], options=options(runtime, 2))
    assert_array_equal(tessel.to_host(outs[1][0]), [6, 8])
    assert_array_equal(np.asarray(w.values[0]), [1, 2])
    assert_array_equal(np.asarray(w.values[1]), [6, 8])
    assert_array_equal(np.asarray(m.values[0]), [1.5, 3])  # the mean of {1, 2} and {2, 4}


def test_mirrored_variable_without_aggregation_is_tfs_error(runtime):
    m = tessel.ReplicatedVariable.mirrored("m", f32(1, 2))

    def step(ctx, inputs):
        ctx.assign_variable(0, inputs[0])
        return []

    with pytest.raises(ValueError, match="You must specify an aggregation method to update a "
                                         "MirroredVariable in Replica Context"):
        tessel.replicate(step, variables=[m], options=options(runtime, 2))
    with pytest.raises(ValueError, match="variable 3 is not one of the 1 variables"):
        tessel.replicate(lambda ctx, xs: [ctx.read_variable(3)], variables=[m],
                         options=options(runtime, 1))


def test_collectives(runtime):
    def step(ctx, inputs):
        x = inputs[0]
        return (ctx.all_reduce(x, tessel.ReduceOp.MAX), ctx.all_gather(x, 0),
                ctx.broadcast(x, 1), ctx.all_reduce(x, op=tessel.ReduceOp.MEAN))

    outs = tessel.replicate(step, [[f32(1, 2), f32(3, 4), f32(5, 6)]], options=options(runtime, 3))
    for y in outs:
        assert_array_equal(tessel.to_host(y[0]), [5, 6])
        assert_array_equal(tessel.to_host(y[1]), [1, 2, 3, 4, 5, 6])
        assert_array_equal(tessel.to_host(y[2]), [3, 4])
        assert_allclose(tessel.to_host(y[3]), [3, 4])


def test_spmd_two_replicas_of_two_cores_sharded_matmul(runtime):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(2)]
    w = rng.standard_normal((6, 8)).astype(np.float32)

    def step(ctx, inputs):
        assert ctx.mesh.size == 2
        x = tessel.relayout(inputs[0], tessel.Layout(["unsharded", "core"], ctx.mesh))
        wk = tessel.relayout(inputs[1], tessel.Layout(["core", "unsharded"], ctx.mesh))
        y = tessel.matmul(x, wk)
        return [y, ctx.all_reduce(y)]

    outs = tessel.replicate(step, [xs], [w], options=options(runtime, 2, cores=2))
    for r in range(2):
        assert_allclose(tessel.to_host(outs[r][0]), xs[r] @ w, rtol=1e-5, atol=1e-5)
        assert_allclose(tessel.to_host(outs[r][1]), (xs[0] + xs[1]) @ w, rtol=1e-5, atol=1e-5)
    assert tessel.replica_device_names(options(runtime, 2, cores=2).metadata, runtime) == [
        [f"/job:localhost/replica:0/task:0/device:CPU:{c}" for c in (0, 1)],
        [f"/job:localhost/replica:0/task:0/device:CPU:{c}" for c in (2, 3)]]


def test_device_assignment_places_the_replicas(runtime):
    opts = options(runtime, 2, topology=tessel.Topology.for_hosts(1, 4),
                   device_assignment=[3, 0, 0, 0, 1, 0, 0, 0])
    outs = tessel.replicate(lambda ctx, xs: [ctx.mesh.local_devices()[0] and xs[0]],
                            [[f32(0), f32(1)]], options=opts)
    assert outs[0][0].device(0).name.endswith("CPU:3")
    assert outs[1][0].device(0).name.endswith("CPU:1")


def test_a_replica_raising_stops_the_others_waiting_in_all_reduce(runtime):
    seen = []

    def step(ctx, inputs):
        if ctx.replica_id == 1:
            time.sleep(0.2)
            raise KeyError("boom")
        try:
            return [ctx.all_reduce(inputs[0])]
        except tessel.AbortedError as e:
            seen.append(str(e))
            raise

    start = time.monotonic()
    with pytest.raises(tessel.InternalError, match="replicate: replica 1: KeyError: 'boom'") as info:
        tessel.replicate(step, [[f32(0), f32(1), f32(2)]], options=options(runtime, 3))
    assert time.monotonic() - start < 10  # not the 60 s deadline
    assert isinstance(info.value.__cause__, KeyError)
    assert len(seen) == 2 and all("replica 1 failed" in s for s in seen)


def test_errors_keep_their_codes(runtime):
    def bad_value(ctx, inputs):
        if ctx.replica_id == 0:
            raise ValueError("bad value")
        return inputs

    with pytest.raises(ValueError, match="replica 0: ValueError: bad value") as info:
        tessel.replicate(bad_value, [[f32(0), f32(1)]], options=options(runtime, 2))
    assert isinstance(info.value, tessel.InvalidArgumentError)
    with pytest.raises(tessel.InvalidArgumentError, match="root_replica 7 must lie in"):
        tessel.replicate(lambda ctx, xs: [ctx.broadcast(xs[0], 7)], [[f32(0), f32(1)]],
                         options=options(runtime, 2))
    with pytest.raises(ValueError, match="per-replica input 0 has 1 values; 2 expected"):
        tessel.replicate(lambda ctx, xs: xs, [[f32(0)]], options=options(runtime, 2))
    with pytest.raises(ValueError, match=r"replica 0 has shape \[1\] and replica 1 has shape \[2\]"):
        tessel.replicate(lambda ctx, xs: xs, [[f32(0), f32(1, 2)]], options=options(runtime, 2))
    with pytest.raises(ValueError, match="need 6 devices; the runtime has 4"):
        tessel.replicate(lambda ctx, xs: xs, options=options(runtime, 3, cores=2))
    with pytest.raises(NotImplementedError, match="without use_spmd_for_xla_partitioning"):
        opts = options(runtime, 2, cores=2)
        opts.metadata.use_spmd_for_xla_partitioning = False
        tessel.replicate(lambda ctx, xs: xs, options=opts)
    with pytest.raises(ValueError, match="must return a list of DTensors"):
        tessel.replicate(lambda ctx, xs: 3, [[f32(0)]], options=options(runtime, 1))


def test_a_late_replica_is_a_timeout_naming_it(runtime):
    def step(ctx, inputs):
        if ctx.replica_id == 1:
            time.sleep(1.5)
        return [ctx.all_reduce(inputs[0])]

    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"replica 1 did not reach collective #0 .* within the "
                                           r"call's 300 ms: it is running its computation"):
        tessel.replicate(step, [[f32(0), f32(1)]], options=options(runtime, 2, timeout=0.3))
    assert time.monotonic() - start < 0.3 * 1.1 + 0.15  # the deadline, not the sleep


def test_options_defaults():
    o = tessel.ReplicateOptions()
    assert o.metadata.num_replicas == 0 and o.runtime is None and o.timeout == 0.0
    o.timeout = 1.5
    assert o.timeout == 1.5


def test_a_replica_cannot_call_cross_device_ops(runtime):
    """BR-70-05: CrossDeviceOps belongs to a cross-replica context; a replica's call fails."""
    ops = tessel.NcclAllReduce(runtime=runtime)
    device = "/job:localhost/replica:0/task:0/device:CPU:{}"
    v = tessel.PerReplica([f32(1, 1), f32(2, 2)], [device.format(0), device.format(1)])
    bounded = tessel.CommunicationOptions(timeout_seconds=10)

    def step(ctx, inputs):
        ops.reduce(tessel.ReduceOp.SUM, v, v, bounded)
        return inputs

    with pytest.raises(tessel.FailedPreconditionError,
                       match="reduce must be called in a cross-replica context"):
        tessel.replicate(step, [[f32(0), f32(1)]], options=options(runtime, 2))
    # The controller is a cross-replica context: the same call works there.
    total = ops.reduce(tessel.ReduceOp.SUM, v, v, bounded)
    np.testing.assert_array_equal(np.asarray(total.values[0]), [3, 3])


def test_inert_metadata_is_kept_and_warned_about_once(runtime, capfd):
    """TF's step_marker_location has no counterpart in tessel: kept, and one warning says so."""
    opts = options(runtime, 1)
    opts.metadata.step_marker_location = "STEP_MARK_AT_TOP_LEVEL_WHILE_LOOP"
    for _ in range(2):
        tessel.replicate(lambda ctx, xs: xs, [[f32(1)]], options=opts)
    assert opts.metadata.step_marker_location == "STEP_MARK_AT_TOP_LEVEL_WHILE_LOOP"
    err = capfd.readouterr().err
    assert err.count("step_marker_location=STEP_MARK_AT_TOP_LEVEL_WHILE_LOOP changes nothing") == 1


def _replicate_case(runtime, replicas):
    """[sum of x * w, all_gather(x), this replica's x * w] over `replicas` replicas."""
    xs = [np.arange(4, dtype=np.float32) + 0.5 * (r + 1) for r in range(replicas)]
    w = np.arange(1, 5, dtype=np.float32)

    def step(ctx, inputs):
        y = tessel.multiply(inputs[0], inputs[1])
        return [ctx.all_reduce(y), ctx.all_gather(inputs[0], 0), y]

    opts = tessel.ReplicateOptions(tessel.ReplicateMetadata(replicas), runtime=runtime, timeout=30)
    outs = tessel.replicate(step, [xs], [w], options=opts)
    return xs, w, [[np.asarray(tessel.to_host(d)) for d in replica] for replica in outs]


def test_replicas_over_simulated_clients_equal_one_process():
    # 4 replicas over two clients of 2 devices (make_in_process_cluster, as processes under
    # mpirun): every client makes the same call and runs its own 2 replicas; the others' lists
    # are empty. Checked against NumPy and the same call in one process.
    runtimes = client_runtimes(2)
    results = run_as_clients(runtimes, lambda c: _replicate_case(runtimes[c], 4)[2], timeout=60)
    xs, w, one = _replicate_case(tessel.Runtime(num_cpu_devices=4), 4)
    total = np.sum([x * w for x in xs], axis=0)
    ran = 0
    for c in range(2):
        for r in range(4):
            got = results[c][r]
            if not got:
                continue
            ran += 1
            assert_array_equal(got[0], total)
            assert_array_equal(got[1], np.concatenate(xs))
            assert_array_equal(got[2], xs[r] * w)
            for k in range(3):
                assert_array_equal(got[k], one[r][k])
    assert ran == 4


AGGREGATIONS = [("sum", tessel.VariableAggregation.SUM), ("mean", tessel.VariableAggregation.MEAN),
                ("first", tessel.VariableAggregation.ONLY_FIRST_REPLICA)]


def _mirrored_variables(w):
    return [tessel.ReplicatedVariable.mirrored(name, w.copy(), aggregation=aggregation)
            for name, aggregation in AGGREGATIONS]


def _update_mirrored(runtime, replicas, variables, skipping=-1):
    """Replica r (but `skipping`) sets every variable to its value * x_r + r after an
    all-reduce; the write-back combines them by the variables' aggregations."""
    xs = [np.arange(4, dtype=np.float32) + 0.5 * (r + 1) for r in range(replicas)]

    def step(ctx, inputs):
        total = ctx.all_reduce(inputs[0])
        if ctx.replica_id != skipping:
            for k in range(len(variables)):
                ctx.assign_variable(k, tessel.add(tessel.multiply(ctx.read_variable(k), inputs[0]),
                                                  float(ctx.replica_id)))
        return [total]

    opts = tessel.ReplicateOptions(tessel.ReplicateMetadata(replicas), runtime=runtime, timeout=30)
    tessel.replicate(step, [xs], variables=variables, options=opts)
    return xs


def test_mirrored_variables_over_simulated_clients_equal_one_process():
    # Each client holds its own copy of the variables, as a process does; every client ends
    # with the one-process values: NumPy's sum, mean and replica 0's value.
    w = np.arange(1, 5, dtype=np.float32)
    runtimes = client_runtimes(2)
    copies = [_mirrored_variables(w) for _ in runtimes]
    run_as_clients(runtimes, lambda c: _update_mirrored(runtimes[c], 4, copies[c]), timeout=60)
    one = _mirrored_variables(w)
    xs = _update_mirrored(tessel.Runtime(num_cpu_devices=4), 4, one)
    values = np.stack([x * w + r for r, x in enumerate(xs)])
    want = [values.sum(axis=0), values.sum(axis=0) / 4, values[0]]
    for variables in copies:
        for k, v in enumerate(variables):
            assert_array_equal(np.asarray(v.values[0]), want[k])
            assert_array_equal(np.asarray(v.values[0]), np.asarray(one[k].values[0]))


def test_mirrored_variable_a_replica_did_not_assign_is_refused_on_every_client():
    w = np.arange(1, 5, dtype=np.float32)
    runtimes = client_runtimes(2)
    copies = [_mirrored_variables(w) for _ in runtimes]

    def client(c):
        with pytest.raises(tessel.InvalidArgumentError,
                           match="variable 'sum' is mirrored: replica 0 assigned it and replica 2 "
                                 "did not"):
            _update_mirrored(runtimes[c], 4, copies[c], skipping=2)

    run_as_clients(runtimes, client, timeout=60)
    for variables in copies:
        for v in variables:
            assert_array_equal(np.asarray(v.values[0]), w)  # nothing written back


def _compiled_case(runtime, replicas):
    """compile() and run [sum of x * w, all_gather(x), broadcast of the last x]."""
    xs = [np.arange(4, dtype=np.float32) + 0.5 * (r + 1) for r in range(replicas)]
    w = np.arange(1, 5, dtype=np.float32)

    def step(ctx, inputs):
        return [ctx.all_reduce(tessel.multiply(inputs[0], inputs[1])),
                ctx.all_gather(inputs[0], 0), ctx.broadcast(inputs[0], replicas - 1)]

    opts = tessel.CompileOptions(tessel.ReplicateMetadata(replicas), runtime=runtime, timeout=30)
    r = tessel.compile(tessel.Function("case", step),
                       [tessel.InputSpec((4,)), tessel.InputSpec((4,))], opts)
    assert r.ok(), r.status_string()
    outs = r.computation.run([xs], [w])
    return xs, w, [[np.asarray(tessel.to_host(d)) for d in replica] for replica in outs]


def test_compile_over_simulated_clients_equals_one_process():
    runtimes = client_runtimes(2)
    results = run_as_clients(runtimes, lambda c: _compiled_case(runtimes[c], 4)[2], timeout=60)
    xs, w, one = _compiled_case(tessel.Runtime(num_cpu_devices=4), 4)
    want = [np.sum([x * w for x in xs], axis=0), np.concatenate(xs), xs[-1]]
    ran = 0
    for c in range(2):
        for r in range(4):
            got = results[c][r]
            if not got:
                continue
            ran += 1
            for k in range(3):
                assert_array_equal(got[k], want[k])
                assert_array_equal(got[k], one[r][k])
    assert ran == 4


def test_compile_with_an_assignment_naming_a_missing_task_fails():
    runtimes = client_runtimes(2)
    md = tessel.ReplicateMetadata(2, topology=tessel.Topology.for_hosts(3, 2),
                                  device_assignment=[0, 0, 0, 0, 1, 2, 0, 0])
    r = tessel.compile(tessel.Function("identity", lambda ctx, xs: [xs[0]]),
                       [tessel.InputSpec((2,))],
                       tessel.CompileOptions(md, runtime=runtimes[0]))
    assert not r.ok()
    assert r.code == tessel.ErrorCode.INVALID_ARGUMENT, r.status_string()
    assert ("replica 1 logical core 0 is assigned to /job:worker/replica:0/task:2/device:CPU:1, "
            "which is not a device of this job") in r.status_string()
    for rt in runtimes:
        tessel.set_cluster(rt, None)


def test_assignment_naming_a_missing_host_device_is_refused():
    clusters = tessel.make_in_process_cluster(2)
    rt = tessel.Runtime(num_cpu_devices=2, job="worker", task=0)
    tessel.set_cluster(rt, clusters[0])
    md = tessel.ReplicateMetadata(2, topology=tessel.Topology.for_hosts(2, 3),
                                  device_assignment=[0, 0, 0, 0, 2, 1, 0, 0])
    with pytest.raises(tessel.InvalidArgumentError,
                       match="replica 1 logical core 0 is assigned to "
                             "/job:worker/replica:0/task:1/device:CPU:2, which is not a device of "
                             "this job"):
        tessel.replica_device_names(md, runtime=rt)
    tessel.set_cluster(rt, None)
