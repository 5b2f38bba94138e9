"""Layout, ShardingSpec, ShardMap: TF's Python Layout API (§2 of the reference notes) plus
tessel's extensions (several mesh dims per tensor dim, Partial, uneven shards)."""

import pickle

import numpy as np
import pytest

import tessel

TPU4 = ",".join(f"/job:localhost/replica:0/task:0/device:TPU:{i}" for i in range(4))
TPU_MESH = f"|batch=2,x=2|0,1,2,3|0,1,2,3|{TPU4}"
LAYOUT_STRINGS = [
    f"sharding_specs:batch,x, mesh:{TPU_MESH}",
    f"sharding_specs:unsharded,unsharded, mesh:{TPU_MESH}",
    f"sharding_specs: mesh:{TPU_MESH}",
    f"parted:batch,unsharded, mesh:{TPU_MESH}",
    "maximal:true, mesh:/job:localhost/task:0/device:CPU:0",
    "empty_layout",
]


# ---- §2.3: construction and validation ------------------------------------------------------


def test_constructor(mesh_2x2):
    l = tessel.Layout(["x", tessel.UNSHARDED], mesh_2x2)
    assert l.sharding_specs == ["x", "unsharded"]
    assert l.rank == 2
    assert l.mesh == mesh_2x2
    assert l.type == tessel.LayoutType.STATIC
    assert l.partial == []
    assert tessel.Layout(sharding_specs=["y"], mesh=mesh_2x2).sharding_specs == ["y"]


def test_constants():
    assert tessel.UNSHARDED == "unsharded"
    assert tessel.MATCH == "match"


def test_mesh_must_be_a_mesh(mesh_2x2):
    for bad in ("|x=2|*CPU", None, mesh_2x2.to_string()):
        with pytest.raises(ValueError, match="mesh is not a valid Mesh object."):
            tessel.Layout(["x"], bad)


def test_repeated_mesh_dim(mesh_2x2):
    with pytest.raises(ValueError, match=r"Mesh dimension x was repeated in sharding "
                                         r"specification .*Mesh dimensions must be unique in a "
                                         r"layout."):
        tessel.Layout(["x", "x"], mesh_2x2)


def test_unknown_mesh_dim(mesh_2x2):
    with pytest.raises(ValueError, match="z: A dimension sharding must either be a valid mesh "
                                         "dimension or UNSHARDED."):
        tessel.Layout(["z"], mesh_2x2)


def test_quirk_two_match_specs_are_allowed(mesh_2x2):
    # TF's C++ GetLayout rejects them; tessel accepts them on every path (compatibility.md).
    l = tessel.Layout([tessel.MATCH, tessel.MATCH], mesh_2x2)
    assert l.sharding_specs == ["match", "match"]


def test_match_spec(mesh_2x2):
    l = tessel.Layout([tessel.MATCH, "x"], mesh_2x2)
    assert l.sharding_specs == ["match", "x"]
    # TF returns (size_t)-1 here; tessel raises (docs/compatibility.md).
    with pytest.raises(ValueError):
        l.num_shards(0)
    assert not l.is_fully_replicated()


def test_helpers_replicated_batch_inner(mesh_2x2):
    r = tessel.Layout.replicated(mesh_2x2, rank=3)
    assert r.sharding_specs == ["unsharded"] * 3
    assert r.is_fully_replicated()
    b = tessel.Layout.batch_sharded(mesh_2x2, "x", 3)
    assert b.sharding_specs == ["x", "unsharded", "unsharded"]
    assert b.is_batch_parallel()
    assert tessel.Layout.batch_sharded(mesh_2x2, "y", 3, axis=1).sharding_specs == [
        "unsharded", "y", "unsharded"]
    i = tessel.Layout.inner_sharded(mesh_2x2, "y", 2)
    assert i.sharding_specs == ["unsharded", "y"]
    assert not i.is_batch_parallel()
    with pytest.raises(ValueError):
        tessel.Layout.batch_sharded(mesh_2x2, "z", 2)


def test_shape_is_mesh_shape(mesh_2x2):
    # TF >= 2.13: Layout.shape returns mesh.shape(), not the shard counts.
    assert tessel.Layout(["x", "unsharded", "unsharded"], mesh_2x2).shape == [2, 2]
    assert tessel.Layout.replicated(mesh_2x2, 1).shape == mesh_2x2.shape()


# ---- §2.4: properties and helpers -----------------------------------------------------------


def test_num_shards(mesh_2x2):
    l = tessel.Layout(["y", "unsharded"], mesh_2x2)
    assert l.num_shards(0) == 2
    assert l.num_shards(1) == 1
    assert l.num_shards_per_dim() == [2, 1]
    with pytest.raises(IndexError):
        l.num_shards(2)


