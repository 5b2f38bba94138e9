// Box arithmetic (num_elements, contains, to_string, intersect) and copy_box: exact values for
// regions of rank 0 to 3 (merged and unmerged contiguous runs, empty regions), and every error.
#include <gtest/gtest.h>

#include <vector>

#include "tessel/core/box.h"
#include "tessel/runtime/runtime.h"
#include "testing/device_copy_counter.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

// Row-major flat index of global index `g` in an array of extents `dims`.
int64_t flat(const std::vector<int64_t>& g, const std::vector<int64_t>& dims) {
  int64_t f = 0;
  for (size_t d = 0; d < dims.size(); ++d) f = f * dims[d] + g[d];
  return f;
}

// Calls f(global_index) for every element of `box`, in row-major order.
template <typename F>
void for_each_index(const Box& box, F&& f) {
  if (box.empty()) return;
  std::vector<int64_t> g = box.offsets;
  while (true) {
    f(g);
    int d = box.rank() - 1;
    while (d >= 0 && ++g[d] == box.offsets[d] + box.extents[d]) {
      g[d] = box.offsets[d];
      --d;
    }
    if (d < 0) return;
  }
}

// The block `box` of a global array of extents `dims` whose elements are their flat index.
Tensor block_of_indices(const Box& box, const std::vector<int64_t>& dims, DType dtype = DType::kI64) {
  std::vector<double> v;
  for_each_index(box, [&](const std::vector<int64_t>& g) { v.push_back(static_cast<double>(flat(g, dims))); });
  return Tensor::from_vector<double>(v, Shape(box.extents)).astype(dtype);
}

// What `dst` (holding `dst_block`, filled with -1) holds after copying `region` from the global
// index array: the flat index inside the region, -1 elsewhere.
std::vector<double> expected_after_copy(const Box& dst_block, const Box& region,
                                        const std::vector<int64_t>& dims) {
  std::vector<double> v;
  for_each_index(dst_block, [&](const std::vector<int64_t>& g) {
    const Box element{g, std::vector<int64_t>(g.size(), 1)};
    v.push_back(region.contains(element) ? static_cast<double>(flat(g, dims)) : -1.0);
  });
  return v;
}

// `on`: both blocks in that device's memory instead of the host's (a simulated GPU's here: the
// copy must then stay in device memory, counted by `counter`).
void expect_copy(const std::vector<int64_t>& dims, const Box& src_block, const Box& dst_block,
                 const Box& region, DType dtype, Device* on = nullptr,
                 testing::DeviceCopyCounter* counter = nullptr) {
  SCOPED_TRACE("src " + src_block.to_string() + " dst " + dst_block.to_string() + " region " +
               region.to_string() + " " + std::string(dtype_name(dtype)));
  Tensor src = block_of_indices(src_block, dims, dtype);
  Tensor dst = Tensor::full(Shape(dst_block.extents), dtype, -1);
  if (on != nullptr) {
    Tensor device_src = on->allocate(src.shape(), dtype);
    device_src.copy_from(src);
    Tensor device_dst = on->allocate(dst.shape(), dtype);
    device_dst.copy_from(dst);
    src = device_src;
    dst = device_dst;
  }
  const int64_t to_host = counter ? counter->to_host(0) : 0;
  const int64_t on_device = counter ? counter->on_device(0) : 0;
  copy_box(src, src_block.offsets, dst, dst_block.offsets, region);
  if (counter != nullptr) {
    EXPECT_EQ(counter->to_host(0), to_host);  // nothing staged through the host
    EXPECT_EQ(counter->on_device(0) - on_device,
              region.num_elements() * static_cast<int64_t>(dtype_size(dtype)));
  }
  EXPECT_EQ(dst.to_host().to_doubles(), expected_after_copy(dst_block, region, dims));
}

TEST(BoxTest, NumElementsAndEmpty) {
  EXPECT_EQ((Box{{0, 4}, {4, 6}}).num_elements(), 24);
  EXPECT_EQ(Box{}.num_elements(), 1);  // rank 0: one element
  EXPECT_FALSE(Box{}.empty());
  EXPECT_EQ((Box{{3, 0}, {0, 5}}).num_elements(), 0);
  EXPECT_TRUE((Box{{3, 0}, {0, 5}}).empty());
}

TEST(BoxTest, Contains) {
  const Box a{{0, 4}, {4, 6}};
  EXPECT_TRUE(a.contains(a));
  EXPECT_TRUE(a.contains(Box{{1, 5}, {3, 5}}));
  EXPECT_FALSE(a.contains(Box{{1, 5}, {4, 5}}));  // rows [1,5) leave [0,4)
  EXPECT_FALSE(a.contains(Box{{0, 3}, {1, 1}}));  // column 3 is left of [4,10)
  // An empty box lies inside every box of its rank, wherever its offsets are.
  EXPECT_TRUE(a.contains(Box{{100, -7}, {0, 3}}));
  EXPECT_FALSE(a.contains(Box{{0}, {0}}));  // rank differs
  EXPECT_TRUE(Box{}.contains(Box{}));
}

