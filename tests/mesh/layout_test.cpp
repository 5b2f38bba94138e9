// Layout construction, validation (tf-dtensor-semantics.md §2.3) and helpers (§2.4).
#include <gtest/gtest.h>

#include "mesh/mesh_helpers.h"
#include "tessel/mesh/layout.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using testing::mesh_2x2;
constexpr ErrorCode kInvalid = ErrorCode::kInvalidArgument;

TEST(LayoutValidation, PythonRule_RepeatedMeshDim) {
  EXPECT_TESSEL_ERROR(Layout({"x", "x"}, mesh_2x2()), kInvalid,
                      "Mesh dimension x was repeated in sharding specification ['x', 'x']. Mesh "
                      "dimensions must be unique in a layout.");
}

TEST(LayoutValidation, PythonRule_UnknownMeshDim) {
  EXPECT_TESSEL_ERROR(Layout({"z", "unsharded"}, mesh_2x2()), kInvalid,
                      "z: A dimension sharding must either be a valid mesh dimension or UNSHARDED.");
  EXPECT_TESSEL_ERROR(Layout({"any"}, mesh_2x2()), kInvalid,
                      "any: A dimension sharding must either be a valid mesh dimension");
}

TEST(LayoutValidation, CppRule_SpecNotInMesh) {
  EXPECT_TESSEL_ERROR(
      Layout::create(LayoutType::kStatic, {ShardingSpec::sharded({"z"})}, mesh_2x2()), kInvalid,
      "sharding spec (z) refers to mesh dimension not contained in mesh |x=2,y=2|");
}

TEST(LayoutValidation, CppRule_ShardTwoDimsOverOneMeshDim) {
  EXPECT_TESSEL_ERROR(Layout::create(LayoutType::kStatic,
                                     {ShardingSpec::sharded({"x"}), ShardingSpec::sharded({"x"})},
                                     mesh_2x2()),
                      kInvalid,
                      "Attempted to shard two or more tensor dimensions over mesh dimension x");
}

TEST(LayoutValidation, CppRule_TypeMatchesMeshKind) {
  Mesh single = Mesh::from_device("/job:localhost/task:0/device:CPU:0");
  EXPECT_TESSEL_ERROR(Layout::create(LayoutType::kStatic, {}, single), kInvalid,
                      "type is single device, but mesh is not single device");
  EXPECT_TESSEL_ERROR(Layout::create(LayoutType::kSingleDevice, {}, mesh_2x2()), kInvalid,
                      "type is single device, but mesh is not single device");
  EXPECT_TESSEL_ERROR(Layout::create(LayoutType::kEmpty, {}, mesh_2x2()), kInvalid,
                      "type is empty, but mesh is not empty");
  EXPECT_TESSEL_ERROR(Layout::create(LayoutType::kStatic, {}, Mesh()), kInvalid,
                      "type is empty, but mesh is not empty");
}

TEST(LayoutValidation, Quirk_TwoMatchSpecsAreAllowed) {
  Layout l({"match", "match"}, mesh_2x2());
  EXPECT_TRUE(l.sharding_specs()[0].is_match());
  EXPECT_TRUE(l.sharding_specs()[1].is_match());
}

TEST(LayoutHelpers, Constructors) {
  Mesh m = mesh_2x2();
  EXPECT_EQ(Layout::replicated(m, 2).sharding_spec_strings(),
            (std::vector<std::string>{"unsharded", "unsharded"}));
  EXPECT_EQ(Layout::batch_sharded(m, "x", 3).sharding_spec_strings(),
            (std::vector<std::string>{"x", "unsharded", "unsharded"}));
  EXPECT_EQ(Layout::batch_sharded(m, "y", 3, 1).sharding_spec_strings(),
            (std::vector<std::string>{"unsharded", "y", "unsharded"}));
  EXPECT_EQ(Layout::inner_sharded(m, "y", 2).sharding_spec_strings(),
            (std::vector<std::string>{"unsharded", "y"}));
  // TF aborts on a bad dim here; tessel reports it.
  EXPECT_TESSEL_ERROR(Layout::batch_sharded(m, "q", 2), kInvalid,
                      "sharding spec (q) refers to mesh dimension not contained in mesh");
  EXPECT_TESSEL_ERROR(Layout::batch_sharded(m, "x", 2, 2), kInvalid,
                      "axis 2 is not a dimension of rank 2");
}

TEST(LayoutHelpers, NumShards) {
  Layout l({"x", "unsharded", "y"}, Mesh::from_string("|x=2,y=3|*CPU"));
  EXPECT_EQ(l.num_shards(0), 2);
  EXPECT_EQ(l.num_shards(1), 1);
  EXPECT_EQ(l.num_shards(2), 3);
  EXPECT_EQ(l.num_shards_per_dim(), (std::vector<int64_t>{2, 1, 3}));
  EXPECT_TESSEL_ERROR(l.num_shards(3), ErrorCode::kOutOfRange, "axis 3 is outside");
}

TEST(LayoutHelpers, Quirk_NumShardsOfMatchIsAnError) {
  Layout l({"match"}, mesh_2x2());
  EXPECT_TESSEL_ERROR(l.num_shards(0), kInvalid, "axis 0 is 'match', which has no shard count");
}

