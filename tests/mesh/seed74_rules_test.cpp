// Seed 74 (DTensor API): one test per business rule and error-table row that the core and mesh
// layers cover. BR-74-05 (pack/unpack eager only) and BR-74-06 (relayout directions) belong to
// the DTensor layer and are tested there.
#include <gtest/gtest.h>

#include "mesh/mesh_helpers.h"
#include "tessel/mesh/layout.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using testing::devices;
using testing::iota;
constexpr ErrorCode kInvalid = ErrorCode::kInvalidArgument;

TEST(Seed74, BR_74_01_GlobalDeviceIdsAreSequential) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {3}, {0, 1, 3}, {0, 1, 3}, devices(3)), kInvalid,
                      "global_device_ids must sequentially increase");
  EXPECT_NO_THROW(Mesh({"x"}, {3}, {5, 6, 7}, {5, 6, 7}, devices(3)));
}

TEST(Seed74, BR_74_02_ShardingSpecsAreUniqueMeshDims) {
  Mesh m = Mesh::from_string("|x=2,y=2|*CPU");
  EXPECT_TESSEL_ERROR(Layout({"y", "y"}, m), kInvalid, "Mesh dimension y was repeated");
  EXPECT_NO_THROW(Layout({"unsharded", "unsharded"}, m));  // UNSHARDED may repeat
  EXPECT_NO_THROW(Layout({"match", "match"}, m));          // so may MATCH
}

TEST(Seed74, BR_74_03_OneDeviceTypePerMesh) {
  std::vector<std::string> mixed = devices(2);
  mixed[1] = devices(2, "GPU")[1];
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, iota(2), iota(2), mixed), kInvalid,
                      "Devices containing multiple device_types");
}

TEST(Seed74, BR_74_04_XlaSpmdOnlyOnTpuMeshes) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, iota(2), iota(2), devices(2, "GPU"), "", {}, true),
                      kInvalid, "XLA SPMD is not currently not supported for GPU mesh.");
  EXPECT_NO_THROW(Mesh({"x"}, {2}, iota(2), iota(2), devices(2, "TPU"), "", {}, true));
}

TEST(Seed74, BR_74_07_ScalarLayoutIsFullyReplicated) {
  Mesh m = Mesh::from_string("|x=2|*CPU");
  Layout scalar = Layout::replicated(m, 0);
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_TRUE(scalar.is_fully_replicated());
  EXPECT_EQ(scalar.local_shape_from_global_shape(Shape{}), Shape{});
}

TEST(Seed74, StridesRule) {
  Mesh m = Mesh::create({{"a", 2}, {"b", 3}, {"c", 4}, {"d", 5}}, "CPU", "", 120);
  EXPECT_EQ(m.strides(), (std::vector<int64_t>{3 * 4 * 5, 4 * 5, 5, 1}));
}

TEST(Seed74, Input_LocalDeviceIdsAreASubsetOfGlobal) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, iota(2), {0, 2}, devices(2)), kInvalid,
                      "local device id 2 is not one of global_device_ids");
}

TEST(Seed74, Input_LocalDevicesMatchLocalIds) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, iota(2), {0, 1}, devices(1)), kInvalid,
                      "Variable local_device_ids does not have same size as local_devices.");
}

TEST(Seed74, Input_MeshNameDefaultsToEmpty) {
  EXPECT_EQ(Mesh({"x"}, {2}, iota(2), iota(2), devices(2)).name(), "");
}

TEST(Seed74, Error_EmptyGlobalDeviceIds) {
  EXPECT_TESSEL_ERROR(Mesh({}, {0}, {}, {}, devices(1)), kInvalid,
                      "Variable global_device_ids must be non-empty.");
}

TEST(Seed74, Error_NonSequentialGlobalDeviceIds) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, {1, 0}, {}, {}, "", devices(2)), kInvalid,
                      "global_device_ids must sequentially increase");
}

TEST(Seed74, Error_DimNamesDoNotMatchIdsRank) {
  EXPECT_TESSEL_ERROR(Mesh({"x", "y", "z"}, {2, 2}, iota(4), iota(4), devices(4)), kInvalid,
                      "Number of mesh dimensions does not match number of dimension names.");
}

TEST(Seed74, Error_DuplicateLocalDevices) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, iota(2), iota(2), {devices(1, "TPU")[0], devices(1, "TPU")[0]}),
                      kInvalid, "Duplicate devices found in mesh specification");
}

TEST(Seed74, Error_ShardingSpecNotAMeshDim) {
  EXPECT_TESSEL_ERROR(Layout({"batch"}, Mesh::from_string("|x=2|*CPU")), kInvalid,
                      "batch: A dimension sharding must either be a valid mesh dimension or "
                      "UNSHARDED.");
}

TEST(Seed74, Error_ShardingSpecUsesAMeshDimTwice) {
  EXPECT_TESSEL_ERROR(Layout({"x", "x"}, Mesh::from_string("|x=2|*CPU")), kInvalid,
                      "Mesh dimensions must be unique in a layout.");
}

TEST(Seed74, Error_XlaSpmdOnNonTpuMesh) {
  EXPECT_TESSEL_ERROR(
      Mesh::from_string("|x=2|0,1|0,1|/job:a/task:0/device:CPU:0,/job:a/task:0/device:CPU:1|"
                        "use_xla_spmd"),
      kInvalid, "XLA SPMD is not currently not supported for CPU mesh.");
}

}  // namespace
}  // namespace tessel
