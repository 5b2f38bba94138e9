"""Mesh: TF's Python constructor checks and messages, properties, text/proto forms, create_mesh.

References are to ../shared/reference/tf-dtensor-semantics.md.
"""

import pickle

import numpy as np
import pytest

import tessel
from conftest import CPU, TPU, devices

GPU = "/job:localhost/replica:0/task:0/device:GPU:{}"

# §1.5 examples; each round-trips byte for byte.
TPU4 = ",".join(f"/job:localhost/replica:0/task:0/device:TPU:{i}" for i in range(4))
TPU2 = ",".join(f"/job:localhost/replica:0/task:0/device:TPU:{i}" for i in range(2))
CPU4_SHORT = ",".join(f"/job:localhost/task:0/device:CPU:{i}" for i in range(4))
MESH_STRINGS = [
    f"|batch=2,x=2|0,1,2,3|0,1,2,3|{TPU4}",
    f"name|x=2,y=2|0,1,2,3|0,1,2,3|{CPU4_SHORT}",
    f"|batch=2|0,1|0,1|{TPU2}|use_xla_spmd",
    "|batch=2|0,1|0|/job:localhost/replica:0/task:0/device:TPU:0|" + TPU2 + "|use_xla_spmd",
    "|x=2|0,1|||/job:localhost/task:0/device:CPU:0,/job:localhost/task:0/device:CPU:1",
    "/job:localhost/task:0/device:CPU:0",
    "empty_mesh",
]


def make(dim_names=("x",), ids=None, local_ids=None, local_devices=None, **kwargs):
    ids = np.arange(2) if ids is None else ids
    local_ids = list(range(np.size(ids))) if local_ids is None else local_ids
    local_devices = devices(np.size(ids)) if local_devices is None else local_devices
    return tessel.Mesh(list(dim_names), ids, local_ids, local_devices, **kwargs)


# ---- §1.2: the Python constructor's checks, in TF's order -----------------------------------


def test_valid_constructor(mesh_2x2):
    assert mesh_2x2.dim_names == ["x", "y"]
    assert mesh_2x2.shape() == [2, 2]
    assert mesh_2x2.size == 4
    assert mesh_2x2.name == ""
    assert mesh_2x2.local_devices() == devices(4)
    assert mesh_2x2.device_type() == "CPU"


def test_keyword_arguments_use_tf_names():
    m = tessel.Mesh(dim_names=["x"], global_device_ids=np.arange(2), local_device_ids=[0, 1],
                    local_devices=devices(2), mesh_name="m", global_devices=None,
                    use_xla_spmd=False)
    assert m.name == "m"


def test_check1_global_ids_must_be_ndarray():
    for ids in ([0, 1], (0, 1), range(2)):
        with pytest.raises(ValueError, match="Variable global_device_ids must be an ndarray."):
            tessel.Mesh(["x"], ids, [0, 1], devices(2))


def test_check2_global_ids_non_empty():
    with pytest.raises(ValueError, match="Variable global_device_ids must be non-empty."):
        tessel.Mesh(["x"], np.array([], dtype=np.int64), [], [])


def test_check3_ids_sequentially_increase():
    with pytest.raises(ValueError, match=r"global_device_ids must sequentially increase"):
        tessel.Mesh(["x"], np.array([0, 2]), [0, 1], devices(2))
    with pytest.raises(ValueError, match=r"global_device_ids must sequentially increase"):
        make(["x", "y"], np.array([[0, 1], [3, 2]]))


def test_device_ids_are_non_negative_integers():
    with pytest.raises(tessel.InvalidArgumentError,
                       match=r"Mesh: global_device_ids must be >= 0, got -1 in \[-1,0\]"):
        tessel.Mesh(["x"], np.array([-1, 0]), [-1, 0], devices(2))
    with pytest.raises(tessel.InvalidArgumentError, match="global_device_ids must be >= 0, got -3"):
        make(["x", "y"], np.array([[-3, -2], [-1, 0]]))
    # Float ids were cast to int64, truncating 1.5 to 1; whole-valued floats are refused alike.
    for ids in (np.array([0.0, 1.5]), np.array([0.0, 1.0]), np.array([True, False])):
        with pytest.raises(tessel.InvalidArgumentError,
                           match=f"Mesh: global_device_ids must hold integers, got dtype {ids.dtype}"):
            tessel.Mesh(["x"], ids, [0, 1], devices(2))
    with pytest.raises(TypeError, match="unexpected item type in local_device_ids"):
        tessel.Mesh(["x"], np.array([0, 1]), [0, 1.5], devices(2))
    # Unsigned ids are integers too.
    assert tessel.Mesh(["x"], np.array([0, 1], dtype=np.uint32), [0, 1], devices(2)).size == 2


