// DTensor (dtensor.h): the constructor's invariants, accessors and text form.
#include <gtest/gtest.h>

#include "tessel/dtensor/dtensor.h"
#include "tessel/dtensor/dtensor_api.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

constexpr ErrorCode kInvalid = ErrorCode::kInvalidArgument;

// Component i of a [rows, 2] f32 tensor laid out on x=4: rows follow chunk semantics.
std::vector<Tensor> row_blocks(Runtime& rt, const std::vector<int64_t>& rows) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    out.push_back(rt.device(static_cast<int>(i)).allocate(Shape{rows[i], 2}, DType::kF32));
  }
  return out;
}

TEST(DTensor, NullIsNotDefined) {
  DTensor d;
  EXPECT_FALSE(d.defined());
  EXPECT_FALSE(is_dtensor(d));
  EXPECT_EQ(d.num_components(), 0);
  EXPECT_EQ(d.to_string(), "DTensor(null)");
  EXPECT_TESSEL_ERROR(d.runtime(), ErrorCode::kFailedPrecondition, "runtime() of a null DTensor");
}

TEST(DTensor, ConstructorAcceptsBlocksAndKeepsStorage) {
  Runtime rt({.num_cpu_devices = 4});
  Layout rows({"x", "unsharded"}, Mesh::create({{"x", 4}}));
  std::vector<Tensor> parts = row_blocks(rt, {3, 3, 3, 1});
  DTensor d(rows, Shape{10, 2}, DType::kF32, parts, rt);
  EXPECT_TRUE(d.defined());
  EXPECT_EQ(d.shape(), (Shape{10, 2}));
  EXPECT_EQ(d.rank(), 2);
  EXPECT_EQ(d.dtype(), DType::kF32);
  EXPECT_EQ(d.nbytes(), 80);
  EXPECT_EQ(d.num_components(), 4);
  EXPECT_EQ(&d.runtime(), &rt);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(d.component(i).shares_storage_with(parts[static_cast<size_t>(i)]));
    EXPECT_EQ(&d.device(i), &rt.device(i));
  }
  EXPECT_EQ(d.component(3).shape(), (Shape{1, 2}));
}

TEST(DTensor, ToStringNamesShapeDtypeLayout) {
  Runtime rt({.num_cpu_devices = 4});
  Layout rows({"x", "unsharded"}, Mesh::create({{"x", 4}}));
  DTensor d(rows, Shape{10, 2}, DType::kF32, row_blocks(rt, {3, 3, 3, 1}), rt);
  EXPECT_EQ(d.to_string(), "DTensor(shape=[10,2], dtype=f32, layout=" + rows.to_string() + ")");
}

TEST(DTensor, ComponentIndexOutOfRange) {
  Runtime rt({.num_cpu_devices = 4});
  Layout rows({"x", "unsharded"}, Mesh::create({{"x", 4}}));
  DTensor d(rows, Shape{10, 2}, DType::kF32, row_blocks(rt, {3, 3, 3, 1}), rt);
  EXPECT_TESSEL_ERROR(d.component(4), ErrorCode::kOutOfRange, "component index 4 is outside the 4");
  EXPECT_TESSEL_ERROR(d.device(-1), ErrorCode::kOutOfRange, "component index -1");
}

TEST(DTensor, ErrorComponentShapeNamesComponentAndExpected) {
  Runtime rt({.num_cpu_devices = 4});
  Layout rows({"x", "unsharded"}, Mesh::create({{"x", 4}}));
  EXPECT_TESSEL_ERROR(DTensor(rows, Shape{10, 2}, DType::kF32, row_blocks(rt, {3, 3, 2, 2}), rt),
                      kInvalid,
                      "component 2 (/job:localhost/replica:0/task:0/device:CPU:2) has shape "
                      "[2,2], expected [3,2]");
}

TEST(DTensor, ErrorComponentCount) {
  Runtime rt({.num_cpu_devices = 4});
  Layout rows({"x", "unsharded"}, Mesh::create({{"x", 4}}));
  EXPECT_TESSEL_ERROR(DTensor(rows, Shape{9, 2}, DType::kF32, row_blocks(rt, {3, 3, 3}), rt),
                      kInvalid, "3 components given for the 4 local devices");
}

