"""The DTensor API with TF's tf.experimental.dtensor names: pack/unpack, copy_to_mesh/to_host,
layouts, default_mesh, call_with_layout, device_name, visualize."""

import gc
import threading

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import tessel

CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"


@pytest.fixture
def mesh_x4():
    return tessel.create_mesh([("x", 4)])


@pytest.fixture
def mesh_xy():
    return tessel.create_mesh([("x", 2), ("y", 2)])


def layout(specs, mesh):
    return tessel.Layout(specs, mesh)


def matrix(rows, cols, dtype=np.float32):
    return np.arange(rows * cols, dtype=dtype).reshape(rows, cols)


def test_names_follow_tensorflow():
    for name in ["DTensor", "pack", "unpack", "fetch_layout", "check_layout", "is_dtensor",
                 "copy_to_mesh", "to_host", "full_tensor", "default_mesh", "get_default_mesh",
                 "call_with_layout", "device_name", "visualize", "relayout", "relayout_like",
                 "execute_relayout", "plan_relayout", "RelayoutPlan", "RelayoutStep", "Box"]:
        assert hasattr(tessel, name), name
        assert name in tessel.__all__, name


# ---- pack / unpack ------------------------------------------------------------------------


def test_pack_unpack_round_trip(mesh_x4):
    parts = [np.full((2, 3), i, np.float32) for i in range(4)]
    rows = layout(["x", "unsharded"], mesh_x4)
    d = tessel.pack(parts, rows)
    assert isinstance(d, tessel.DTensor)
    assert d.shape == (8, 3)
    assert d.dtype == "f32"
    assert d.rank == 2
    assert d.nbytes == 8 * 3 * 4
    assert d.layout == rows
    assert d.num_components == 4
    out = tessel.unpack(d)
    assert len(out) == 4
    for i, part in enumerate(out):
        assert isinstance(part, np.ndarray)
        assert part.dtype == np.float32
        assert_array_equal(part, parts[i])
    assert_array_equal(tessel.to_host(d), np.concatenate(parts))


def test_pack_uneven_rows(mesh_x4):
    a = matrix(10, 6)
    parts = [a[0:3], a[3:6], a[6:9], a[9:10]]  # chunk semantics: 3, 3, 3, 1
    d = tessel.pack(parts, layout(["x", "unsharded"], mesh_x4))
    assert d.shape == (10, 6)
    assert [c.shape for c in d.components] == [(3, 6), (3, 6), (3, 6), (1, 6)]
    for part, expected in zip(tessel.unpack(d), parts):
        assert_array_equal(part, expected)
    assert_array_equal(tessel.to_host(d), a)


def test_pack_accepts_tensors_lists_and_int_dtypes(mesh_x4):
    replicated = layout(["unsharded"], mesh_x4)
    d = tessel.pack([tessel.tensor(np.array([1, 2], np.int64))] * 4, replicated)
    assert d.dtype == "i64"
    assert_array_equal(tessel.to_host(d), [1, 2])
    d = tessel.pack([[1.5, 2.5]] * 4, replicated)  # nested lists: numpy's float64
    assert d.dtype == "f64"
    assert_array_equal(tessel.to_host(d), [1.5, 2.5])
    d = tessel.pack(tuple(np.array([i], np.int32) for i in range(4)), layout(["x"], mesh_x4))
    assert_array_equal(tessel.to_host(d), [0, 1, 2, 3])


def test_pack_copies_its_inputs(mesh_x4):
    parts = [np.full((1,), i, np.float32) for i in range(4)]
    d = tessel.pack(parts, layout(["x"], mesh_x4))
    parts[0][0] = 99
    assert_array_equal(tessel.to_host(d), [0, 1, 2, 3])