def test_check3_ids_need_not_start_at_zero():
    m = tessel.Mesh(["x"], np.array([4, 5, 6, 7]), [4, 5, 6, 7], devices(4))
    assert m.min_global_device_id() == 4
    assert m.global_device_ids().tolist() == [4, 5, 6, 7]
    # TF treats ids as offsets here (wrong locations); tessel maps ids to offsets first.
    assert m.local_device_locations() == [{"x": 0}, {"x": 1}, {"x": 2}, {"x": 3}]


def test_check4_dim_names_match_ids_rank():
    with pytest.raises(ValueError, match="Number of mesh dimensions does not match number of "
                                         "dimension names."):
        make(["x"], np.arange(4).reshape(2, 2))


def test_check5_local_ids_must_be_a_list():
    with pytest.raises(ValueError, match="Variable local_device_ids must be a list of integers."):
        tessel.Mesh(["x"], np.arange(2), (0, 1), devices(2))
    with pytest.raises(ValueError, match="Variable local_device_ids must be a list of integers."):
        tessel.Mesh(["x"], np.arange(2), np.arange(2), devices(2))


def test_check6_local_devices_must_be_a_list():
    with pytest.raises(ValueError, match="Variable local_devices must be a list of DeviceSpecs."):
        tessel.Mesh(["x"], np.arange(2), [0, 1], tuple(devices(2)))


def test_check7_global_devices_must_be_a_list():
    with pytest.raises(ValueError, match="Variable global_devices must be a list of DeviceSpecs."):
        make(global_devices=tuple(devices(2)))
    # Falsy values are "no global devices".
    assert make(global_devices=()).global_devices() == []
    assert make(global_devices=[]).global_devices() == []


def test_check8_no_devices_at_all():
    with pytest.raises(ValueError, match="Empty list of devices not allowed."):
        tessel.Mesh(["x"], np.arange(2), [], [])


def test_check9_duplicate_devices():
    gpus = [GPU.format(0), GPU.format(0)]
    with pytest.raises(ValueError, match="Duplicate devices found in mesh specification"):
        make(local_devices=gpus)
    # The one exception: every local device is the same single CPU device.
    same_cpu = [CPU.format(0)] * 3
    assert make(ids=np.arange(3), local_devices=same_cpu).num_local_devices() == 3


def test_check10_local_ids_and_devices_same_size():
    with pytest.raises(ValueError, match="Variable local_device_ids does not have same size as "
                                         "local_devices."):
        tessel.Mesh(["x"], np.arange(2), [0], devices(2))


def test_check11_more_local_than_global():
    with pytest.raises(ValueError, match="Cannot have more local than gobal device IDs."):
        tessel.Mesh(["x"], np.arange(2), [0, 1, 2], devices(3))


def test_check12_device_types():
    with pytest.raises(ValueError, match="device_type is required"):
        tessel.Mesh(["x"], np.arange(1), [0], ["/job:localhost/task:0"])
    with pytest.raises(ValueError, match="Devices containing multiple device_types"):
        make(local_devices=[CPU.format(0), GPU.format(1)])
    remote = tessel.Mesh(["x"], np.arange(2), [], [], global_devices=devices(2, TPU))
    assert remote.device_type() == "TPU"
    assert remote.is_remote()


def test_check13_xla_spmd_only_on_tpu():
    with pytest.raises(ValueError, match="XLA SPMD is not currently not supported for CPU mesh."):
        make(use_xla_spmd=True)
    tpu = make(local_devices=devices(2, TPU), use_xla_spmd=True)
    assert tpu.use_xla_spmd()
    assert tpu.to_string().endswith("|use_xla_spmd")