TEST(DTensor, ErrorComponentDtype) {
  Runtime rt({.num_cpu_devices = 4});
  Layout rows({"x", "unsharded"}, Mesh::create({{"x", 4}}));
  EXPECT_TESSEL_ERROR(DTensor(rows, Shape{10, 2}, DType::kI32, row_blocks(rt, {3, 3, 3, 1}), rt),
                      kInvalid,
                      "component 0 (/job:localhost/replica:0/task:0/device:CPU:0) has "
                      "dtype f32, expected i32");
}

TEST(DTensor, ErrorNullAndNonContiguousComponents) {
  Runtime rt({.num_cpu_devices = 4});
  Layout cols({"unsharded", "x"}, Mesh::create({{"x", 4}}));
  std::vector<Tensor> parts;
  for (int i = 0; i < 4; ++i) parts.push_back(rt.device(i).allocate(Shape{2, 1}, DType::kF32));
  std::vector<Tensor> with_null = parts;
  with_null[1] = Tensor();
  EXPECT_TESSEL_ERROR(DTensor(cols, Shape{2, 4}, DType::kF32, with_null, rt), kInvalid,
                      "component 1 (/job:localhost/replica:0/task:0/device:CPU:1) is null");
  std::vector<Tensor> strided = parts;
  strided[3] = rt.device(3).allocate(Shape{2, 3}, DType::kF32).slice(1, 1, 2);
  EXPECT_TESSEL_ERROR(
      DTensor(cols, Shape{2, 4}, DType::kF32, strided, rt), kInvalid,
      "component 3 (/job:localhost/replica:0/task:0/device:CPU:3) is not contiguous");
}

TEST(DTensor, ErrorLayoutsThatPlaceNoTensor) {
  Runtime rt({.num_cpu_devices = 4});
  Mesh mesh = Mesh::create({{"x", 4}});
  EXPECT_TESSEL_ERROR(DTensor(Layout(), Shape{}, DType::kF32, {}, rt), kInvalid,
                      "the empty layout places no tensor");
  EXPECT_TESSEL_ERROR(DTensor(Layout({"match"}, mesh), Shape{4}, DType::kF32, {}, rt), kInvalid,
                      "has a 'match' spec");
  EXPECT_TESSEL_ERROR(DTensor(Layout({"x"}, mesh), Shape{4, 1}, DType::kF32, {}, rt), kInvalid,
                      "shape [4,1] has rank 2 but layout");
  Layout single =
      Layout::single_device(Mesh::from_device("/job:localhost/replica:0/task:0/device:CPU:0"));
  EXPECT_TESSEL_ERROR(DTensor(single, Shape{}, DType::kF32, {}, rt), kInvalid,
                      "is not a mesh layout");
}

TEST(DTensor, ErrorMeshDeviceNotInRuntime) {
  Runtime rt({.num_cpu_devices = 2});
  Layout rows({"x"}, Mesh::create({{"x", 4}}));
  EXPECT_TESSEL_ERROR(DTensor(rows, Shape{4}, DType::kF32, {}, rt), kInvalid,
                      "/job:localhost/replica:0/task:0/device:CPU:2 unknown device. The mesh "
                      "device is not one of this runtime's");
}

TEST(DTensor, RemoteMeshHasNoComponents) {
  Runtime rt({.num_cpu_devices = 4});
  Mesh remote(
      {"x"}, {2}, {0, 1}, {}, {}, "",
      {"/job:worker/replica:0/task:1/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:1"});
  ASSERT_TRUE(remote.is_remote());
  DTensor d(Layout({"x"}, remote), Shape{6}, DType::kF32, {}, rt);
  EXPECT_TRUE(d.defined());
  EXPECT_EQ(d.num_components(), 0);
  EXPECT_EQ(d.shape(), Shape{6});
}

TEST(DTensor, HeaderExampleUnevenRows) {
  Runtime rt({.num_cpu_devices = 4});
  Tensor x = Tensor::random_uniform({10, 6}, DType::kF32, 7);
  DTensor d = copy_to_mesh(x, Layout({"x", "unsharded"}, Mesh::create({{"x", 4}})), rt);
  EXPECT_EQ(d.component(1).to_vector<float>(), x.slice(0, 3, 6).to_vector<float>());
  EXPECT_EQ(d.device(1).name(), "/job:localhost/replica:0/task:0/device:CPU:1");
  std::vector<int64_t> rows;
  for (const Tensor& c : d.components()) rows.push_back(c.shape()[0]);
  EXPECT_EQ(rows, (std::vector<int64_t>{3, 3, 3, 1}));
}

}  // namespace
}  // namespace tessel
