// Layout text form (tf-dtensor-semantics.md §2.5), tessel's extensions, and the proto form (§3).
#include <gtest/gtest.h>

#include "mesh/mesh_helpers.h"
#include "tessel/mesh/layout.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

constexpr ErrorCode kInvalid = ErrorCode::kInvalidArgument;
const std::string kTpuMesh =
    "|batch=2,x=2|0,1,2,3|0,1,2,3|/job:localhost/replica:0/task:0/device:TPU:0,/job:localhost/"
    "replica:0/task:0/device:TPU:1,/job:localhost/replica:0/task:0/device:TPU:2,/job:localhost/"
    "replica:0/task:0/device:TPU:3";

TEST(LayoutText, ReferenceExamplesRoundTrip) {
  for (const std::string& text : {
           "sharding_specs:batch,x, mesh:" + kTpuMesh,
           "sharding_specs:unsharded,unsharded, mesh:" + kTpuMesh,
           "sharding_specs: mesh:" + kTpuMesh,
           "parted:batch,unsharded, mesh:" + kTpuMesh,
           std::string("sharding_specs:any, mesh:|x=1|0|0|/job:localhost/task:0/device:CPU:0"),
           std::string("maximal:true, mesh:/job:localhost/task:0/device:CPU:0"),
           std::string("empty_layout"),
       }) {
    Layout l = Layout::from_string(text);
    EXPECT_EQ(l.to_string(), text);
    EXPECT_EQ(Layout::from_string(l.to_string()), l);
    EXPECT_EQ(Layout::from_proto(l.as_proto()), l) << text;
  }
}

TEST(LayoutText, Types) {
  EXPECT_EQ(Layout::from_string("sharding_specs:batch,x, mesh:" + kTpuMesh).type(),
            LayoutType::kStatic);
  EXPECT_EQ(Layout::from_string("parted:batch,x, mesh:" + kTpuMesh).type(), LayoutType::kParted);
  EXPECT_EQ(Layout::from_string("maximal:true, mesh:/job:localhost/task:0/device:CPU:0").type(),
            LayoutType::kSingleDevice);
  EXPECT_EQ(Layout::from_string("empty_layout").type(), LayoutType::kEmpty);
  EXPECT_EQ(Layout(), Layout::from_string("empty_layout"));
}

TEST(LayoutText, RankZeroDiffersFromRankOneReplicated) {
  Layout zero = Layout::from_string("sharding_specs: mesh:" + kTpuMesh);
  Layout one = Layout::from_string("sharding_specs:unsharded, mesh:" + kTpuMesh);
  EXPECT_EQ(zero.rank(), 0);
  EXPECT_EQ(one.rank(), 1);
  EXPECT_NE(zero, one);
}

TEST(LayoutText, ItemCount) {
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs:x,mesh:|x=2|*CPU"), kInvalid,
                      "Expected 2 items but found 1");
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs:x, a b mesh:|x=2|*CPU"), kInvalid,
                      "Expected 2 items but found 4");
}

TEST(LayoutText, MeshErrorsComeBeforePrefixErrors) {
  EXPECT_TESSEL_ERROR(Layout::from_string("bogus:x, mesh:|x=2|0,1|0"), kInvalid,
                      "Expected either 5, 6, 7 or 3 mesh parts");
  EXPECT_TESSEL_ERROR(Layout::from_string("bogus:x, mesh:|x=2|*CPU"), kInvalid,
                      "Unknown layout type prefix");
}

TEST(LayoutText, MeshPrefixIsOptional) {
  EXPECT_EQ(Layout::from_string("sharding_specs:x, |x=2|*CPU"),
            Layout::from_string("sharding_specs:x, mesh:|x=2|*CPU"));
}

TEST(LayoutText, Quirk_MissingTrailingCommaIsAnErrorNotADroppedSpec) {
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs:x,y mesh:|x=2,y=2|*CPU"), kInvalid,
                      "sharding specs 'x,y' must end with ','");
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs:x mesh:|x=2|*CPU"), kInvalid,
                      "must end with ','");
}

TEST(LayoutText, ScalarSpec) {
  Layout l = Layout::from_string("sharding_specs:scalar, mesh:|x=2|*CPU");
  EXPECT_EQ(l.rank(), 0);
  EXPECT_TRUE(l.is_fully_replicated());
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs:scalar,x, mesh:|x=2|*CPU"), kInvalid,
                      "A scalar sharding_spec can only be used as a single sharding_spec "
                      "instruction, not as part of list of sharding_specs as attempted here with "
                      "2 sharding_specs");
  // TF's GetLayout checks every spec against the mesh first, then scalar and repeats in order.
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs:x,scalar,scalar, mesh:|x=2|*CPU"),
                      kInvalid, "as attempted here with 3 sharding_specs");
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs:z,scalar, mesh:|x=2|*CPU"), kInvalid,
                      "sharding spec (z) refers to mesh dimension not contained in mesh");
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs:x,x,scalar, mesh:|x=2|*CPU"), kInvalid,
                      "Attempted to shard two or more tensor dimensions over mesh dimension x");
}