def test_parser_rules_also_apply_to_the_constructor():
    # TF's Python constructor lets these through; tessel runs the parser's checks too.
    with pytest.raises(ValueError, match="repeated mesh dimension"):
        make(["x", "x"], np.arange(4).reshape(2, 2))
    for name in ("unsharded", "match", "any"):
        with pytest.raises(ValueError, match=f"mesh dimension name {name} is reserved"):
            make([name])
    with pytest.raises(ValueError, match="Failed to either identify host or device type"):
        make(local_devices=["/device:CPU:0", "/device:CPU:1"])


def test_devices_may_be_device_names_or_strings():
    specs = [tessel.DeviceName.parse(d) for d in devices(2)]
    assert make(local_devices=specs) == make()


def test_numpy_integer_ids_are_accepted():
    m = tessel.Mesh(["x"], np.arange(2, dtype=np.int32), [np.int64(0), np.int64(1)], devices(2))
    assert m.local_device_ids() == [0, 1]


# ---- §1.4: properties and methods -----------------------------------------------------------


@pytest.mark.parametrize("shape,strides", [((8,), [1]), ((2, 4, 2), [8, 2, 1]),
                                           ((8, 16, 2, 4), [128, 8, 4, 1])])
def test_strides(shape, strides):
    n = int(np.prod(shape))
    names = [f"d{i}" for i in range(len(shape))]
    m = tessel.Mesh(names, np.arange(n).reshape(shape), list(range(n)), devices(n))
    assert m.strides == strides
    assert m.shape() == list(shape)


def test_dimensions(mesh_2x2):
    assert mesh_2x2.dim_size("y") == 2
    assert mesh_2x2["x"] == tessel.MeshDimension("x", 2)
    assert mesh_2x2["x"] == ("x", 2)
    assert mesh_2x2["x"].name == "x" and mesh_2x2["x"].size == 2
    assert mesh_2x2.contains_dim("x") and not mesh_2x2.contains_dim("z")
    assert "y" in mesh_2x2 and "z" not in mesh_2x2
    assert mesh_2x2.dims() == [("x", 2), ("y", 2)]
    assert mesh_2x2.dim_index("y") == 1


def test_unknown_dimension(mesh_2x2):
    with pytest.raises(ValueError, match="Dimension z does not exist in mesh.Available "
                                         "dimensions: x,y"):
        mesh_2x2.dim_size("z")
    with pytest.raises(ValueError, match="Dimension z does not exist in mesh"):
        mesh_2x2["z"]


def test_device_location():
    m = tessel.Mesh(["x", "batch"], np.arange(32).reshape(4, 8), list(range(32)), devices(32))
    assert m.device_location(10) == [1, 2]
    assert m.device_location(18) == [2, 2]
    assert m.device_location(31) == [3, 7]
    for bad in (-1, 32):
        with pytest.raises(ValueError, match="Mesh offset cannot be negative or exceed Mesh's "
                                             "size"):
            m.device_location(bad)
    assert m.offset_of([3, 7]) == 31


def test_coords_wrap(mesh_2x2):
    c = mesh_2x2.coords(3)
    assert isinstance(c, np.ndarray)
    assert c.tolist() == [1, 1]
    assert mesh_2x2.coords(5).tolist() == [0, 1]  # indices >= size wrap around


def test_unravel_index_and_locations(mesh_2x2):
    assert mesh_2x2.unravel_index() == {
        0: {"x": 0, "y": 0}, 1: {"x": 0, "y": 1}, 2: {"x": 1, "y": 0}, 3: {"x": 1, "y": 1}}
    assert mesh_2x2.local_device_locations() == [
        {"x": 0, "y": 0}, {"x": 0, "y": 1}, {"x": 1, "y": 0}, {"x": 1, "y": 1}]


def test_device_lists(mesh_2x2):
    ids = mesh_2x2.global_device_ids()
    assert ids.dtype == np.int64
    assert ids.shape == (2, 2)
    assert ids.tolist() == [[0, 1], [2, 3]]
    assert mesh_2x2.local_device_ids() == [0, 1, 2, 3]
    assert mesh_2x2.global_devices() == []
    assert mesh_2x2.num_local_devices() == 4
    assert mesh_2x2.min_global_device_id() == 0
    assert not mesh_2x2.is_remote()
    assert not mesh_2x2.is_single_device()
    assert mesh_2x2.single_device == ""
    assert not mesh_2x2.use_xla_spmd()
    assert mesh_2x2.offset_of_device_id(3) == 3