TEST(BoxTest, ToString) {
  EXPECT_EQ((Box{{0, 4}, {4, 6}}).to_string(), "[0:4, 4:10]");
  EXPECT_EQ((Box{{2}, {0}}).to_string(), "[2:2]");
  EXPECT_EQ(Box{}.to_string(), "[]");
}

TEST(BoxTest, IntersectIsTheCommonPart) {
  const Box a{{0, 4}, {4, 6}};
  const Box b{{2, 0}, {4, 8}};
  EXPECT_EQ(intersect(a, b), (Box{{2, 4}, {2, 4}}));
  EXPECT_EQ(intersect(b, a), (Box{{2, 4}, {2, 4}}));
  EXPECT_EQ(intersect(a, a), a);
  // Disjoint in the columns: extent 0 there, the rows still meet.
  const Box c = intersect(a, Box{{1, 10}, {2, 3}});
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(c.extents, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(intersect(Box{}, Box{}), Box{});
}

TEST(BoxTest, IntersectOfDifferentRanksIsInvalidArgument) {
  EXPECT_TESSEL_ERROR(intersect(Box{{0}, {4}}, Box{{0, 0}, {4, 4}}), ErrorCode::kInvalidArgument,
                      "Box: intersect: boxes [0:4] and [0:4, 0:4] have ranks 1 and 2");
}

TEST(BoxCopy, TwoDimensionalRegionsExactValues) {
  const std::vector<int64_t> dims{10, 12};
  for (DType dtype : {DType::kF32, DType::kI64, DType::kBF16}) {
    // Rows of src, columns of dst: one run per row.
    expect_copy(dims, Box{{3, 0}, {3, 12}}, Box{{0, 4}, {10, 4}}, Box{{3, 4}, {3, 4}}, dtype);
    // Full rows in both: one memcpy of the whole region.
    expect_copy(dims, Box{{2, 0}, {6, 12}}, Box{{0, 0}, {10, 12}}, Box{{4, 0}, {3, 12}}, dtype);
    // A single element, and the corners of the blocks.
    expect_copy(dims, Box{{0, 0}, {10, 12}}, Box{{5, 5}, {2, 2}}, Box{{6, 6}, {1, 1}}, dtype);
    expect_copy(dims, Box{{1, 1}, {4, 4}}, Box{{0, 0}, {6, 6}}, Box{{1, 1}, {4, 4}}, dtype);
  }
}

TEST(BoxCopy, RankThreeMergesTrailingFullDimensions) {
  const std::vector<int64_t> dims{4, 5, 6};
  // Dims 1 and 2 full in both: runs of 2*5*6 elements.
  expect_copy(dims, Box{{0, 0, 0}, {4, 5, 6}}, Box{{1, 0, 0}, {3, 5, 6}}, Box{{1, 0, 0}, {2, 5, 6}},
              DType::kF32);
  // Dim 2 full in both, dim 1 partial in dst: runs of 6 elements.
  expect_copy(dims, Box{{0, 0, 0}, {4, 5, 6}}, Box{{0, 2, 0}, {4, 3, 6}}, Box{{1, 2, 0}, {3, 2, 6}},
              DType::kI64);
  // Dim 2 full in src only: no merging.
  expect_copy(dims, Box{{0, 0, 0}, {4, 5, 6}}, Box{{0, 0, 2}, {4, 5, 3}}, Box{{0, 1, 2}, {4, 3, 3}},
              DType::kBF16);
}

// Within one device's memory the region moves by strided copies on the device
// (DeviceMemoryOps::copy_rows), never through the host: the cases above, on a simulated GPU.
TEST(BoxCopy, WithinDeviceMemoryStaysOnTheDevice) {
  Runtime rt({.num_cpu_devices = 1, .num_simulated_gpu_devices = 1});
  Device* gpu = rt.gpu_devices()[0];
  testing::DeviceCopyCounter counter;
  const std::vector<int64_t> d2{10, 12};
  for (DType dtype : {DType::kF32, DType::kI64, DType::kBF16}) {
    expect_copy(d2, Box{{3, 0}, {3, 12}}, Box{{0, 4}, {10, 4}}, Box{{3, 4}, {3, 4}}, dtype, gpu, &counter);
    expect_copy(d2, Box{{2, 0}, {6, 12}}, Box{{0, 0}, {10, 12}}, Box{{4, 0}, {3, 12}}, dtype, gpu, &counter);
    expect_copy(d2, Box{{0, 0}, {10, 12}}, Box{{5, 5}, {2, 2}}, Box{{6, 6}, {1, 1}}, dtype, gpu, &counter);
    expect_copy(d2, Box{{1, 1}, {4, 4}}, Box{{0, 0}, {6, 6}}, Box{{1, 1}, {4, 4}}, dtype, gpu, &counter);
  }
  const std::vector<int64_t> d3{4, 5, 6};
  expect_copy(d3, Box{{0, 0, 0}, {4, 5, 6}}, Box{{1, 0, 0}, {3, 5, 6}}, Box{{1, 0, 0}, {2, 5, 6}},
              DType::kF32, gpu, &counter);
  expect_copy(d3, Box{{0, 0, 0}, {4, 5, 6}}, Box{{0, 2, 0}, {4, 3, 6}}, Box{{1, 2, 0}, {3, 2, 6}},
              DType::kI64, gpu, &counter);
  expect_copy(d3, Box{{0, 0, 0}, {4, 5, 6}}, Box{{0, 0, 2}, {4, 5, 3}}, Box{{0, 1, 2}, {4, 3, 3}},
              DType::kBF16, gpu, &counter);
  expect_copy(std::vector<int64_t>{5, 3, 4, 2}, Box{{0, 0, 0, 0}, {5, 3, 4, 2}},
              Box{{1, 1, 1, 0}, {3, 2, 2, 2}}, Box{{2, 1, 1, 0}, {2, 2, 2, 1}}, DType::kF32, gpu,
              &counter);
  expect_copy(std::vector<int64_t>{}, Box{}, Box{}, Box{}, DType::kF32, gpu, &counter);  // rank 0
}

TEST(BoxCopy, RankZeroCopiesTheOneElement) {
  const Tensor src = Tensor::full(Shape{}, DType::kF32, 7.5);
  Tensor dst = Tensor::full(Shape{}, DType::kF32, -1);
  copy_box(src, {}, dst, {}, Box{});
  EXPECT_EQ(dst.to_doubles(), std::vector<double>{7.5});
}

TEST(BoxCopy, EmptyRegionCopiesNothing) {
  const std::vector<int64_t> dims{4, 4};
  expect_copy(dims, Box{{0, 0}, {4, 4}}, Box{{0, 0}, {4, 4}}, Box{{2, 1}, {0, 3}}, DType::kF32);
  // Empty source and destination tensors.
  const Tensor src = Tensor::zeros({0, 4}, DType::kF32);
  Tensor dst = Tensor::zeros({2, 0}, DType::kF32);
  copy_box(src, {3, 0}, dst, {0, 4}, Box{{3, 0}, {0, 0}});
}

TEST(BoxCopy, RegionOutsideTheSourceOrDestinationIsInvalidArgument) {
  const Tensor src = Tensor::zeros({2, 3}, DType::kF32);
  Tensor dst = Tensor::zeros({4, 4}, DType::kF32);
  EXPECT_TESSEL_ERROR(copy_box(src, {1, 0}, dst, {0, 0}, Box{{0, 0}, {2, 2}}), ErrorCode::kInvalidArgument,
                      "Box: copy_box: region [0:2, 0:2] is not inside the source block [1:3, 0:3]");
  EXPECT_TESSEL_ERROR(copy_box(src, {0, 0}, dst, {0, 1}, Box{{0, 0}, {2, 2}}), ErrorCode::kInvalidArgument,
                      "region [0:2, 0:2] is not inside the destination block [0:4, 1:5]");
}

TEST(BoxCopy, BadArgumentsAreInvalidArgument) {
  const Tensor src = Tensor::zeros({2, 3}, DType::kF32);
  Tensor dst = Tensor::zeros({2, 3}, DType::kF32);
  const Box all{{0, 0}, {2, 3}};
  Tensor f64 = Tensor::zeros({2, 3}, DType::kF64);
  EXPECT_TESSEL_ERROR(copy_box(src, {0, 0}, f64, {0, 0}, all), ErrorCode::kInvalidArgument,
                      "copy_box: source is f32 but destination is f64");
  EXPECT_TESSEL_ERROR(copy_box(src, {0}, dst, {0, 0}, all), ErrorCode::kInvalidArgument,
                      "copy_box: source origin [0] has 1 entries for a tensor of rank 2");
  EXPECT_TESSEL_ERROR(copy_box(src, {0, 0}, dst, {0, 0}, Box{{0}, {2}}), ErrorCode::kInvalidArgument,
                      "region [0:2] is not inside the source block [0:2, 0:3]");
  EXPECT_TESSEL_ERROR(copy_box(src, {0, 0}, dst, {0, 0}, Box{{0, 0}, {2}}), ErrorCode::kInvalidArgument,
                      "copy_box: region has offsets [0,0] and extents [2]");
  EXPECT_TESSEL_ERROR(copy_box(src, {0, 0}, dst, {0, 0}, Box{{0, 0}, {-1, 2}}), ErrorCode::kInvalidArgument,
                      "copy_box: region has offsets [0,0] and extents [-1,2]");
  EXPECT_TESSEL_ERROR(copy_box(Tensor(), {0, 0}, dst, {0, 0}, all), ErrorCode::kInvalidArgument,
                      "copy_box: source is a null tensor");
  const Tensor wide = Tensor::zeros({2, 6}, DType::kF32);
  EXPECT_TESSEL_ERROR(copy_box(wide.slice(1, 0, 3), {0, 0}, dst, {0, 0}, all), ErrorCode::kInvalidArgument,
                      "copy_box: source of shape [2,3] is a strided view");
}

}  // namespace
}  // namespace tessel