TEST(LayoutText, ScalarSpecOnTheConstructorPaths) {
  const Mesh mesh = Mesh::from_string("|x=2|*CPU");
  // TF's GetLayout (Layout::create, from_proto): the sole "scalar" spec is a rank-0 layout.
  const Layout scalar = Layout::create(LayoutType::kStatic, {ShardingSpec::parse("scalar")}, mesh);
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar, Layout::replicated(mesh, 0));
  EXPECT_EQ(Layout::from_proto(scalar.as_proto()), scalar);
  EXPECT_TESSEL_ERROR(
      Layout::create(LayoutType::kStatic,
                     {ShardingSpec::parse("x"), ShardingSpec::parse("scalar")}, mesh),
      kInvalid,
      "A scalar sharding_spec can only be used as a single sharding_spec instruction, not as part "
      "of list of sharding_specs as attempted here with 2 sharding_specs");
  // TF's Python constructor checks first: "scalar" is not a mesh dimension there.
  EXPECT_TESSEL_ERROR(Layout({"scalar"}, mesh), kInvalid,
                      "scalar: A dimension sharding must either be a valid mesh dimension or "
                      "UNSHARDED.");
  EXPECT_TESSEL_ERROR(Layout({"x", "scalar"}, mesh), kInvalid,
                      "scalar: A dimension sharding must either be a valid mesh dimension or "
                      "UNSHARDED.");
  EXPECT_TESSEL_ERROR(ShardingSpec::parse("scalar+x"), kInvalid,
                      "'scalar' cannot be combined with '+' in 'scalar+x'");
}

TEST(LayoutText, ParserRunsTheCppValidation) {
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs:z, mesh:|x=2|*CPU"), kInvalid,
                      "sharding spec (z) refers to mesh dimension not contained in mesh");
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs:x,x, mesh:|x=2|*CPU"), kInvalid,
                      "Attempted to shard two or more tensor dimensions over mesh dimension x");
  EXPECT_TESSEL_ERROR(
      Layout::from_string("sharding_specs:x, mesh:/job:localhost/task:0/device:CPU:0"), kInvalid,
      "type is single device, but mesh is not single device");
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs: mesh:empty_mesh"), kInvalid,
                      "type is empty, but mesh is not empty");
}

TEST(LayoutText, ExtensionSeveralMeshDims) {
  const std::string text = "sharding_specs:x+y,unsharded, mesh:|x=2,y=2|0,1,2,3|0,1,2,3|"
                           "/job:localhost/task:0/device:CPU:0,/job:localhost/task:0/device:CPU:1,"
                           "/job:localhost/task:0/device:CPU:2,/job:localhost/task:0/device:CPU:3";
  Layout l = Layout::from_string(text);
  EXPECT_EQ(l.to_string(), text);
  EXPECT_EQ(l.num_shards(0), 4);
  EXPECT_EQ(Layout::from_proto(l.as_proto()), l);
}

TEST(LayoutText, ExtensionPartial) {
  const std::string mesh = "|x=2,y=2|*CPU";
  Layout l = Layout::from_string("sharding_specs:x,unsharded, partial:sum(y), mesh:" + mesh);
  ASSERT_EQ(l.partial().size(), 1u);
  EXPECT_EQ(l.partial()[0], (PartialDim{"y", ReduceOp::kSum}));
  EXPECT_EQ(Layout::from_string(l.to_string()), l);
  EXPECT_EQ(Layout::from_proto(l.as_proto()), l);
  Layout two = Layout::from_string("sharding_specs: partial:max(y),mean(x), mesh:" + mesh);
  EXPECT_EQ(two.to_string().substr(0, 38), "sharding_specs: partial:mean(x),max(y)");
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs:x, partial:sum(y) mesh:" + mesh),
                      kInvalid, "partial dimensions 'sum(y)' must end with ','");
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs:x, partial:y, mesh:" + mesh), kInvalid,
                      "malformed partial dimension 'y'");
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs:x, partial:avg(y), mesh:" + mesh),
                      kInvalid, "avg");
  EXPECT_TESSEL_ERROR(Layout::from_string("sharding_specs:x, partial:sum(x), mesh:" + mesh),
                      kInvalid, "mesh dimension x is partial and also shards");
}

TEST(LayoutText, ExtensionsNeverParseAsTensorFlowLayouts) {
  // TF requires exactly two space-separated items and a mesh dim per spec; both extensions
  // break one of those rules, so TF rejects them instead of misreading them.
  const std::string with_partial = "sharding_specs:x, partial:sum(y), mesh:|x=2,y=2|*CPU";
  EXPECT_EQ(std::count(with_partial.begin(), with_partial.end(), ' '), 2);
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x+y=2|*CPU"), kInvalid, "is invalid");
}

TEST(LayoutProtoForm, LegacyUnknownTypeWithRealMeshReadsAsStatic) {
  Layout l({"x"}, Mesh::from_string("|x=2|*CPU"));
  std::string bytes = l.as_proto();
  // Drop field 3 (type = STATIC = 1, encoded as 0x18 0x01) to mimic a pre-type proto.
  const std::string type_field("\x18\x01", 2);
  const size_t pos = bytes.rfind(type_field);
  ASSERT_NE(pos, std::string::npos);
  bytes.erase(pos, 2);
  EXPECT_EQ(Layout::from_proto(bytes), l);
}

}  // namespace
}  // namespace tessel