TEST(LayoutHelpers, FullyReplicatedAndBatchParallel) {
  Mesh m = mesh_2x2();
  EXPECT_TRUE(Layout::replicated(m, 2).is_fully_replicated());
  EXPECT_TRUE(Layout::replicated(m, 0).is_fully_replicated());
  EXPECT_FALSE(Layout({"x", "unsharded"}, m).is_fully_replicated());
  EXPECT_FALSE(Layout({"match"}, m).is_fully_replicated());
  EXPECT_TRUE(Layout({"x", "unsharded"}, m).is_batch_parallel());
  EXPECT_FALSE(Layout({"unsharded", "x"}, m).is_batch_parallel());
  EXPECT_FALSE(Layout::replicated(m, 0).is_batch_parallel());
}

TEST(LayoutHelpers, Quirk_SizeOneMeshDimIsNotFullyReplicated) {
  Layout l({"x"}, Mesh::from_string("|x=1|*CPU"));
  EXPECT_FALSE(l.is_fully_replicated());
  EXPECT_TRUE(l.is_equivalent(Layout::replicated(l.mesh(), 1)));
}

TEST(LayoutHelpers, LocalAndGlobalShapesEven) {
  Layout l({"x", "y"}, Mesh::from_string("|x=2,y=3|*CPU"));
  EXPECT_EQ(l.local_shape_from_global_shape(Shape{8, 6}), (Shape{4, 2}));
  EXPECT_EQ(l.global_shape_from_local_shape(Shape{4, 2}), (Shape{8, 6}));
  for (int64_t offset = 0; offset < 6; ++offset) {
    EXPECT_EQ(l.local_shape(Shape{8, 6}, offset), (Shape{4, 2}));
  }
  EXPECT_TESSEL_ERROR(l.local_shape_from_global_shape(Shape{8}), kInvalid,
                      "shape [8] has rank 1 but the layout has rank 2");
}

TEST(LayoutHelpers, Quirk_UnevenShapesUseChunksNotTruncation) {
  Layout l({"x"}, Mesh::from_string("|x=2|*CPU"));
  // TF truncates 5/2 to 2 and loses an element; tessel's largest chunk is 3 and the exact
  // per-device shapes add up to the whole.
  EXPECT_EQ(l.local_shape_from_global_shape(Shape{5}), (Shape{3}));
  EXPECT_EQ(l.local_shape(Shape{5}, 0), (Shape{3}));
  EXPECT_EQ(l.local_shape(Shape{5}, 1), (Shape{2}));
  Layout four({"x"}, Mesh::from_string("|x=4|*CPU"));
  EXPECT_EQ(four.local_shape(Shape{2}, 2), (Shape{0}));  // trailing shards may be empty
  EXPECT_EQ(four.local_shape_from_global_shape(Shape{2}), (Shape{1}));
}

TEST(LayoutHelpers, TfPartialShape_UnknownDimsAndRankAreKept) {
  // TF's LocalShapeFromGlobalShape(PartialTensorShape): a dynamic (-1) extent stays -1, the
  // unknown rank comes back as is; known extents as the Shape overload (largest chunk).
  Layout l({"x", "y", "unsharded"}, Mesh::from_string("|x=2,y=3|*CPU"));
  EXPECT_EQ(l.local_shape_from_global_shape(PartialShape({8, kUnknownDim, kUnknownDim})),
            PartialShape({4, kUnknownDim, kUnknownDim}));
  EXPECT_EQ(l.local_shape_from_global_shape(PartialShape({kUnknownDim, 6, 5})),
            PartialShape({kUnknownDim, 2, 5}));
  EXPECT_EQ(l.local_shape_from_global_shape(PartialShape({5, 7, 1})), PartialShape({3, 3, 1}));
  EXPECT_EQ(l.local_shape_from_global_shape(PartialShape({5, 7, 1})),
            PartialShape(l.local_shape_from_global_shape(Shape{5, 7, 1})));
  EXPECT_EQ(l.local_shape_from_global_shape(PartialShape::unknown_rank()),
            PartialShape::unknown_rank());
  const Layout replicated = Layout::replicated(l.mesh(), 2);
  EXPECT_EQ(replicated.local_shape_from_global_shape(PartialShape({kUnknownDim, 9})),
            PartialShape({kUnknownDim, 9}));
  EXPECT_TESSEL_ERROR(l.local_shape_from_global_shape(PartialShape({8, kUnknownDim})), kInvalid,
                      "shape [8,?] has rank 2 but the layout has rank 3");
  // A braced list still means the Shape overload.
  EXPECT_EQ(l.local_shape_from_global_shape({8, 6, 2}), (Shape{4, 2, 2}));
}

