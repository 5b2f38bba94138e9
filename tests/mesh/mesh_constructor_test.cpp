// TF's Python Mesh constructor checks (tf-dtensor-semantics.md §1.2), in TF's order, plus the
// parser checks (§1.3) that tessel also runs on this path. Checks 1, 5, 6, 7 are Python type
// checks and are tested in python/tests.
#include <gtest/gtest.h>

#include "mesh/mesh_helpers.h"
#include "tessel/mesh/mesh.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using testing::devices;
using testing::iota;
constexpr ErrorCode kInvalid = ErrorCode::kInvalidArgument;

TEST(MeshConstructor, ValidTwoByTwo) {
  Mesh m({"x", "y"}, {2, 2}, iota(4), iota(4), devices(4), "m");
  EXPECT_EQ(m.dim_names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(m.shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(m.size(), 4);
  EXPECT_EQ(m.name(), "m");
  EXPECT_EQ(m.device_type(), "CPU");
  EXPECT_FALSE(m.is_remote());
}

TEST(MeshConstructor, Check2_EmptyIds) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {0}, {}, {}, {}), kInvalid,
                      "Variable global_device_ids must be non-empty.");
}

TEST(MeshConstructor, Check3_IdsMustSequentiallyIncrease) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, {0, 2}, {0, 2}, devices(2)), kInvalid,
                      "global_device_ids must sequentially increase: [0,2]");
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {3}, {2, 1, 0}, {}, {}, "", devices(3)), kInvalid,
                      "global_device_ids must sequentially increase");
}

TEST(MeshConstructor, IdsAreNonNegative) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, {-1, 0}, {-1, 0}, devices(2)), kInvalid,
                      "Mesh: global_device_ids must be >= 0, got -1 in [-1,0]");
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {1}, {-5}, {}, {}, "", devices(1)), kInvalid,
                      "global_device_ids must be >= 0, got -5");
}

TEST(MeshConstructor, Check3_IdsNeedNotStartAtZero) {
  Mesh m({"x"}, {4}, iota(4, 4), iota(4, 4), devices(4));
  EXPECT_EQ(m.min_global_device_id(), 4);
  EXPECT_EQ(m.offset_of_device_id(6), 2);
  // TF treats ids as offsets here and fails; tessel maps ids to offsets first.
  EXPECT_EQ(m.local_device_locations()[3], (std::vector<int64_t>{3}));
}

TEST(MeshConstructor, Check4_DimNamesMatchIdsRank) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2, 2}, iota(4), iota(4), devices(4)), kInvalid,
                      "Number of mesh dimensions does not match number of dimension names.");
}

TEST(MeshConstructor, IdsShapeMustHoldTheIds) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {3}, iota(4), iota(4), devices(4)), kInvalid,
                      "global_device_ids of shape [3] hold 3 ids, but 4 were given");
}

TEST(MeshConstructor, Check8_EmptyDeviceLists) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, iota(2), {}, {}), kInvalid,
                      "Empty list of devices not allowed.");
}

TEST(MeshConstructor, Check9_DuplicateLocalDevices) {
  std::vector<std::string> devs = devices(2, "GPU");
  devs[1] = devs[0];
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, iota(2), iota(2), devs), kInvalid,
                      "Duplicate devices found in mesh specification");
}

TEST(MeshConstructor, Check9_OneCpuRepeatedIsAllowed) {
  const std::string cpu = "/job:localhost/replica:0/task:0/device:CPU:0";
  Mesh m({"x"}, {3}, iota(3), iota(3), {cpu, cpu, cpu});
  EXPECT_EQ(m.num_local_devices(), 3);
}

TEST(MeshConstructor, Check10_LocalIdsAndDevicesSameSize) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, iota(2), {0}, devices(2)), kInvalid,
                      "Variable local_device_ids does not have same size as local_devices.");
}

TEST(MeshConstructor, Check11_MoreLocalThanGlobal) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, iota(2), iota(3), devices(3)), kInvalid,
                      "Cannot have more local than gobal device IDs.");
}

TEST(MeshConstructor, LocalIdsMustBeSubsetOfGlobal) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, iota(2), {0, 5}, devices(2)), kInvalid,
                      "local device id 5 is not one of global_device_ids [0,1]");
}