def test_unpack_returns_read_only_views_of_the_components(mesh_x4):
    d = tessel.copy_to_mesh(matrix(8, 2), layout(["x", "unsharded"], mesh_x4))
    first, second = tessel.unpack(d), tessel.unpack(d)
    for a, b in zip(first, second):
        assert np.shares_memory(a, b)  # both views of the same component storage
        assert not a.flags.writeable
        assert isinstance(a.base, tessel.Tensor)
        assert a.base.shares_storage_with(b.base)
    assert first[0].base.shares_storage_with(d.component(0))
    with pytest.raises(ValueError):
        first[0][0, 0] = 5
    # The views keep the storage alive after the DTensor is gone.
    del d, second
    gc.collect()
    assert_array_equal(first[3], matrix(8, 2)[6:8])


def test_components_are_tensors_on_the_mesh_devices(mesh_x4):
    d = tessel.copy_to_mesh(matrix(4, 2), layout(["x", "unsharded"], mesh_x4))
    comps = d.components
    assert all(isinstance(c, tessel.Tensor) for c in comps)
    assert_array_equal(d.component(2).numpy(), [[4, 5]])
    assert comps[2].shares_storage_with(d.component(2))
    assert [d.device(i).name for i in range(4)] == [CPU.format(i) for i in range(4)]
    with pytest.raises(IndexError, match="component index 4"):
        d.component(4)


def test_unpack_bf16_comes_back_as_float32(mesh_x4):
    d = tessel.copy_to_mesh(tessel.tensor(np.array([1.0, 2.5, -3.0, 4.0], np.float32), "bf16"),
                            layout(["x"], mesh_x4))
    assert d.dtype == "bf16"
    parts = tessel.unpack(d)
    assert parts[1].dtype == np.float32
    assert_array_equal(np.concatenate(parts), [1.0, 2.5, -3.0, 4.0])
    assert_array_equal(tessel.to_host(d), [1.0, 2.5, -3.0, 4.0])


def test_pack_errors_carry_tensorflow_texts(mesh_x4):
    rows = layout(["x", "unsharded"], mesh_x4)
    with pytest.raises(ValueError, match="expected 4 inputs to DTensorPack, but got 3"):
        tessel.pack([np.zeros((1, 2), np.float32)] * 3, rows)
    with pytest.raises(tessel.InvalidArgumentError,
                       match="The dtensor device /job:localhost/replica:0/task:0/device:CUSTOM:0"):
        tessel.pack([np.zeros((1, 2), np.float32)] * 3, rows)
    with pytest.raises(ValueError, match="DTensorPack requires 1 or more inputs"):
        tessel.pack([], rows)
    with pytest.raises(ValueError, match="Packed layout should have the same rank"):
        tessel.pack([np.zeros((2,), np.float32)] * 4, rows)
    with pytest.raises(ValueError, match="Components of a PackedTensor must all have the same"):
        tessel.pack([np.zeros((1, 2), np.float32)] * 3 + [np.zeros((1, 2), np.int32)], rows)
    with pytest.raises(ValueError, match="component 0"):  # 9 rows are chunks of 3, 3, 3, 0
        tessel.pack([np.zeros((2, 2), np.float32)] * 3 + [np.zeros((3, 2), np.float32)], rows)
    with pytest.raises(TypeError):
        tessel.pack(3, rows)
    # Any sequence of components, a stacked array included (TF iterates it too).
    assert tessel.pack(np.zeros((4, 1, 2)), rows).shape == (4, 2)


def test_fetch_layout_and_check_layout(mesh_x4):
    rows = layout(["x", "unsharded"], mesh_x4)
    d = tessel.copy_to_mesh(matrix(4, 4), rows)
    assert tessel.fetch_layout(d) == rows
    tessel.check_layout(d, rows)
    with pytest.raises(ValueError, match="did not match expected layout") as info:
        tessel.check_layout(d, layout(["unsharded", "x"], mesh_x4))
    assert isinstance(info.value, tessel.InvalidArgumentError)
    assert "Layout of tensor: " + rows.to_string() in str(info.value)


def test_is_dtensor(mesh_x4):
    d = tessel.copy_to_mesh(np.zeros(4, np.float32), layout(["x"], mesh_x4))
    assert tessel.is_dtensor(d)
    for value in [[1, 2], 3, np.zeros(4), tessel.tensor([1.0]), None, "x", d.layout,
                  tessel.unpack(d)]:
        assert not tessel.is_dtensor(value), value