def test_fully_replicated_quirks():
    one = tessel.Mesh.from_string("|x=1|*CPU")
    # A size-1 sharded dim does not count as replicated (TF >= 2.13).
    assert not tessel.Layout(["x"], one).is_fully_replicated()
    assert tessel.Layout([], one).is_fully_replicated()  # rank 0
    single = tessel.Layout.from_single_device_mesh(tessel.Mesh.from_device(
        "/job:localhost/task:0/device:CPU:0"))
    assert not single.is_fully_replicated()


def test_local_and_global_shapes(mesh_2x2):
    l = tessel.Layout(["x", "unsharded"], mesh_2x2)
    assert l.local_shape_from_global_shape((8, 6)) == (4, 6)
    assert l.local_shape_from_global_shape([8, 6]) == (4, 6)
    assert l.global_shape_from_local_shape((4, 6)) == (8, 6)
    r = tessel.Layout.replicated(mesh_2x2, 2)
    assert r.local_shape_from_global_shape((5, 3)) == (5, 3)
    with pytest.raises(ValueError):
        l.local_shape_from_global_shape((8,))


def test_local_shape_from_global_shape_keeps_unknown_dims_as_tf(mesh_2x2):
    # TF's PartialTensorShape overload: -1 (dynamic) stays -1, None is also unknown, the
    # unknown rank (None) comes back as None.
    l = tessel.Layout(["x", "y", "unsharded"], mesh_2x2)
    assert l.local_shape_from_global_shape([8, -1, 6]) == (4, -1, 6)
    assert l.local_shape_from_global_shape((-1, 6, None)) == (-1, 3, -1)
    assert l.local_shape_from_global_shape(tessel.PartialShape([None, 4, 2])) == (-1, 2, 2)
    assert l.local_shape_from_global_shape(None) is None
    assert tessel.Layout.replicated(mesh_2x2, 2).local_shape_from_global_shape([-1, 5]) == (-1, 5)
    with pytest.raises(tessel.InvalidArgumentError, match=r"shape \[8,\?\] has rank 2"):
        l.local_shape_from_global_shape([8, -1])
    with pytest.raises(tessel.InvalidArgumentError, match="PartialShape"):
        l.local_shape_from_global_shape([8, -2, 1])


def test_scalar_spec_messages_on_each_path(mesh_2x2):
    # TF's Python constructor: "scalar" is not a mesh dimension.
    for specs in (["scalar"], ["x", "scalar"]):
        with pytest.raises(ValueError, match="scalar: A dimension sharding must either be a valid "
                                             "mesh dimension or UNSHARDED."):
            tessel.Layout(specs, mesh_2x2)
    # TF's GetLayout (create, from_string): the sole spec gives rank 0, anything else TF's text.
    scalar = tessel.Layout.create(tessel.LayoutType.STATIC, [tessel.ShardingSpec.parse("scalar")],
                                  mesh_2x2)
    assert scalar.rank == 0 and scalar == tessel.Layout.replicated(mesh_2x2, 0)
    text = ("A scalar sharding_spec can only be used as a single sharding_spec instruction, not as "
            "part of list of sharding_specs as attempted here with 2 sharding_specs")
    with pytest.raises(ValueError, match=text):
        tessel.Layout.create(tessel.LayoutType.STATIC,
                             [tessel.ShardingSpec.parse(s) for s in ("x", "scalar")], mesh_2x2)
    with pytest.raises(ValueError, match=text):
        tessel.Layout.from_string("sharding_specs:scalar,x, mesh:|x=2,y=2|*CPU")


def test_uneven_shards_follow_chunk_semantics(mesh_2x2):
    l = tessel.Layout(["x", "unsharded"], mesh_2x2)
    # TF truncates 5 // 2 = 2; tessel gives the largest shard and never loses elements.
    assert l.local_shape_from_global_shape((5, 6)) == (3, 6)
    assert l.local_shape((5, 6), 0) == (3, 6)
    assert l.local_shape((5, 6), 2) == (2, 6)  # offset 2 is x=1


def test_offset_to_shard(mesh_2x2):
    assert tessel.Layout(["x", "unsharded"], mesh_2x2).offset_to_shard() == [
        (0, 0), (0, 0), (1, 0), (1, 0)]
    assert tessel.Layout(["y", "x"], mesh_2x2).offset_to_shard() == [
        (0, 0), (1, 0), (0, 1), (1, 1)]
    l = tessel.Layout(["x", "y"], mesh_2x2)
    assert l.offset_tuple_to_global_index((1, 0)) == 2
    assert l.offset_tuple_to_global_index([1, 1]) == 3


def test_shard_vector(mesh_2x2):
    s = tessel.Layout(["x", "y"], mesh_2x2).shard_vector_string()
    assert s == "shards:[(1,1),(1,2),(2,1),(2,2)] num_shards_per_dim:(2,2)"