TEST(MeshConstructor, Check12_DeviceTypeRequired) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {1}, iota(1), iota(1), {"/job:localhost/task:0"}), kInvalid,
                      "device_type is required");
}

TEST(MeshConstructor, Check12_OneDeviceType) {
  std::vector<std::string> devs = devices(2);
  devs[1] = "/job:localhost/replica:0/task:0/device:GPU:1";
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, iota(2), iota(2), devs), kInvalid,
                      "Devices containing multiple device_types : {CPU, GPU}");
}

TEST(MeshConstructor, Check12_TypesFromGlobalDevicesWhenNoLocal) {
  Mesh m({"x"}, {2}, iota(2), {}, {}, "", devices(2, "TPU"));
  EXPECT_TRUE(m.is_remote());
  EXPECT_EQ(m.device_type(), "TPU");
}

TEST(MeshConstructor, Check13_XlaSpmdOnlyOnTpu) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, iota(2), iota(2), devices(2), "", {}, true), kInvalid,
                      "XLA SPMD is not currently not supported for CPU mesh.");
  Mesh tpu({"x"}, {2}, iota(2), iota(2), devices(2, "TPU"), "", {}, true);
  EXPECT_TRUE(tpu.use_xla_spmd());
}

TEST(MeshConstructor, ParserRule_RepeatedDimName) {
  EXPECT_TESSEL_ERROR(Mesh({"x", "x"}, {2, 2}, iota(4), iota(4), devices(4)), kInvalid,
                      "repeated mesh dimension");
}

TEST(MeshConstructor, ParserRule_ReservedDimNames) {
  for (const char* name : {"unsharded", "match", "any"}) {
    EXPECT_TESSEL_ERROR(Mesh({name}, {2}, iota(2), iota(2), devices(2)), kInvalid,
                        std::string("mesh dimension name ") + name + " is reserved");
  }
}

TEST(MeshConstructor, ParserRule_DevicesNeedHostAndType) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {2}, iota(2), iota(2), {"/device:CPU:0", "/device:CPU:1"}),
                      kInvalid, "Failed to either identify host or device type");
}

TEST(MeshConstructor, ParserRule_UnevenLocalClusters) {
  EXPECT_TESSEL_ERROR(Mesh({"x"}, {3}, iota(3), iota(2), devices(2)), kInvalid,
                      "Uneven local clusters with global_ids 3 and local_devices ids 2");
}

TEST(MeshConstructor, DimNamesMayNotCollideWithTextSyntax) {
  for (const char* name : {"x+y", "a b", "x,y", "x|y", "x:y", ""}) {
    EXPECT_TESSEL_ERROR(Mesh({name}, {2}, iota(2), iota(2), devices(2)), kInvalid, "is invalid");
  }
}

TEST(MeshConstructor, ConvenienceFormAndCreate) {
  Mesh a({{"x", 2}, {"y", 3}}, devices(6));
  EXPECT_EQ(a.global_device_ids(), iota(6));
  EXPECT_EQ(a.local_device_ids(), iota(6));
  Mesh b = Mesh::create({{"x", 2}, {"y", 2}}, "CPU", "", 4);
  EXPECT_EQ(b.local_devices()[3], "/job:localhost/replica:0/task:0/device:CPU:3");
  Mesh c = Mesh::create({{"batch", -1}}, "CPU", "", 8);
  EXPECT_EQ(c.shape(), (std::vector<int64_t>{8}));
  Mesh d = Mesh::create({}, "CPU", "", 4);
  EXPECT_EQ(d.dim_names(), (std::vector<std::string>{"x"}));
  EXPECT_TESSEL_ERROR(Mesh::create({{"x", 8}}, "CPU", "", 4), kInvalid,
                      "need 8 devices but only 4 exist");
}

TEST(MeshConstructor, DimSizesMustBePositive) {
  EXPECT_TESSEL_ERROR(Mesh::from_string("|x=-1,y=-2|0,1|0,1|/job:a/task:0/device:CPU:0,/job:a/task:0/device:CPU:1"),
                      kInvalid, "mesh dimension x has size -1");
}

}  // namespace
}  // namespace tessel
