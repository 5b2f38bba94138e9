// Device memory limits (device.h, runtime.h): refusals before allocating, their messages, the
// defaults and the environment variable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <string>

#include "runtime/runtime_test_util.h"
#include "tessel/core/host_memory.h"
#include "tessel/runtime/runtime.h"
#include "testing/expect_error.h"
#include "testing/scoped_env.h"

namespace tessel {
namespace {

using testing::kWaitLimit;
using testing::ScopedEnv;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

TEST(DeviceMemoryLimit, Refuses100MiBButAccepts32MiBUnder64MiB) {
  Runtime rt({.num_cpu_devices = 2, .memory_limit = 64 * kMiB});
  Device& d = rt.device(1);
  EXPECT_EQ(d.memory_limit(), 64 * kMiB);
  EXPECT_EQ(d.memory_stats().limit_bytes, 64 * kMiB);
  EXPECT_TESSEL_ERROR(d.allocate(Shape{25 * kMiB}, DType::kF32), ErrorCode::kResourceExhausted,
                      "Tensor: cannot allocate 104857600 bytes for [26214400] f32: Allocator: "
                      "'/job:localhost/replica:0/task:0/device:CPU:1': allocating 100.0 MiB "
                      "(104857600 bytes) would exceed its memory limit 64.0 MiB (in use 0 B); set "
                      "it with RuntimeOptions::memory_limit");
  MemoryStats s = d.memory_stats();
  EXPECT_EQ(s.live_bytes, 0);  // nothing kept from the refused request
  EXPECT_EQ(s.peak_bytes, 0);
  EXPECT_EQ(s.num_allocations, 0);

  Tensor fits = d.allocate(Shape{8 * kMiB}, DType::kF32);  // 32 MiB
  EXPECT_EQ(d.memory_stats().live_bytes, 32 * kMiB);
  EXPECT_TESSEL_ERROR(d.allocate(Shape{40 * kMiB}, DType::kU8), ErrorCode::kResourceExhausted,
                      "would exceed its memory limit 64.0 MiB (in use 32.0 MiB)");
  EXPECT_EQ(d.memory_stats().live_bytes, 32 * kMiB);
  Tensor also = d.allocate(Shape{32 * kMiB}, DType::kU8);  // exactly up to the limit
  EXPECT_EQ(d.memory_stats().live_bytes, 64 * kMiB);
  fits = Tensor();
  also = Tensor();
  EXPECT_EQ(d.memory_stats().live_bytes, 0);
  EXPECT_EQ(rt.device(0).memory_stats().live_bytes, 0);  // the other device is untouched
}

TEST(DeviceMemoryLimit, TwentyGiBOnTheShareOfA23GiBMachineFailsCleanly) {
  // What the defaults give each of 4 devices on a 23 GiB machine, set explicitly so that the
  // test means the same on every machine; nothing of the 20 GiB is ever allocated.
  const int64_t share = 23 * kGiB / 4;
  Runtime rt({.num_cpu_devices = 4, .memory_limit = share});
  Device& d = rt.device(1);
  Tensor held = d.allocate(Shape{kMiB}, DType::kU8);
  EXPECT_TESSEL_ERROR(d.allocate(Shape{5 * kGiB}, DType::kF32), ErrorCode::kResourceExhausted,
                      "cannot allocate 21474836480 bytes for [5368709120] f32: Allocator: "
                      "'/job:localhost/replica:0/task:0/device:CPU:1': allocating 20.0 GiB "
                      "(21474836480 bytes) would exceed its memory limit 5.8 GiB (in use 1.0 MiB)");
  EXPECT_EQ(d.memory_stats().live_bytes, kMiB);
}

TEST(DeviceMemoryLimit, DefaultIsAnEqualShareOfTheHostLimit) {
  ScopedEnv unset("TESSEL_DEVICE_MEMORY_LIMIT", std::nullopt);
  Runtime rt({.num_cpu_devices = 4});
  EXPECT_EQ(rt.options().memory_limit, host_memory_limit() / 4);
  for (Device* d : rt.devices()) EXPECT_EQ(d->memory_limit(), host_memory_limit() / 4);
  // A request above what the host can hold is refused by the default limits.
  const int64_t request = std::max(host_available_memory(), host_memory_limit()) + kGiB;
  EXPECT_TESSEL_ERROR(rt.device(2).allocate(Shape{request}, DType::kU8),
                      ErrorCode::kResourceExhausted, "would exceed its memory limit");
  EXPECT_EQ(rt.device(2).memory_stats().live_bytes, 0);
}

TEST(DeviceMemoryLimit, EnvironmentSetsTheDefault) {
  {
    ScopedEnv limit("TESSEL_DEVICE_MEMORY_LIMIT", "48M");
    Runtime rt({.num_cpu_devices = 2});
    EXPECT_EQ(rt.device(0).memory_limit(), 48 * kMiB);
    Runtime explicit_limit({.num_cpu_devices = 2, .memory_limit = kMiB});  // the option wins
    EXPECT_EQ(explicit_limit.device(1).memory_limit(), kMiB);
  }
  ScopedEnv bad("TESSEL_DEVICE_MEMORY_LIMIT", "12 parsecs");
  EXPECT_TESSEL_ERROR(Runtime({.num_cpu_devices = 2}), ErrorCode::kInvalidArgument,
                      "TESSEL_DEVICE_MEMORY_LIMIT='12 parsecs' is not a byte count");
}

TEST(DeviceMemoryLimit, BadLimitsAreInvalidArguments) {
  EXPECT_TESSEL_ERROR(Runtime({.num_cpu_devices = 2, .memory_limit = 0}),
                      ErrorCode::kInvalidArgument,
                      "memory_limit must be -1 or at least 1 byte, got 0");
  Runtime rt({.num_cpu_devices = 1});
  EXPECT_TESSEL_ERROR(rt.device(0).set_memory_limit(-2), ErrorCode::kInvalidArgument,
                      "memory limit of /job:localhost/replica:0/task:0/device:CPU:0 must be at "
                      "least 1 byte, got -2");
  EXPECT_TESSEL_ERROR(Device(DeviceName::make("localhost", 0, 0, "CPU", 0), 0, 0),
                      ErrorCode::kInvalidArgument, "must be -1 or at least 1 byte, got 0");
}

TEST(DeviceMemoryLimit, ADeviceMadeAloneMayUseTheHostLimit) {
  Device d(DeviceName::make("localhost", 0, 0, "CPU", 0), 0);
  EXPECT_EQ(d.memory_limit(), host_memory_limit());
}

TEST(DeviceMemoryLimit, LoweringBelowWhatIsInUseKeepsTensorsAndRefusesNewOnes) {
  Runtime rt({.num_cpu_devices = 1, .memory_limit = 64 * kMiB});
  Device& d = rt.device(0);
  Tensor held = d.allocate(Shape{8 * kMiB}, DType::kF32);
  held.fill(3);
  d.set_memory_limit(16 * kMiB);
  EXPECT_EQ(held.at({8 * kMiB - 1}), 3.0);
  EXPECT_TESSEL_ERROR(d.allocate(Shape{1}, DType::kU8), ErrorCode::kResourceExhausted,
                      "allocating 1 B would exceed its memory limit 16.0 MiB (in use "
                      "32.0 MiB)");
  held = Tensor();
  Tensor now_fits = d.allocate(Shape{4 * kMiB}, DType::kF32);
  EXPECT_EQ(d.memory_stats().live_bytes, 16 * kMiB);
}

TEST(DeviceMemoryLimit, TheHostLimitAlsoBindsDevices) {
  Runtime rt({.num_cpu_devices = 2, .memory_limit = 1024 * kGiB});
  const int64_t old = host_memory_limit();
  set_host_memory_limit(host_memory_stats().live_bytes + 64 * kMiB);
  EXPECT_TESSEL_ERROR(rt.device(1).allocate(Shape{25 * kMiB}, DType::kF32),
                      ErrorCode::kResourceExhausted,
                      "'/job:localhost/replica:0/task:0/device:CPU:1': host: allocating 100.0 MiB "
                      "(104857600 bytes) would exceed the process's host memory limit");
  EXPECT_EQ(rt.device(1).memory_stats().live_bytes, 0);
  set_host_memory_limit(old);
}

TEST(DeviceMemoryLimit, AKernelsOutOfMemoryIsResourceExhaustedAtSynchronize) {
  Runtime rt({.num_cpu_devices = 1, .memory_limit = kMiB});
  Device& d = rt.device(0);
  d.stream().enqueue("grow", [&d] { d.allocate(Shape{2 * kMiB}, DType::kU8); });
  EXPECT_TESSEL_ERROR(rt.synchronize(kWaitLimit), ErrorCode::kResourceExhausted,
                      "Stream: op 'grow' on /job:localhost/replica:0/task:0/device:CPU:0 failed: "
                      "Tensor: cannot allocate 2097152 bytes");
  d.stream().enqueue("bad_alloc", [] { throw std::bad_alloc(); });
  EXPECT_TESSEL_ERROR(rt.synchronize(kWaitLimit), ErrorCode::kResourceExhausted,
                      "op 'bad_alloc' on /job:localhost/replica:0/task:0/device:CPU:0 failed");
  EXPECT_EQ(d.memory_stats().live_bytes, 0);
}

}  // namespace
}  // namespace tessel