def test_to_parted(mesh_2x2):
    l = tessel.Layout(["x", "unsharded"], mesh_2x2)
    p = l.to_parted()
    assert p.type == tessel.LayoutType.PARTED
    assert p.sharding_specs == l.sharding_specs
    assert p.to_string().startswith("parted:x,unsharded, mesh:")
    assert p != l
    assert p.is_equivalent_ignoring_type(l)


def test_delete(mesh_2x2):
    l = tessel.Layout(["x", "unsharded", "y"], mesh_2x2)
    assert l.delete(1).sharding_specs == ["x", "y"]
    assert l.delete([0, 2]).sharding_specs == ["unsharded"]
    assert l.delete([-1]).sharding_specs == ["x", "unsharded", "y"]  # negatives ignored


def test_is_equivalent():
    m = tessel.Mesh.from_string("|x=1,y=2|*CPU")
    a = tessel.Layout(["x", "y"], m)
    b = tessel.Layout(["unsharded", "y"], m)
    assert a.is_equivalent(b)  # differ only where both have one shard
    assert a != b
    assert not a.is_equivalent(tessel.Layout(["unsharded", "unsharded"], m))


def test_transposed_and_left_pad(mesh_2x2):
    l = tessel.Layout(["x", "unsharded"], mesh_2x2)
    assert l.transposed_2d().sharding_specs == ["unsharded", "x"]
    assert l.left_pad(3).sharding_specs == ["unsharded", "x", "unsharded"]
    with pytest.raises(ValueError):
        tessel.Layout(["x"], mesh_2x2).transposed_2d()


def test_single_device_layout():
    dev = "/job:localhost/task:0/device:CPU:0"
    l = tessel.Layout.from_single_device_mesh(tessel.Mesh.from_device(dev))
    assert l.type == tessel.LayoutType.SINGLE_DEVICE
    assert l.is_single_device()
    assert l.rank == 0
    assert l.to_string() == f"maximal:true, mesh:{dev}"
    assert tessel.Layout.single_device(tessel.Mesh.from_device(dev)) == l
    assert tessel.Layout.from_device(dev) == l


def test_empty_layout():
    l = tessel.Layout.from_string("empty_layout")
    assert l.type == tessel.LayoutType.EMPTY
    assert l.is_empty()
    assert l.mesh.is_empty()


# ---- §2.5: text and wire forms, identity ----------------------------------------------------


@pytest.mark.parametrize("text", LAYOUT_STRINGS)
def test_string_round_trip(text):
    l = tessel.Layout.from_string(text)
    assert l.to_string() == text
    assert tessel.Layout.from_string(l.to_string()) == l
    assert tessel.Layout.from_proto(l.as_proto()) == l


def test_rank_zero_differs_from_rank_one():
    zero = tessel.Layout.from_string(f"sharding_specs: mesh:{TPU_MESH}")
    one = tessel.Layout.from_string(f"sharding_specs:unsharded, mesh:{TPU_MESH}")
    assert zero.rank == 0 and one.rank == 1
    assert zero != one


def test_from_string_errors():
    with pytest.raises(ValueError, match="Expected 2 items but found"):
        tessel.Layout.from_string("sharding_specs:x,  mesh:|x=2|*CPU")
    with pytest.raises(ValueError, match="Unknown layout type prefix"):
        tessel.Layout.from_string("bogus:x, mesh:|x=2|*CPU")
    with pytest.raises(ValueError, match="mesh parts but found"):  # mesh errors come first
        tessel.Layout.from_string("bogus:x, mesh:a|b")


def test_quirk_missing_trailing_comma_is_an_error():
    # TF silently drops the last spec; tessel rejects the string (compatibility.md).
    with pytest.raises(ValueError):
        tessel.Layout.from_string("sharding_specs:x,y mesh:|x=2,y=2|*CPU")
    assert tessel.Layout.from_string("sharding_specs:x,y, mesh:|x=2,y=2|*CPU").rank == 2


def test_as_proto_is_bytes(mesh_2x2):
    l = tessel.Layout(["x", "y"], mesh_2x2)
    assert isinstance(l.as_proto(), bytes)
    assert tessel.Layout.from_proto(l.as_proto()) == l


def test_equality_hash_repr_pickle(mesh_2x2):
    l = tessel.Layout(["x", "unsharded"], mesh_2x2)
    same = tessel.Layout.from_string(l.to_string())
    assert same == l and hash(same) == hash(l)
    assert l != tessel.Layout(["y", "unsharded"], mesh_2x2)
    assert l != "not a layout"
    assert repr(l) == f"Layout.from_string({l.to_string()})"
    assert pickle.loads(pickle.dumps(l)) == l
    assert len({l, same}) == 1