TEST(LayoutHelpers, OffsetToShardAndGlobalIndex) {
  Layout l({"y", "unsharded"}, Mesh::from_string("|x=2,y=2|*CPU"));
  std::vector<std::vector<int64_t>> expect = {{0, 0}, {1, 0}, {0, 0}, {1, 0}};
  EXPECT_EQ(l.offset_to_shard(), expect);
  Layout xy({"x", "y"}, Mesh::from_string("|x=2,y=3|*CPU"));
  EXPECT_EQ(xy.offset_tuple_to_global_index({1, 2}), 5);
  EXPECT_TESSEL_ERROR(xy.offset_tuple_to_global_index({2, 0}), ErrorCode::kOutOfRange,
                      "shard 2 of axis 0 is outside [0, 2)");
}

TEST(LayoutHelpers, ShardVector) {
  Layout l({"x", "y"}, Mesh::from_string("|x=2,y=3|*CPU"));
  EXPECT_EQ(l.shard_vector_string(),
            "shards:[(1,1),(1,2),(1,3),(2,1),(2,2),(2,3)] num_shards_per_dim:(2,3)");
}

TEST(LayoutHelpers, EqualityAndEquivalence) {
  Mesh m = Mesh::from_string("|x=2,y=1|*CPU");
  Layout a({"x", "y"}, m);
  Layout b({"x", "unsharded"}, m);
  EXPECT_NE(a, b);
  EXPECT_TRUE(a.is_equivalent(b));
  EXPECT_FALSE(a.is_equivalent(b.to_parted()));
  EXPECT_TRUE(a.is_equivalent_ignoring_type(b.to_parted()));
  EXPECT_FALSE(a.is_equivalent(Layout({"unsharded", "unsharded"}, m)));
  EXPECT_EQ(a, Layout::from_string(a.to_string()));
  EXPECT_EQ(a.hash(), Layout::from_string(a.to_string()).hash());
}

TEST(LayoutHelpers, DerivedLayouts) {
  Mesh m = mesh_2x2();
  Layout l({"x", "unsharded", "y"}, m);
  EXPECT_EQ(l.delete_dims({1}).sharding_spec_strings(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(l.delete_dims({-1}).rank(), 3);  // negative dims are ignored, as in TF
  EXPECT_EQ(l.transposed_2d().sharding_spec_strings(),
            (std::vector<std::string>{"x", "y", "unsharded"}));
  EXPECT_EQ(l.left_pad(5).sharding_spec_strings(),
            (std::vector<std::string>{"unsharded", "unsharded", "x", "unsharded", "y"}));
  EXPECT_EQ(l.to_parted().type(), LayoutType::kParted);
  EXPECT_TESSEL_ERROR(Layout::replicated(m, 1).transposed_2d(), kInvalid, "rank 1 is below 2");
}

TEST(LayoutExtensions, SeveralMeshDimsOnOneTensorDim) {
  Layout l({"x+y", "unsharded"}, Mesh::from_string("|x=2,y=3|*CPU"));
  EXPECT_EQ(l.num_shards(0), 6);
  // x is major: device at (x=1, y=0) holds shard 3.
  EXPECT_EQ(l.offset_to_shard()[3], (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(l.local_shape(Shape{12, 4}, 5), (Shape{2, 4}));
  Layout yx({"y+x"}, Mesh::from_string("|x=2,y=3|*CPU"));
  EXPECT_EQ(yx.offset_to_shard()[3], (std::vector<int64_t>{1}));  // (x=1,y=0): y*2 + x = 1
  EXPECT_TESSEL_ERROR(Layout({"x+x"}, mesh_2x2()), kInvalid, "Mesh dimension x was repeated");
  EXPECT_TESSEL_ERROR(Layout({"x+", "unsharded"}, mesh_2x2()), kInvalid, "empty mesh dimension");
}

TEST(LayoutExtensions, PartialDims) {
  Mesh m = mesh_2x2();
  Layout l = Layout::create(LayoutType::kStatic, {ShardingSpec::sharded({"x"})}, m,
                            {{"y", ReduceOp::kSum}});
  EXPECT_TRUE(l.is_partial());
  EXPECT_FALSE(l.is_fully_replicated());
  EXPECT_EQ(l.without_partial(), Layout({"x"}, m));
  EXPECT_TESSEL_ERROR(Layout({"x"}, m).with_partial({{"x", ReduceOp::kSum}}), kInvalid,
                      "mesh dimension x is partial and also shards a tensor dimension");
  EXPECT_TESSEL_ERROR(Layout({"x"}, m).with_partial({{"q", ReduceOp::kMax}}), kInvalid,
                      "partial dimension (q) refers to mesh dimension not contained in mesh");
  EXPECT_TESSEL_ERROR(Layout::replicated(m, 1).with_partial({{"y", ReduceOp::kSum}, {"y", ReduceOp::kMax}}),
                      kInvalid, "mesh dimension y is listed as partial twice");
  // Partial dims are kept in mesh order whatever order they are given in.
  Layout both = Layout::replicated(m, 1).with_partial({{"y", ReduceOp::kMax}, {"x", ReduceOp::kSum}});
  EXPECT_EQ(both.partial()[0].mesh_dim, "x");
  EXPECT_NE(both, Layout::replicated(m, 1).with_partial({{"y", ReduceOp::kSum}, {"x", ReduceOp::kSum}}));
}

}  // namespace
}  // namespace tessel
