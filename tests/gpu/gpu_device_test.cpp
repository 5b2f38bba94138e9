// GPU devices: names, memory accounting, copies between host and device, events, selection.
#include <optional>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <gmock/gmock.h>

#include "gpu_test_util.h"
#include "tessel/core/box.h"
#include "tessel/core/error.h"
#include "tessel/runtime/gpu_event.h"
#include "testing/scoped_env.h"

namespace tessel {
namespace {

using testing::GpuTest;
using ::testing::HasSubstr;
using testing::ScopedEnv;

template <typename F>
void expect_error(F&& f, ErrorCode code, const std::string& fragment) {
  try {
    f();
    FAIL() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(fragment));
  }
}

TEST_F(GpuTest, OneDevicePerVisibleGpuNamedAsTensorFlowDoes) {
  ASSERT_EQ(num_gpus(), visible_gpu_count());
  EXPECT_EQ(gpu().name(), "/job:localhost/replica:0/task:0/device:GPU:0");
  EXPECT_EQ(gpu().device_type(), "GPU");
  EXPECT_EQ(gpu().gpu_ordinal(), 0);
  EXPECT_NE(gpu().cuda_stream(), nullptr);
  EXPECT_EQ(gpu().memory_space(), MemorySpace::cuda(0));
  EXPECT_EQ(&runtime().device("/device:GPU:0"), &gpu());
  EXPECT_EQ(runtime().device(0).gpu_ordinal(), -1);  // CPU devices are unchanged
  EXPECT_EQ(runtime().device(0).cuda_stream(), nullptr);
}

TEST_F(GpuTest, MemoryStatsCountLiveAndPeakBytesAndTheCacheReusesBlocks) {
  const int64_t before = gpu().memory_stats().live_bytes;
  const void* first = nullptr;
  {
    Tensor t = gpu().allocate(Shape{1 << 20}, DType::kF32);
    first = t.data_ptr();
    EXPECT_EQ(gpu().memory_stats().live_bytes, before + (4 << 20));
    EXPECT_GE(gpu().memory_stats().peak_bytes, before + (4 << 20));
  }
  EXPECT_EQ(gpu().memory_stats().live_bytes, before);
  Tensor again = gpu().allocate(Shape{1 << 20}, DType::kF32, /*zero_fill=*/false);
  EXPECT_EQ(again.data_ptr(), first);  // the freed block came back from the cache
  EXPECT_GT(gpu().memory_limit(), int64_t{1} << 30);  // the GPU's memory
}

TEST_F(GpuTest, TheMemoryLimitRefusesWithTheDeviceNamed) {
  gpu().set_memory_limit(int64_t{1} << 20);
  expect_error([&] { (void)gpu().allocate(Shape{1 << 20}, DType::kF32); },
               ErrorCode::kResourceExhausted, "device:GPU:0");
}

TEST_F(GpuTest, HostToDeviceAndBackKeepsEveryValue) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64, DType::kBool}) {
    Tensor host = Tensor::random_uniform(Shape{3, 1000}, dtype, 7, -5, 5);
    Tensor dev = gpu().allocate(host.shape(), dtype, /*zero_fill=*/false);
    EXPECT_EQ(dev.memory_space(), MemorySpace::cuda(0));
    dev.copy_from(host);
    Tensor copy = dev.clone();  // device to device
    EXPECT_EQ(copy.memory_space(), MemorySpace::cuda(0));
    EXPECT_EQ(copy.to_host().to_doubles(), host.to_doubles()) << dtype_name(dtype);
    EXPECT_EQ(dev.to_string(), host.to_string());  // read through to_host
  }
}

TEST_F(GpuTest, DeviceAllocationsAreZeroFilledByDefault) {
  Tensor dev = gpu().allocate(Shape{4096}, DType::kF32);
  EXPECT_EQ(dev.to_host().to_vector<float>(), std::vector<float>(4096, 0.0f));
}

TEST_F(GpuTest, HostElementAccessOnDeviceMemoryIsRefusedWithTheSpaceNamed) {
  Tensor dev = gpu().allocate(Shape{4}, DType::kF32);
  expect_error([&] { (void)dev.data(); }, ErrorCode::kFailedPrecondition, "cuda:0");
  expect_error([&] { dev.fill(1.0); }, ErrorCode::kFailedPrecondition, "to_host()");
  expect_error([&] { (void)dev.astype(DType::kF64); }, ErrorCode::kFailedPrecondition, "cuda:0");
  Tensor wide = gpu().allocate(Shape{4, 2}, DType::kF32);
  expect_error([&] { wide.slice(1, 0, 1).copy_from(Tensor::zeros(Shape{4, 1}, DType::kF32)); },
               ErrorCode::kUnimplemented, "contiguous");
}