# ---- tessel extensions ----------------------------------------------------------------------


def test_several_mesh_dims_per_tensor_dim(mesh_2x2):
    l = tessel.Layout(["x+y", "unsharded"], mesh_2x2)
    assert l.num_shards(0) == 4
    assert l.sharding_specs == ["x+y", "unsharded"]
    assert l.to_string().startswith("sharding_specs:x+y,unsharded, mesh:")
    assert tessel.Layout.from_string(l.to_string()) == l
    assert l.sharded_mesh_dims() == ["x", "y"]


def test_partial(mesh_2x2):
    text = "sharding_specs:x,unsharded, partial:sum(y), mesh:|x=2,y=2|*CPU"
    l = tessel.Layout.from_string(text)
    assert l.partial == [("y", "sum")]
    assert l.is_partial()
    assert tessel.Layout.from_string(l.to_string()) == l
    assert tessel.Layout.from_proto(l.as_proto()) == l
    base = tessel.Layout(["x", "unsharded"], mesh_2x2)
    p = base.with_partial([("y", tessel.ReduceOp.MAX)])
    assert p.partial == [("y", "max")]
    assert base.with_partial([("y", "mean")]).partial == [("y", "mean")]
    assert p.without_partial() == base
    assert not tessel.Layout.replicated(mesh_2x2, 1).with_partial([("x", "sum")]) \
        .is_fully_replicated()


def test_create_with_types_and_partial(mesh_2x2):
    l = tessel.Layout.create(tessel.LayoutType.PARTED, ["x", tessel.ShardingSpec("unsharded")],
                             mesh_2x2, [("y", "sum")])
    assert l.type == tessel.LayoutType.PARTED
    assert l.partial == [("y", "sum")]
    assert [s.to_string() for s in l.specs()] == ["x", "unsharded"]


def test_sharding_spec():
    s = tessel.ShardingSpec.parse("x+y")
    assert s.kind == tessel.ShardingSpec.Kind.SHARDED
    assert s.mesh_dims == ["x", "y"]
    assert s.uses("y") and not s.uses("z")
    assert str(s) == "x+y"
    assert tessel.ShardingSpec("unsharded").is_unsharded()
    assert tessel.ShardingSpec.match().is_match()
    assert tessel.ShardingSpec.sharded(["a"]) == tessel.ShardingSpec("a")
    for bad in ("", "x+", "+x"):
        with pytest.raises(ValueError):
            tessel.ShardingSpec.parse(bad)


# ---- shard map and visualisation ------------------------------------------------------------


def test_shard_map_blocks():
    l = tessel.Layout.from_string("sharding_specs:x,unsharded, mesh:|x=2,y=2|*CPU")
    m = tessel.ShardMap(l, (8, 6))
    assert m.num_devices() == 4
    assert m.global_shape == (8, 6)
    assert m.layout == l
    assert m.block(0) == ((0, 0), (4, 6))
    assert m.block(3) == ((4, 0), (4, 6))
    assert m.distinct_blocks() == [((0, 0), (4, 6), [0, 1]), ((4, 0), (4, 6), [2, 3])]


def test_shard_map_uneven_and_errors(mesh_2x2):
    m = tessel.ShardMap(tessel.Layout(["x+y"], mesh_2x2), [2])
    assert [m.block(i) for i in range(4)] == [((0,), (1,)), ((1,), (1,)), ((2,), (0,)),
                                              ((2,), (0,))]
    with pytest.raises(ValueError):
        tessel.ShardMap(tessel.Layout(["x"], mesh_2x2), (8, 6))  # rank mismatch


def test_visualize(mesh_2x2):
    l = tessel.Layout(["x", "y"], mesh_2x2)
    text = tessel.visualize(l, (8, 6))
    assert isinstance(text, str)
    assert text == tessel.ShardMap(l, (8, 6)).visualize() == str(tessel.ShardMap(l, (8, 6)))
    for device in "0123":
        assert device in text


def test_shard_range():
    assert [tessel.shard_range(10, 4, i) for i in range(4)] == [(0, 3), (3, 3), (6, 3), (9, 1)]
    assert [tessel.shard_range(2, 4, i) for i in range(4)] == [(0, 1), (1, 1), (2, 0), (2, 0)]
    assert tessel.shard_chunk_size(10, 4) == 3
    with pytest.raises(ValueError):
        tessel.shard_chunk_size(10, 0)


def test_layout_with_numpy_shapes(mesh_2x2):
    l = tessel.Layout(["x", "y"], mesh_2x2)
    assert l.local_shape_from_global_shape(np.zeros((8, 6)).shape) == (4, 3)
    assert l.local_shape_from_global_shape(np.array([8, 6])) == (4, 3)