def test_remote_mesh():
    m = tessel.Mesh.from_string(MESH_STRINGS[4])
    assert m.is_remote()
    assert m.local_device_ids() == []
    assert m.device_type() == "CPU"


def test_host_mesh_drops_name_global_devices_and_flag():
    gpu = tessel.Mesh(["x"], np.arange(2), [0, 1], devices(2, GPU), "name_not_preserved")
    cpu = tessel.Mesh(["x"], np.arange(2), [0, 1], devices(2))
    assert gpu.host_mesh() == cpu
    assert gpu.host_mesh().device_type() == "CPU"
    assert gpu.host_mesh().name == ""


def test_single_device_mesh():
    m = tessel.Mesh.from_device("/job:localhost/replica:0/task:0/device:TPU:0")
    assert m.is_single_device()
    assert m.single_device == "/job:localhost/replica:0/task:0/device:TPU:0"
    assert m.dim_names == [] and m.shape() == [] and m.size == 0
    assert m.device_type() == "TPU"
    assert m.to_string() == "/job:localhost/replica:0/task:0/device:TPU:0"
    with pytest.raises(ValueError, match="Single device is empty."):
        tessel.Mesh.from_device("")


def test_empty_mesh():
    m = tessel.Mesh.from_string("empty_mesh")
    assert m.is_empty()
    assert m.size == 0 and m.device_type() == ""
    assert tessel.Mesh.from_string("||||") == m


def test_quirk_zero_ids_with_dims_is_an_error():
    # TF parses "|x=2|||" to the empty mesh; tessel rejects it (compatibility.md).
    with pytest.raises(ValueError, match="has dimensions or devices but no"):
        tessel.Mesh.from_string("|x=2|||")


def test_quirk_mesh_prefix_is_stripped():
    assert tessel.Mesh.from_string("mesh:|x=2|*CPU") == tessel.Mesh.from_string("|x=2|*CPU")


# ---- §1.5: text and wire forms, identity ----------------------------------------------------


@pytest.mark.parametrize("text", MESH_STRINGS)
def test_string_round_trip(text):
    m = tessel.Mesh.from_string(text)
    assert m.to_string() == text
    assert tessel.Mesh.from_string(m.to_string()) == m
    assert tessel.Mesh.from_proto(m.as_proto()) == m


def test_three_part_shortcut():
    m = tessel.Mesh.from_string("|x=2,y=2|*CPU")
    assert m.to_string() == f"|x=2,y=2|0,1,2,3|0,1,2,3|{CPU4_SHORT}"


def test_from_string_errors():
    with pytest.raises(ValueError, match="Expected either 5, 6, 7 or 3 mesh parts but found2"):
        tessel.Mesh.from_string("a|b")
    with pytest.raises(ValueError, match="repeated mesh dimension"):
        tessel.Mesh.from_string("|x=2,x=2|*CPU")
    with pytest.raises(ValueError, match="mesh dimension name match is reserved"):
        tessel.Mesh.from_string("|match=2|*CPU")
    with pytest.raises(ValueError, match="Input string is invalid"):
        tessel.Mesh.from_string("/job:localhost/device:CPU:0")
    with pytest.raises(ValueError, match="use_xla_spmd"):
        tessel.Mesh.from_string(f"|batch=2|0,1|0,1|{TPU2}|{TPU2}|bogus")


def test_as_proto_is_bytes(mesh_2x2):
    proto = mesh_2x2.as_proto()
    assert isinstance(proto, bytes)
    assert tessel.Mesh.from_proto(proto) == mesh_2x2


def test_equality_and_hash(mesh_2x2):
    same = tessel.Mesh.from_string(mesh_2x2.to_string())
    assert same == mesh_2x2 and not (same != mesh_2x2)
    assert hash(same) == hash(mesh_2x2)
    renamed = tessel.Mesh(["x", "y"], np.arange(4).reshape(2, 2), [0, 1, 2, 3], devices(4), "n")
    assert renamed != mesh_2x2
    assert mesh_2x2 != "not a mesh"
    assert len({mesh_2x2, same, renamed}) == 2


def test_repr(mesh_2x2):
    assert repr(mesh_2x2) == f"Mesh.from_string({mesh_2x2.to_string()})"


