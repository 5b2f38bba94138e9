"""relayout / relayout_like / execute_relayout on the global runtime's devices, and the planner
(plan_relayout: RelayoutPlan, RelayoutStep, Box)."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import tessel

F32 = 4


@pytest.fixture
def mesh_x4():
    return tessel.create_mesh([("x", 4)])


@pytest.fixture
def mesh_xy():
    return tessel.create_mesh([("x", 2), ("y", 2)])


def layout(specs, mesh, partial=()):
    out = tessel.Layout(specs, mesh)
    return out.with_partial(list(partial)) if partial else out


def matrix(rows, cols, dtype=np.float32):
    return np.arange(rows * cols, dtype=dtype).reshape(rows, cols)


def kinds(plan):
    return [step.kind for step in plan.steps]


# ---- relayout -----------------------------------------------------------------------------


def test_rows_to_columns(mesh_x4):
    a = matrix(8, 8)
    rows = tessel.copy_to_mesh(a, layout(["x", "unsharded"], mesh_x4))
    cols = tessel.relayout(rows, layout(["unsharded", "x"], mesh_x4))
    assert isinstance(cols, tessel.DTensor)
    assert cols.layout == layout(["unsharded", "x"], mesh_x4)
    assert cols.shape == (8, 8)
    for i, part in enumerate(tessel.unpack(cols)):
        assert_array_equal(part, a[:, 2 * i:2 * i + 2])
    assert_array_equal(tessel.to_host(cols), a)
    # The input is untouched.
    for i, part in enumerate(tessel.unpack(rows)):
        assert_array_equal(part, a[2 * i:2 * i + 2])


def test_rows_to_replicated(mesh_x4):
    a = matrix(8, 3)
    rows = tessel.copy_to_mesh(a, layout(["x", "unsharded"], mesh_x4))
    full = tessel.relayout(rows, layout(["unsharded", "unsharded"], mesh_x4))
    parts = tessel.unpack(full)
    assert len(parts) == 4
    for part in parts:
        assert_array_equal(part, a)


def test_uneven_rows_to_replicated_and_back(mesh_x4):
    a = matrix(10, 2)
    rows = tessel.copy_to_mesh(a, layout(["x", "unsharded"], mesh_x4))
    full = tessel.relayout(rows, layout(["unsharded", "unsharded"], mesh_x4))
    for part in tessel.unpack(full):
        assert_array_equal(part, a)
    again = tessel.relayout(full, layout(["x", "unsharded"], mesh_x4))
    expected = [a[0:3], a[3:6], a[6:9], a[9:10]]
    for part, block in zip(tessel.unpack(again), expected):
        assert_array_equal(part, block)


def test_swapped_mesh_dims(mesh_xy):
    a = matrix(4, 4)
    xy = tessel.copy_to_mesh(a, layout(["x", "y"], mesh_xy))
    yx = tessel.relayout(xy, layout(["y", "x"], mesh_xy))
    for i, part in enumerate(tessel.unpack(yx)):
        x, y = divmod(i, 2)
        assert_array_equal(part, a[2 * y:2 * y + 2, 2 * x:2 * x + 2])
    assert_array_equal(tessel.to_host(yx), a)


def test_partial_sum_all_reduce_and_reduce_scatter(mesh_x4):
    a = matrix(8, 2)
    partial = layout(["unsharded", "unsharded"], mesh_x4, [("x", "sum")])
    parts = [a * (i + 1) for i in range(4)]  # pending sum: 10 * a
    d = tessel.pack(parts, partial)
    assert_array_equal(tessel.to_host(d), 10 * a)
    replicated = tessel.relayout(d, layout(["unsharded", "unsharded"], mesh_x4))
    for part in tessel.unpack(replicated):
        assert_array_equal(part, 10 * a)
    scattered = tessel.relayout(d, layout(["x", "unsharded"], mesh_x4))
    for i, part in enumerate(tessel.unpack(scattered)):
        assert_array_equal(part, 10 * a[2 * i:2 * i + 2])


def test_relayout_of_a_host_value_is_copy_to_mesh(mesh_x4):
    a = matrix(4, 2)
    target = layout(["x", "unsharded"], mesh_x4)
    for value in [a, tessel.tensor(a)]:
        d = tessel.relayout(value, target)
        assert d.layout == target
        for i, part in enumerate(tessel.unpack(d)):
            assert_array_equal(part, a[i:i + 1])


def test_relayout_to_the_same_layout_returns_the_input(mesh_x4):
    rows = layout(["x", "unsharded"], mesh_x4)
    d = tessel.copy_to_mesh(matrix(4, 4), rows)
    same = tessel.relayout(d, rows)
    assert np.shares_memory(tessel.unpack(same)[0], tessel.unpack(d)[0])
    moved = tessel.relayout(d, layout(["unsharded", "x"], mesh_x4))
    assert not np.shares_memory(tessel.unpack(moved)[0], tessel.unpack(d)[0])


def test_relayout_like(mesh_x4, mesh_xy):
    a = matrix(4, 4)
    d = tessel.copy_to_mesh(a, layout(["x", "unsharded"], mesh_x4))
    like = tessel.copy_to_mesh(np.zeros((2, 2), np.int32), layout(["unsharded", "x"], mesh_x4))
    out = tessel.relayout_like(d, like)
    assert out.layout == like.layout
    assert out.shape == (4, 4) and out.dtype == "f32"
    assert_array_equal(tessel.to_host(out), a)
    other = tessel.copy_to_mesh(np.zeros((2, 2)), layout(["y", "x"], mesh_xy))
    moved = tessel.relayout_like(d, other, timeout_seconds=30)
    assert moved.layout == layout(["y", "x"], mesh_xy)
    assert_array_equal(tessel.to_host(moved), a)


def test_execute_relayout(mesh_x4):
    a = matrix(8, 4)
    rows = layout(["x", "unsharded"], mesh_x4)
    cols = layout(["unsharded", "x"], mesh_x4)
    d = tessel.copy_to_mesh(a, rows)
    plan = tessel.plan_relayout(d.shape, rows, cols, d.dtype)
    out = tessel.execute_relayout(d, plan, timeout_seconds=30)
    assert out.layout == cols
    assert_array_equal(tessel.to_host(out), a)
    wrong = tessel.plan_relayout((8, 8), rows, cols)
    with pytest.raises(ValueError):
        tessel.execute_relayout(d, wrong)


def test_relayout_errors(mesh_x4):
    d = tessel.copy_to_mesh(matrix(4, 4), layout(["x", "unsharded"], mesh_x4))
    with pytest.raises(ValueError, match="Attempted to relayout to a different global shape"):
        tessel.relayout(d, layout(["x"], mesh_x4))
    with pytest.raises(ValueError, match="timeout_seconds is NaN"):
        tessel.relayout(d, layout(["unsharded", "x"], mesh_x4), timeout_seconds=float("nan"))
    with pytest.raises(TypeError):
        tessel.relayout(d, "x,unsharded")


def test_relayout_timeout_scope_sets_this_threads_default(mesh_x4):
    import threading
    assert tessel.default_relayout_timeout() == 60.0
    assert tessel.scoped_relayout_timeout() is None
    with tessel.RelayoutTimeoutScope(0.5) as outer:
        assert outer.timeout_seconds == 0.5 and tessel.default_relayout_timeout() == 0.5
        assert tessel.scoped_relayout_timeout() == 0.5
        with tessel.RelayoutTimeoutScope(2):
            assert tessel.default_relayout_timeout() == 2.0
        assert tessel.default_relayout_timeout() == 0.5
        seen = []
        other = threading.Thread(target=lambda: seen.append(tessel.default_relayout_timeout()))
        other.start()
        other.join()
        assert seen == [60.0]  # another thread keeps its own
        # A relayout under the scope still works within its budget.
        d = tessel.copy_to_mesh(matrix(4, 4), layout(["x", "unsharded"], mesh_x4))
        assert_array_equal(tessel.to_host(tessel.relayout(d, layout(["unsharded", "x"], mesh_x4))),
                           matrix(4, 4))
    assert tessel.default_relayout_timeout() == 60.0
    assert tessel.scoped_relayout_timeout() is None
    with pytest.raises(ValueError, match="a relayout timeout must be positive, got 0 ms"):
        with tessel.RelayoutTimeoutScope(0):
            pass
    with pytest.raises(ValueError, match="timeout_seconds is NaN"):
        tessel.RelayoutTimeoutScope(float("nan"))
    assert tessel.default_relayout_timeout() == 60.0


# ---- plan_relayout ------------------------------------------------------------------------


def test_plan_all_gather(mesh_x4):
    plan = tessel.plan_relayout((8, 4), layout(["x", "unsharded"], mesh_x4),
                                layout(["unsharded", "unsharded"], mesh_x4))
    assert isinstance(plan, tessel.RelayoutPlan)
    assert plan.shape == (8, 4)
    assert plan.dtype == "f32"
    assert plan.from_layout == layout(["x", "unsharded"], mesh_x4)
    assert plan.to_layout == layout(["unsharded", "unsharded"], mesh_x4)
    assert kinds(plan) == ["all_gather"]
    step = plan.steps[0]
    assert isinstance(step, tessel.RelayoutStep)
    assert step.mesh_dims == ["x"]
    assert step.tensor_dims == [0]
    assert step.from_layout == plan.from_layout and step.to_layout == plan.to_layout
    assert step.bytes_per_device == 3 * 2 * 4 * F32  # a 2x4 block to 3 peers
    assert step.bytes_total == 4 * step.bytes_per_device
    assert step.peak_bytes == 8 * 4 * F32
    assert plan.bytes_per_device == step.bytes_per_device
    assert plan.bytes_total == step.bytes_total
    assert plan.peak_bytes == step.peak_bytes
    assert len(step.participants) == 4
    assert step.participants[0].endswith("CPU:0")
    assert len(step.transfers) > 0
    for src, dst, box in step.transfers:
        assert 0 <= src < 4 and 0 <= dst < 4
        assert isinstance(box, tessel.Box)
        assert box.extents == [2, 4]


def test_plan_local_slice(mesh_x4):
    plan = tessel.plan_relayout((8, 4), layout(["unsharded", "unsharded"], mesh_x4),
                                layout(["x", "unsharded"], mesh_x4))
    assert kinds(plan) == ["local_slice"]
    assert plan.bytes_per_device == 0
    assert plan.bytes_total == 0
    assert plan.peak_bytes == 2 * 4 * F32
    assert plan.steps[0].transfers == []


def test_plan_all_to_all(mesh_x4):
    plan = tessel.plan_relayout((4096, 4096), layout(["x", "unsharded"], mesh_x4),
                                layout(["unsharded", "x"], mesh_x4))
    assert kinds(plan) == ["all_to_all"]
    step = plan.steps[0]
    assert step.mesh_dims == ["x"]
    assert step.tensor_dims == [0, 1]
    assert step.bytes_per_device == 12 << 20  # three quarters of a 16 MiB shard
    assert step.bytes_total == 4 * (12 << 20)
    assert plan.peak_bytes == 16 << 20
    assert "1. all_to_all over x on dims 0->1: 12.0 MiB sent per device" in str(plan)
    assert str(step).startswith("all_to_all over x on dims 0->1: 12.0 MiB sent per device")


def test_plan_all_reduce_and_reduce_scatter(mesh_x4):
    partial = layout(["unsharded", "unsharded"], mesh_x4, [("x", "sum")])
    plan = tessel.plan_relayout((8, 2), partial, layout(["unsharded", "unsharded"], mesh_x4))
    assert kinds(plan) == ["all_reduce"]
    assert plan.steps[0].mesh_dims == ["x"]
    assert plan.bytes_per_device > 0
    plan = tessel.plan_relayout((8, 2), partial, layout(["x", "unsharded"], mesh_x4))
    assert kinds(plan) == ["reduce_scatter"]
    assert plan.steps[0].mesh_dims == ["x"]
    assert plan.steps[0].tensor_dims == [0]
    assert plan.peak_bytes == 2 * 2 * F32


def test_plan_local_partial(mesh_x4):
    plan = tessel.plan_relayout((8,), layout(["unsharded"], mesh_x4),
                                layout(["unsharded"], mesh_x4, [("x", "sum")]))
    assert kinds(plan) == ["local_partial"]
    assert plan.bytes_per_device == 0


def test_plan_send_recv_moves_only_the_off_diagonal_blocks(mesh_xy):
    plan = tessel.plan_relayout((4, 4), layout(["x", "y"], mesh_xy), layout(["y", "x"], mesh_xy))
    assert kinds(plan) == ["send_recv"]
    step = plan.steps[0]
    moved = [(src, dst, box) for src, dst, box in step.transfers if src != dst]
    assert len(moved) == 2  # (0,1) <-> (1,0); the diagonal stays
    for _, _, box in moved:
        assert box.extents == [2, 2]
    assert plan.bytes_per_device == 2 * 2 * F32
    assert plan.bytes_total == 2 * 2 * 2 * F32
    assert "(2 blocks move)" in str(step)


def test_plan_send_recv_to_another_mesh(mesh_x4):
    two = tessel.Mesh.create_on_devices([("x", 2)], ["CPU:2", "CPU:3"])
    plan = tessel.plan_relayout((8,), layout(["x"], mesh_x4), layout(["x"], two))
    assert kinds(plan) == ["send_recv"]
    assert len(plan.steps[0].participants) == 4
    assert sum(src != dst for src, dst, _ in plan.steps[0].transfers) == 3
    assert "|x=4| -> |x=2|" in str(plan)


def test_plan_prints_a_header_then_one_line_per_step(mesh_xy):
    plan = tessel.plan_relayout((4, 4), layout(["x", "unsharded"], mesh_xy),
                                layout(["y", "x"], mesh_xy))
    text = str(plan)
    assert text == plan.to_string()
    lines = text.split("\n")
    assert len(lines) == len(plan.steps) + 1
    assert lines[0].startswith("relayout [4,4] f32: x,unsharded -> y,x on |x=2|y=2|")
    for i, (line, step) in enumerate(zip(lines[1:], plan.steps)):
        assert line == f"  {i + 1}. {step}"
    assert repr(plan).startswith("<RelayoutPlan relayout [4,4]")


def test_plan_same_layout_has_no_steps(mesh_x4):
    rows = layout(["x", "unsharded"], mesh_x4)
    plan = tessel.plan_relayout((8, 8), rows, rows)
    assert plan.steps == []
    assert plan.bytes_per_device == plan.bytes_total == plan.peak_bytes == 0
    assert len(str(plan).split("\n")) == 1


def test_plan_dtype_and_match(mesh_xy):
    f32 = tessel.plan_relayout((4, 4), layout(["x", "y"], mesh_xy),
                               layout(["unsharded", "unsharded"], mesh_xy))
    f64 = tessel.plan_relayout((4, 4), layout(["x", "y"], mesh_xy),
                               layout(["unsharded", "unsharded"], mesh_xy), dtype=np.float64)
    assert f64.dtype == "f64"
    assert f64.bytes_total == 2 * f32.bytes_total
    plan = tessel.plan_relayout((4, 4), layout(["x", "y"], mesh_xy),
                                layout([tessel.MATCH, "unsharded"], mesh_xy))
    assert plan.to_layout == layout(["x", "unsharded"], mesh_xy)
    assert kinds(plan) == ["all_gather"]
    assert plan.steps[0].mesh_dims == ["y"]


def test_plan_errors(mesh_x4):
    with pytest.raises(ValueError, match="Attempted to relayout to a different global shape"):
        tessel.plan_relayout((8, 8), layout(["x", "unsharded"], mesh_x4), layout(["x"], mesh_x4))
    with pytest.raises(ValueError, match="cannot turn a pending sum over x"):
        tessel.plan_relayout((8,), layout(["unsharded"], mesh_x4, [("x", "sum")]),
                             layout(["unsharded"], mesh_x4, [("x", "max")]))


# ---- Box ----------------------------------------------------------------------------------


def test_box():
    a = tessel.Box([0, 4], [4, 6])
    b = tessel.Box([2, 0], [4, 8])
    assert a.offsets == [0, 4] and a.extents == [4, 6]
    assert a.rank == 2 and a.num_elements == 24 and not a.empty()
    assert str(a) == "[0:4, 4:10]"
    assert tessel.intersect(a, b) == tessel.Box([2, 4], [2, 4])
    assert a.contains(tessel.Box([1, 5], [2, 2]))
    assert not a.contains(b)
    assert tessel.Box([0], [0]).empty()
    with pytest.raises(ValueError):
        tessel.intersect(a, tessel.Box([0], [1]))


@pytest.mark.parametrize("on_gpu", [False, True])
def test_copy_box_moves_the_region_between_blocks(on_gpu):
    # The global array is arange(10 * 12); src holds rows [3, 6), dst columns [4, 8).
    glob = np.arange(120, dtype=np.float32).reshape(10, 12)
    src = tessel.Tensor.from_numpy(glob[3:6].copy())
    dst = tessel.Tensor.from_numpy(np.full((10, 4), -1, np.float32))
    if on_gpu:  # both in one simulated GPU's memory: the copy stays on the device
        gpu = tessel.Runtime(num_cpu_devices=1, num_simulated_gpu_devices=1).gpu_devices()[0]
        src_dev, dst_dev = gpu.allocate([3, 12], "f32"), gpu.allocate([10, 4], "f32")
        src_dev.copy_from(src)
        dst_dev.copy_from(dst)
        src, dst = src_dev, dst_dev
    tessel.copy_box(src, [3, 0], dst, [0, 4], tessel.Box([3, 4], [3, 4]))
    want = np.full((10, 4), -1, np.float32)
    want[3:6] = glob[3:6, 4:8]
    np.testing.assert_array_equal(dst.to_host().numpy(), want)
    with pytest.raises(tessel.InvalidArgumentError, match="copy_box"):
        tessel.copy_box(src, [3, 0], dst, [0, 4], tessel.Box([0, 4], [6, 4]))  # rows src lacks
    with pytest.raises(TypeError):  # dst is written in place: a numpy array is not converted
        tessel.copy_box(src, [3, 0], want, [0, 4], tessel.Box([3, 4], [3, 4]))