TEST_F(GpuTest, StridedHostViewsCopyToAndFromTheDevice) {
  Tensor host = Tensor::random_uniform(Shape{6, 4}, DType::kF32, 3);
  Tensor column = host.slice(1, 1, 3);  // strided
  Tensor dev = gpu().allocate(column.shape(), DType::kF32, false);
  dev.copy_from(column);
  EXPECT_EQ(dev.to_host().to_doubles(), column.to_doubles());
  Tensor back = Tensor::zeros(Shape{6, 4}, DType::kF32);
  back.slice(1, 2, 4).copy_from(dev);  // into a strided host view
  EXPECT_EQ(back.slice(1, 2, 4).to_doubles(), column.to_doubles());
  EXPECT_EQ(back.slice(1, 0, 2).to_doubles(), std::vector<double>(12, 0.0));
}

TEST_F(GpuTest, AnEventOrdersWorkAndWaitsWithADeadline) {
  Tensor dev = gpu().allocate(Shape{1 << 16}, DType::kF32);
  GpuEvent event(gpu());
  event.record();
  event.make_wait(gpu());
  event.synchronize(std::chrono::steady_clock::now() + std::chrono::seconds(10), "test");
  EXPECT_TRUE(event.done());
  expect_error([&] { GpuEvent cpu_event(runtime().device(0)); }, ErrorCode::kInvalidArgument,
               "device:CPU:0");
  runtime().synchronize(std::chrono::seconds(10));
}

TEST_F(GpuTest, TesselGpuDevicesChoosesTheGpus) {
  {
    ScopedEnv none("TESSEL_GPU_DEVICES", "none");
    EXPECT_TRUE(Runtime(RuntimeOptions{.num_cpu_devices = 1}).gpu_devices().empty());
  }
  {
    ScopedEnv first("TESSEL_GPU_DEVICES", "0");
    EXPECT_EQ(Runtime(RuntimeOptions{.num_cpu_devices = 1}).gpu_devices().size(), 1u);
  }
  {
    ScopedEnv shared("TESSEL_GPU_DEVICES", "0,0");  // two devices sharing GPU 0
    EXPECT_EQ(Runtime(RuntimeOptions{.num_cpu_devices = 1}).gpu_devices().size(), 2u);
  }
  {
    ScopedEnv missing("TESSEL_GPU_DEVICES", "999");
    expect_error([] { Runtime r(RuntimeOptions{.num_cpu_devices = 1}); },
                 ErrorCode::kInvalidArgument, "'999' is not a visible CUDA ordinal");
  }
  ScopedEnv unset("TESSEL_GPU_DEVICES", std::nullopt);
  EXPECT_TRUE(Runtime(RuntimeOptions{.num_cpu_devices = 1, .num_gpu_devices = 0}).gpu_devices().empty());
  expect_error([] { Runtime r(RuntimeOptions{.num_cpu_devices = 1, .num_gpu_devices = 999}); },
               ErrorCode::kInvalidArgument, "num_gpu_devices");
  expect_error([] { Runtime r(RuntimeOptions{.num_cpu_devices = 1, .gpu_ordinals = {0, 999}}); },
               ErrorCode::kInvalidArgument, "gpu_ordinals[1] = 999");
}

