#include "tessel/runtime/device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "core/tensor_test_util.h"
#include "runtime/runtime_test_util.h"
#include "tessel/runtime/runtime.h"

namespace tessel {
namespace {

using testing::expect_error;
using testing::kWaitLimit;

TEST(Device, HasNameIndexAndParsedName) {
  Device d(DeviceName::make("worker", 1, 2, "CPU", 3), 3);
  EXPECT_EQ(d.name(), "/job:worker/replica:1/task:2/device:CPU:3");
  EXPECT_EQ(d.index(), 3);
  EXPECT_EQ(d.parsed_name().job, "worker");
  EXPECT_EQ(d.parsed_name().task, 2);
  EXPECT_EQ(d.parsed_name().id, 3);
  EXPECT_EQ(d.stream().label(), d.name());
  EXPECT_EQ(d.allocator()->name(), d.name());
}

TEST(Device, ThrowsOnPartialName) {
  expect_error([] { Device d(DeviceName::parse("/device:CPU:0"), 0); }, ErrorCode::kInvalidArgument,
               "Device", "device name '/device:CPU:0' is not fully specified");
}

TEST(Device, AccountsLivePeakAndTotalBytes) {
  Device d(DeviceName::make("localhost", 0, 0, "CPU", 0), 0);
  EXPECT_EQ(d.memory_stats().live_bytes, 0);
  Tensor a = d.allocate(Shape{1000}, DType::kF32);
  EXPECT_EQ(a.allocator(), d.allocator());
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>(1000, 0.0f));
  MemoryStats s = d.memory_stats();
  EXPECT_EQ(s.live_bytes, 4000);
  EXPECT_EQ(s.peak_bytes, 4000);
  EXPECT_EQ(s.num_allocations, 1);
  {
    Tensor b = d.allocate(Shape{250}, DType::kF64, /*zero_fill=*/false);
    Tensor view = b.slice(0, 0, 10);  // views allocate nothing
    s = d.memory_stats();
    EXPECT_EQ(s.live_bytes, 6000);
    EXPECT_EQ(s.peak_bytes, 6000);
    EXPECT_EQ(s.num_allocations, 2);
  }
  s = d.memory_stats();
  EXPECT_EQ(s.live_bytes, 4000);
  EXPECT_EQ(s.peak_bytes, 6000);
  EXPECT_EQ(s.total_allocated_bytes, 6000);
  d.reset_peak_memory();
  EXPECT_EQ(d.memory_stats().peak_bytes, 4000);
  a = Tensor();
  s = d.memory_stats();
  EXPECT_EQ(s.live_bytes, 0);
  EXPECT_EQ(s.peak_bytes, 4000);
  EXPECT_EQ(s.total_allocated_bytes, 6000);
  EXPECT_EQ(s.num_allocations, 2);
}

TEST(Device, HostTensorsAreNotCounted) {
  Device d(DeviceName::make("localhost", 0, 0, "CPU", 0), 0);
  Tensor t = Tensor::zeros(Shape{64}, DType::kF32);
  EXPECT_EQ(d.memory_stats().num_allocations, 0);
}

TEST(Device, WorkOnTheStreamIsAccountedAndFreedByTheTimeOfSync) {
  Runtime rt({.num_cpu_devices = 2});
  Device& d = rt.device(1);
  // `out` is allocated before the scratch task can run, so the peak always holds both.
  Tensor out = d.allocate(Shape{16}, DType::kF32);
  d.stream().enqueue("scratch", [&d] {
    Tensor tmp = d.allocate(Shape{128}, DType::kF32);
    tmp.fill(1);
  });
  d.stream().enqueue("write", [out]() mutable { out.fill(2); });
  rt.synchronize(kWaitLimit);
  const MemoryStats s = d.memory_stats();
  EXPECT_EQ(s.live_bytes, 64);
  EXPECT_EQ(s.peak_bytes, 512 + 64);
  EXPECT_EQ(s.num_allocations, 2);
  EXPECT_EQ(out.to_vector<float>(), std::vector<float>(16, 2.0f));
  EXPECT_EQ(rt.device(0).memory_stats().num_allocations, 0);
}

TEST(Device, ConcurrentAllocationsAreCountedExactly) {
  Device d(DeviceName::make("localhost", 0, 0, "CPU", 0), 0);
  constexpr int kThreads = 4;
  constexpr int kRounds = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&d] {
      for (int i = 0; i < kRounds; ++i) {
        Tensor x = d.allocate(Shape{16}, DType::kI32);
        x.fill(i);
      }
    });
  }
  for (auto& t : threads) t.join();
  const MemoryStats s = d.memory_stats();
  EXPECT_EQ(s.live_bytes, 0);
  EXPECT_EQ(s.num_allocations, kThreads * kRounds);
  EXPECT_EQ(s.total_allocated_bytes, 64 * kThreads * kRounds);
  EXPECT_GE(s.peak_bytes, 64);
  EXPECT_LE(s.peak_bytes, 64 * kThreads);
}

TEST(Device, TensorOutlivesItsDeviceAndRuntime) {
  Tensor survivor;
  Tensor view;
  {
    Runtime rt({.num_cpu_devices = 2});
    survivor = rt.device(1).allocate(Shape{32}, DType::kF32);
    view = survivor.slice(0, 8, 16);
    rt.device(1).stream().enqueue("fill", [survivor]() mutable { survivor.fill(5); });
    rt.synchronize(kWaitLimit);
  }
  // The runtime, its devices and streams are gone; the allocator lives on with the storage.
  EXPECT_EQ(survivor.to_vector<float>(), std::vector<float>(32, 5.0f));
  view.fill(1);
  EXPECT_EQ(survivor.at({8}), 1.0);
  EXPECT_EQ(survivor.allocator()->name(), "/job:localhost/replica:0/task:0/device:CPU:1");
  survivor = Tensor();
  view = Tensor();  // frees the block through the (now orphaned) accounting allocator
}

TEST(Device, AllocateThrowsResourceExhaustedNamingTheSize) {
  Device d(DeviceName::make("localhost", 0, 0, "CPU", 0), 0);
  expect_error([&] { d.allocate(Shape{int64_t{1} << 47}, DType::kF32); },
               ErrorCode::kResourceExhausted, "Tensor",
               "cannot allocate 562949953421312 bytes for [140737488355328] f32");
  EXPECT_EQ(d.memory_stats().num_allocations, 0);
  EXPECT_EQ(d.memory_stats().live_bytes, 0);
}

}  // namespace
}  // namespace tessel