@pytest.mark.parametrize("text", MESH_STRINGS)
def test_pickle(text):
    m = tessel.Mesh.from_string(text)
    assert pickle.loads(pickle.dumps(m)) == m


def test_global_fingerprint_ignores_local_parts():
    a = tessel.Mesh.from_string("a|x=2|0,1|0|/job:localhost/task:0/device:CPU:0")
    b = tessel.Mesh.from_string("b|x=2|0,1|1|/job:localhost/task:1/device:CPU:0")
    assert a.global_fingerprint() == b.global_fingerprint()


# ---- create_mesh ----------------------------------------------------------------------------


@pytest.fixture
def four_cpus(monkeypatch):
    monkeypatch.delenv("TESSEL_CPU_DEVICES", raising=False)


def test_create_mesh_default(four_cpus):
    m = tessel.create_mesh()
    assert m.dim_names == ["x"]
    assert m.shape() == [4]
    assert m.local_devices() == devices(4)
    assert m.device_type() == "CPU"


def test_create_mesh_dims_as_list_and_dict(four_cpus):
    a = tessel.create_mesh(mesh_dims=[("x", 2), ("y", 2)], device_type="CPU")
    b = tessel.create_mesh({"x": 2, "y": 2})
    assert a == b
    assert a.shape() == [2, 2]
    assert a.global_device_ids().tolist() == [[0, 1], [2, 3]]
    assert a.local_device_ids() == [0, 1, 2, 3]


def test_create_mesh_all_devices_and_name(four_cpus):
    m = tessel.create_mesh([("batch", -1)], mesh_name="m")
    assert m.shape() == [4]
    assert m.name == "m"


def test_create_mesh_env_device_count(monkeypatch):
    monkeypatch.setenv("TESSEL_CPU_DEVICES", "8")
    assert tessel.create_mesh().shape() == [8]
    assert tessel.create_mesh([("x", 2), ("y", 4)]).size == 8


def test_create_mesh_too_few_devices(four_cpus):
    with pytest.raises(ValueError):
        tessel.create_mesh([("x", 8)])


def test_create_mesh_with_devices():
    m = tessel.create_mesh([("x", 2)], devices=["CPU:0", "CPU:1"])
    assert m.local_devices() == devices(2)
    assert tessel.create_mesh(devices=["CPU:0", "CPU:1", "CPU:2"]).shape() == [3]
    assert tessel.create_mesh([("b", -1)], devices=["GPU:0", "GPU:1"]).device_type() == "GPU"
    full = tessel.create_mesh(devices=devices(2))
    assert full.local_devices() == devices(2)


def test_create_mesh_xla_spmd(four_cpus):
    with pytest.raises(ValueError, match="XLA SPMD is not currently not supported for CPU mesh."):
        tessel.create_mesh(use_xla_spmd=True)
    tpu = tessel.create_mesh([("x", 2)], devices=["TPU:0", "TPU:1"], use_xla_spmd=True)
    assert tpu.use_xla_spmd()


def test_mesh_create_static():
    m = tessel.Mesh.create([("x", 2), ("y", 2)], "CPU", "", 4)
    assert m.local_devices()[3] == "/job:localhost/replica:0/task:0/device:CPU:3"
    assert tessel.Mesh.create({"b": -1}, num_devices=8).shape() == [8]


# ---- parse_mesh: the CLI's one mesh grammar ---------------------------------------------------


def test_parse_mesh_forms():
    assert tessel.parse_mesh("x=2,y=2") == tessel.create_mesh([("x", 2), ("y", 2)], device_type="CPU")
    assert tessel.parse_mesh("|x=2,y=2|*CPU") == tessel.Mesh.from_string("|x=2,y=2|*CPU")
    assert tessel.parse_mesh("2x2", ["batch", "model"]) == tessel.parse_mesh("batch=2,model=2")


def test_parse_mesh_errors_name_the_text():
    with pytest.raises(ValueError, match="parse_mesh: '2x2' needs dimension names"):
        tessel.parse_mesh("2x2")
    with pytest.raises(ValueError, match="'y' in 'x=2,y' is not <name>=<size>"):
        tessel.parse_mesh("x=2,y")
    with pytest.raises(ValueError, match="'x=4,y=4' has more than 8 devices"):
        tessel.parse_mesh("x=4,y=4", max_devices=8)