// Several devices on one GPU (TF's logical GPUs): each its own name, stream, accounting and share
// of the GPU's memory. (The suites on GPU devices, testing/gpu_devices.h, run meshes of them.)
TEST_F(GpuTest, SeveralDevicesShareOneGpu) {
  Runtime rt(RuntimeOptions{.num_cpu_devices = 1, .gpu_ordinals = {0, 0, 0}});
  ASSERT_EQ(rt.gpu_devices().size(), 3u);
  EXPECT_EQ(rt.options().gpu_ordinals, (std::vector<int>{0, 0, 0}));
  // GPU 0's whole memory, from a device alone on it (the fixture's devices follow
  // TESSEL_GPU_DEVICES, which may share GPU 0 already).
  const int64_t whole =
      Runtime(RuntimeOptions{.num_cpu_devices = 1, .gpu_ordinals = {0}}).gpu_devices()[0]->memory_limit();
  for (int i = 0; i < 3; ++i) {
    Device& d = *rt.gpu_devices()[static_cast<size_t>(i)];
    EXPECT_EQ(d.name(), fmt::format("/job:localhost/replica:0/task:0/device:GPU:{}", i));
    EXPECT_EQ(d.gpu_ordinal(), 0);
    EXPECT_EQ(d.memory_limit(), whole / 3);
  }
  EXPECT_NE(rt.gpu_devices()[0]->cuda_stream(), rt.gpu_devices()[1]->cuda_stream());
  Tensor on_first = rt.gpu_devices()[0]->allocate(Shape{1 << 10}, DType::kF32);
  EXPECT_EQ(rt.gpu_devices()[0]->memory_stats().live_bytes, 4 << 10);
  EXPECT_EQ(rt.gpu_devices()[1]->memory_stats().live_bytes, 0);
}

// copy_box within a GPU's memory (cudaMemcpy2D per outer index) moves exactly what it does on
// the host, for regions of rank 1 to 4 with merged and unmerged runs.
TEST_F(GpuTest, CopyBoxWithinGpuMemoryMatchesTheHost) {
  struct Case {
    Box src, dst, region;
  };
  const std::vector<Case> cases = {
      {Box{{0}, {40}}, Box{{10}, {20}}, Box{{12}, {15}}},
      {Box{{3, 0}, {3, 12}}, Box{{0, 4}, {10, 4}}, Box{{3, 4}, {3, 4}}},
      {Box{{2, 0}, {6, 12}}, Box{{0, 0}, {10, 12}}, Box{{4, 0}, {3, 12}}},
      {Box{{0, 0, 0}, {4, 5, 6}}, Box{{0, 0, 2}, {4, 5, 3}}, Box{{0, 1, 2}, {4, 3, 3}}},
      {Box{{0, 0, 0, 0}, {5, 3, 4, 2}}, Box{{1, 1, 1, 0}, {3, 2, 2, 2}}, Box{{2, 1, 1, 0}, {2, 2, 2, 1}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.region.to_string());
    const Tensor src = Tensor::random_uniform(Shape(c.src.extents), DType::kF32, 3);
    Tensor want = Tensor::full(Shape(c.dst.extents), DType::kF32, -1);
    copy_box(src, c.src.offsets, want, c.dst.offsets, c.region);
    Tensor on_src = gpu().allocate(src.shape(), DType::kF32);
    on_src.copy_from(src);
    Tensor on_dst = gpu().allocate(want.shape(), DType::kF32);
    on_dst.copy_from(Tensor::full(Shape(c.dst.extents), DType::kF32, -1));
    copy_box(on_src, c.src.offsets, on_dst, c.dst.offsets, c.region);
    EXPECT_EQ(on_dst.to_host().to_vector<float>(), want.to_vector<float>());
  }
}

// Memory one device of a shared GPU keeps cached is given back when another device's cudaMalloc
// fails: the first takes nearly all the GPU's free memory and frees it (into its cache), then the
// second's request succeeds instead of failing while under its limit.
TEST_F(GpuTest, ACachedBlockOfOneDeviceDoesNotStarveAnotherOnTheSameGpu) {
  Runtime rt(RuntimeOptions{.num_cpu_devices = 1, .gpu_ordinals = {0, 0}});
  Device& first = *rt.gpu_devices()[0];
  Device& second = *rt.gpu_devices()[1];
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  const int64_t big = static_cast<int64_t>(free_bytes) - (int64_t{512} << 20);
  ASSERT_GT(big, int64_t{1} << 30);
  first.set_memory_limit(static_cast<int64_t>(total_bytes));
  second.set_memory_limit(static_cast<int64_t>(total_bytes));
  { Tensor hog = first.allocate(Shape{big}, DType::kU8, /*zero_fill=*/false); }  // now cached
  Tensor t = second.allocate(Shape{int64_t{1} << 30}, DType::kU8, /*zero_fill=*/false);
  EXPECT_EQ(second.memory_stats().live_bytes, int64_t{1} << 30);
}

}  // namespace
}  // namespace tessel
