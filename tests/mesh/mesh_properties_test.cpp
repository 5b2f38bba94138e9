// Derived properties of a Mesh (tf-dtensor-semantics.md §1.4).
#include <gtest/gtest.h>

#include "mesh/mesh_helpers.h"
#include "tessel/mesh/mesh.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using testing::devices;
using testing::iota;

Mesh mesh_of(std::vector<MeshDimension> dims) {
  int64_t n = 1;
  for (const auto& d : dims) n *= d.size;
  return Mesh(dims, devices(static_cast<int>(n)));
}

TEST(MeshProperties, Strides) {
  EXPECT_EQ(mesh_of({{"a", 8}}).strides(), (std::vector<int64_t>{1}));
  EXPECT_EQ(mesh_of({{"a", 2}, {"b", 4}, {"c", 2}}).strides(), (std::vector<int64_t>{8, 2, 1}));
  EXPECT_EQ(mesh_of({{"a", 8}, {"b", 16}, {"c", 2}, {"d", 4}}).strides(),
            (std::vector<int64_t>{128, 8, 4, 1}));
}

TEST(MeshProperties, DeviceLocation) {
  Mesh m = mesh_of({{"x", 4}, {"batch", 8}});
  EXPECT_EQ(m.device_location(10), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(m.device_location(18), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(m.device_location(31), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(m.offset_of({3, 7}), 31);
  EXPECT_TESSEL_ERROR(m.device_location(32), ErrorCode::kInvalidArgument,
                      "Mesh offset cannot be negative or exceed Mesh's size");
  EXPECT_TESSEL_ERROR(m.device_location(-1), ErrorCode::kInvalidArgument, "Mesh offset");
}

TEST(MeshProperties, CoordsWrap) {
  Mesh m = mesh_of({{"x", 2}, {"y", 2}});
  EXPECT_EQ(m.coords(3), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(m.coords(5), (std::vector<int64_t>{0, 1}));
}

TEST(MeshProperties, UnravelIndexAndLocalLocations) {
  Mesh m = mesh_of({{"x", 3}, {"y", 2}});
  auto u = m.unravel_index();
  ASSERT_EQ(u.size(), 6u);
  EXPECT_EQ(u[5]["x"], 2);
  EXPECT_EQ(u[5]["y"], 1);
  EXPECT_EQ(m.local_device_locations()[3], (std::vector<int64_t>{1, 1}));
}

TEST(MeshProperties, DimSizeAndMembership) {
  Mesh m = mesh_of({{"x", 2}, {"y", 3}});
  EXPECT_EQ(m.dim_size("y"), 3);
  EXPECT_TRUE(m.contains_dim("x"));
  EXPECT_FALSE(m.contains_dim("z"));
  EXPECT_TESSEL_ERROR(m.dim_size("z"), ErrorCode::kNotFound,
                      "Dimension z does not exist in mesh.Available dimensions: x,y");
}

TEST(MeshProperties, MinGlobalIdAndRemote) {
  Mesh m({"x"}, {2}, iota(2, 6), {}, {}, "", devices(2));
  EXPECT_EQ(m.min_global_device_id(), 6);
  EXPECT_TRUE(m.is_remote());
  EXPECT_EQ(m.local_device_locations().size(), 0u);
}

TEST(MeshProperties, SingleDeviceMesh) {
  Mesh m = Mesh::from_device("/job:localhost/replica:0/task:0/device:GPU:1");
  EXPECT_TRUE(m.is_single_device());
  EXPECT_TRUE(m.dim_names().empty());
  EXPECT_TRUE(m.shape().empty());
  EXPECT_EQ(m.size(), 0);
  EXPECT_EQ(m.device_type(), "GPU");
  EXPECT_EQ(m.to_string(), "/job:localhost/replica:0/task:0/device:GPU:1");
  EXPECT_TESSEL_ERROR(Mesh::from_device(""), ErrorCode::kInvalidArgument, "Single device is empty.");
}

// Found by the mesh_from_proto fuzzer: a single device that is not a device name was accepted
// and printed as text that Mesh::from_string rejects. Every path now takes full names only.
TEST(MeshProperties, SingleDeviceMustBeAFullDeviceName) {
  for (const char* bad : {"/job:localhost/task:0/device:CPU:0vice:CPU:0", "CPU:0", "/device:CPU:0",
                          "/job:a/task:0", "mesh:/job:a/task:0/device:CPU:0",
                          "/job:a/task:0/device:CPU:0|x",
                          // the legacy "<type>:<id>" form parses as a device name but has 4
                          // ':'-pieces, which from_string refuses (found by the fuzzer again)
                          "/job:locahloscalhoempty_layout/task:0/gpu:90"}) {
    SCOPED_TRACE(bad);
    EXPECT_TESSEL_ERROR(Mesh::from_device(bad), ErrorCode::kInvalidArgument,
                        "is not a full device name");
  }
  for (const char* good :
       {"/job:localhost/task:0/device:CPU:0", "/job:w/replica:1/task:2/device:TPU:3"}) {
    const Mesh m = Mesh::from_device(good);
    EXPECT_EQ(Mesh::from_string(m.to_string()), m);
  }
}

TEST(MeshProperties, EmptyMesh) {
  Mesh m;
  EXPECT_TRUE(m.is_empty());
  EXPECT_EQ(m.size(), 0);
  EXPECT_EQ(m.device_type(), "");
  EXPECT_EQ(m.to_string(), "empty_mesh");
  EXPECT_EQ(Mesh::from_string("empty_mesh"), m);
}

TEST(MeshProperties, HostMeshDropsNameGlobalDevicesAndFlag) {
  Mesh gpu({"x"}, {2}, iota(2), iota(2), devices(2, "GPU"), "name_not_preserved");
  Mesh host = gpu.host_mesh();
  EXPECT_EQ(host, Mesh({"x"}, {2}, iota(2), iota(2), devices(2, "CPU")));
  EXPECT_EQ(host.name(), "");
  EXPECT_EQ(host.device_type(), "CPU");
}

TEST(MeshProperties, EqualityAndHash) {
  Mesh a = mesh_of({{"x", 2}});
  Mesh b = Mesh::from_string(a.to_string());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  Mesh named({{"x", 2}}, devices(2), "other");
  EXPECT_NE(a, named);
  EXPECT_EQ(a.global_fingerprint(), named.global_fingerprint());  // names are not global
}

TEST(MeshProperties, FingerprintIgnoresLocalParts) {
  Mesh full({"x"}, {2}, iota(2), iota(2), devices(2), "", devices(2));
  Mesh half({"x"}, {2}, iota(2), {1}, {devices(2)[1]}, "", devices(2));
  EXPECT_EQ(full.global_fingerprint(), half.global_fingerprint());
  EXPECT_NE(full, half);
}

}  // namespace
}  // namespace tessel