# ---- copy_to_mesh / to_host ---------------------------------------------------------------


@pytest.mark.parametrize("specs", [["x", "unsharded"], ["unsharded", "x"],
                                   ["unsharded", "unsharded"]])
def test_copy_to_mesh_round_trip_1d(mesh_x4, specs):
    a = matrix(8, 4)
    d = tessel.copy_to_mesh(a, layout(specs, mesh_x4))
    assert d.shape == (8, 4)
    parts = tessel.unpack(d)
    for i, part in enumerate(parts):
        if specs[0] == "x":
            assert_array_equal(part, a[2 * i:2 * i + 2])
        elif specs[1] == "x":
            assert_array_equal(part, a[:, i:i + 1])
        else:
            assert_array_equal(part, a)
    back = tessel.to_host(d)
    assert isinstance(back, np.ndarray) and back.dtype == np.float32
    assert_array_equal(back, a)
    assert_array_equal(tessel.full_tensor(d), a)


@pytest.mark.parametrize("specs", [["x", "y"], ["y", "x"], ["x", "unsharded"],
                                   ["unsharded", "y"], ["unsharded", "unsharded"]])
def test_copy_to_mesh_round_trip_2d(mesh_xy, specs):
    a = matrix(4, 6, np.int64)
    d = tessel.copy_to_mesh(a, layout(specs, mesh_xy))
    assert d.dtype == "i64"
    for i, part in enumerate(tessel.unpack(d)):  # local device order: (x, y) row-major
        coords = {"x": i // 2, "y": i % 2}
        block = a
        for axis, spec in enumerate(specs):
            if spec != "unsharded":
                size = a.shape[axis] // 2
                start = coords[spec] * size
                block = np.take(block, range(start, start + size), axis=axis)
        assert_array_equal(part, block)
    assert_array_equal(tessel.to_host(d), a)


def test_copy_to_mesh_uneven_and_from_tensor(mesh_x4):
    a = matrix(10, 3)
    d = tessel.copy_to_mesh(tessel.tensor(a), layout(["x", "unsharded"], mesh_x4))
    assert [p.shape[0] for p in tessel.unpack(d)] == [3, 3, 3, 1]
    assert_array_equal(tessel.to_host(d), a)


def test_copy_to_mesh_partial_sum_keeps_the_value(mesh_x4):
    partial = layout(["unsharded"], mesh_x4).with_partial([("x", "sum")])
    d = tessel.copy_to_mesh(np.array([1.0, 2.0], np.float32), partial)
    parts = tessel.unpack(d)
    assert_array_equal(parts[0], [1, 2])
    for part in parts[1:]:
        assert_array_equal(part, [0, 0])  # the identity of sum
    assert_array_equal(tessel.to_host(d), [1, 2])


def test_copy_to_mesh_errors(mesh_x4):
    with pytest.raises(ValueError, match="has rank 1 but layout"):
        tessel.copy_to_mesh(np.zeros(4, np.float32), layout(["x", "unsharded"], mesh_x4))
    with pytest.raises(ValueError, match="unknown dtype name 'object'"):
        tessel.copy_to_mesh(object(), layout(["x"], mesh_x4))


def test_copy_to_mesh_onto_a_tpu_mesh_is_tfs_unknown_device():
    # TF on a host without TPUs: the eager copy onto the mesh's devices fails with
    # InvalidArgumentError "<device> unknown device."; the TPU mesh's host mesh holds the tensor.
    tpu = tessel.Mesh.from_string(
        "|x=2|0,1|0,1|/job:localhost/replica:0/task:0/device:TPU:0,"
        "/job:localhost/replica:0/task:0/device:TPU:1")
    for target in (tessel.Layout(["x"], tpu), tessel.Layout.replicated(tpu, 1)):
        with pytest.raises(tessel.InvalidArgumentError,
                           match="/job:localhost/replica:0/task:0/device:TPU:0 unknown device."):
            tessel.copy_to_mesh(np.arange(4, dtype=np.float32), target)
    with pytest.raises(tessel.InvalidArgumentError, match="TPU:0 unknown device."):
        tessel.pack([np.zeros(2, np.float32)] * 2, tessel.Layout(["x"], tpu))
    d = tessel.copy_to_mesh(np.arange(4, dtype=np.float32), tessel.Layout(["x"], tpu.host_mesh()))
    assert_array_equal(tessel.to_host(d), np.arange(4, dtype=np.float32))


def test_dtensor_on_its_own_runtime_keeps_the_runtime_alive():
    rt = tessel.Runtime(num_cpu_devices=2)
    mesh = tessel.create_mesh([("x", 2)])
    d = tessel.copy_to_mesh(np.arange(4, dtype=np.float32), layout(["x"], mesh), runtime=rt)
    assert d.runtime is rt
    del rt
    gc.collect()
    assert d.device(1).name == CPU.format(1)
    assert_array_equal(tessel.to_host(d), [0, 1, 2, 3])


def test_an_op_on_dtensors_of_two_runtimes_is_an_error():
    mesh = tessel.create_mesh([("x", 2)])
    a_rt, b_rt = tessel.Runtime(num_cpu_devices=2), tessel.Runtime(num_cpu_devices=2)
    a = tessel.copy_to_mesh(np.ones(4, np.float32), layout(["x"], mesh), runtime=a_rt)
    b = tessel.copy_to_mesh(np.ones(4, np.float32), layout(["x"], mesh), runtime=b_rt)
    with pytest.raises(ValueError, match="inputs 0 and 1 belong to different runtimes"):
        tessel.add(a, b)
    assert_array_equal(tessel.to_host(tessel.add(a, a)), [2, 2, 2, 2])


def test_repr_and_visualize(mesh_x4):
    rows = layout(["x", "unsharded"], mesh_x4)
    d = tessel.copy_to_mesh(matrix(8, 6), rows)
    assert repr(d) == d.to_string() == str(d)
    assert repr(d).startswith("DTensor(shape=[8,6], dtype=f32, layout=")
    assert rows.to_string() in repr(d)
    text = tessel.visualize(d)
    assert text == tessel.visualize(rows, (8, 6))  # the Layout form still works
    for device_id in range(4):
        assert str(device_id) in text


def test_device_name():
    assert tessel.device_name() == "/job:localhost/replica:0/task:0/device:CUSTOM:0"
    assert tessel.DeviceName.parse(tessel.device_name()).type == "CUSTOM"


# ---- default_mesh -------------------------------------------------------------------------


def test_default_mesh_nests(mesh_x4, mesh_xy):
    assert tessel.get_default_mesh() is None
    with tessel.default_mesh(mesh_x4) as entered:
        assert entered == mesh_x4
        assert tessel.get_default_mesh() == mesh_x4
        with tessel.default_mesh(mesh_xy):
            assert tessel.get_default_mesh() == mesh_xy
        assert tessel.get_default_mesh() == mesh_x4
    assert tessel.get_default_mesh() is None


def test_default_mesh_exits_on_an_exception(mesh_x4):
    with pytest.raises(KeyError):
        with tessel.default_mesh(mesh_x4):
            raise KeyError("boom")
    assert tessel.get_default_mesh() is None


def test_default_mesh_scope_object_can_be_reentered(mesh_x4):
    scope = tessel.default_mesh(mesh_x4)
    assert isinstance(scope, tessel.DefaultMeshScope)
    assert scope.mesh == mesh_x4
    with scope:
        with scope:
            assert tessel.get_default_mesh() == mesh_x4
        assert tessel.get_default_mesh() == mesh_x4
    assert tessel.get_default_mesh() is None


def test_default_mesh_is_per_thread(mesh_x4):
    seen = []
    with tessel.default_mesh(mesh_x4):
        worker = threading.Thread(target=lambda: seen.append(tessel.get_default_mesh()))
        worker.start()
        worker.join()
        assert tessel.get_default_mesh() == mesh_x4
    assert seen == [None]


def test_default_mesh_as_decorator(mesh_x4, mesh_xy):
    @tessel.default_mesh(mesh_xy)
    def current(a, b=0):
        return tessel.get_default_mesh(), a + b

    assert current.__name__ == "current"
    assert tessel.get_default_mesh() is None
    assert current(1, b=2) == (mesh_xy, 3)
    assert tessel.get_default_mesh() is None
    with tessel.default_mesh(mesh_x4):
        assert current(1)[0] == mesh_xy
        assert tessel.get_default_mesh() == mesh_x4

    @tessel.default_mesh(mesh_x4)
    def failing():
        raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        failing()
    assert tessel.get_default_mesh() is None


def test_default_mesh_rejects_a_non_mesh(mesh_x4):
    with pytest.raises(ValueError, match="Expect `mesh` to be `Mesh`, got <class 'int'>") as info:
        with tessel.default_mesh(3):
            pass
    assert isinstance(info.value, tessel.InvalidArgumentError)
    with pytest.raises(ValueError, match="got <class 'tessel._tessel.Layout'>"):
        tessel.default_mesh(layout(["x"], mesh_x4))
    with pytest.raises(ValueError, match="got <class 'NoneType'>"):
        tessel.default_mesh(None)
    assert tessel.get_default_mesh() is None


# ---- call_with_layout ---------------------------------------------------------------------


def test_call_with_layout_relayouts_the_result(mesh_x4):
    a = matrix(8, 4)
    target = layout(["unsharded", "x"], mesh_x4)
    seen = []

    def make(value, specs=("x", "unsharded")):
        mesh = tessel.get_default_mesh()
        seen.append(mesh)
        return tessel.copy_to_mesh(value, layout(list(specs), mesh))

    d = tessel.call_with_layout(make, target, a, specs=("x", "unsharded"))
    assert seen == [mesh_x4]
    assert tessel.get_default_mesh() is None
    assert d.layout == target
    assert_array_equal(tessel.to_host(d), a)
    for i, part in enumerate(tessel.unpack(d)):
        assert_array_equal(part, a[:, i:i + 1])


def test_call_with_layout_host_result_and_no_layout(mesh_x4):
    target = layout(["x"], mesh_x4)
    d = tessel.call_with_layout(lambda: np.arange(4, dtype=np.float32), target)
    assert d.layout == target
    assert_array_equal(tessel.unpack(d)[3], [3])
    assert tessel.call_with_layout(lambda x, y=1: x * y, None, 3, y=2) == 6
    with pytest.raises(ZeroDivisionError):
        tessel.call_with_layout(lambda: 1 / 0, target)
    assert tessel.get_default_mesh() is None


def test_creation_ops_inside_default_mesh_are_replicated_on_it(mesh_xy):
    """Seed 74: TF DTensor places creation ops inside `with default_mesh(mesh):` replicated on it;
    outside any scope tessel.zeros and the random ops keep their host forms."""
    with tessel.default_mesh(mesh_xy):
        made = [tessel.zeros([3, 5]), tessel.ones([3, 5], "f64"),
                tessel.fill([3, 5], 2.5), tessel.random_uniform([3, 5], seed=7),
                tessel.random_normal([3, 5], seed=7)]
        for d in made:
            assert isinstance(d, tessel.DTensor)
            assert d.layout == tessel.Layout.replicated(mesh_xy, 2)
        np.testing.assert_array_equal(tessel.to_host(made[2]), np.full((3, 5), 2.5, np.float32))
    assert not isinstance(tessel.zeros([3, 5]), tessel.DTensor)
    assert not isinstance(tessel.random_uniform([3, 5], seed=7), tessel.DTensor)
    np.testing.assert_array_equal(np.asarray(tessel.random_uniform([3, 5], seed=7)),
                                  tessel.to_host(made[3]))
    with pytest.raises(ValueError, match="ones: No default mesh has been registered to DTensor"):
        tessel.ones([2])
