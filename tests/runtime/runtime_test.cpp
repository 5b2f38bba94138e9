#include "tessel/runtime/runtime.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/tensor_test_util.h"
#include "runtime/runtime_test_util.h"
#include "tessel/runtime/gpu.h"
#include "testing/scoped_env.h"

namespace tessel {
namespace {

using namespace std::chrono_literals;
using testing::expect_error;
using testing::Gate;
using testing::kWaitLimit;
using testing::ScopedEnv;

constexpr const char* kEnv = "TESSEL_CPU_DEVICES";

std::string cpu(int task, int i) {
  return "/job:localhost/replica:0/task:" + std::to_string(task) +
         "/device:CPU:" + std::to_string(i);
}

TEST(Runtime, NamesDevicesInTensorFlowForm) {
  Runtime rt({.num_cpu_devices = 3, .job = "worker", .replica = 1, .task = 2});
  ASSERT_EQ(rt.num_devices(), 3);
  EXPECT_EQ(rt.options().num_cpu_devices, 3);
  ASSERT_EQ(rt.devices().size(), 3u);
  for (int i = 0; i < 3; ++i) {
    Device& d = rt.device(i);
    EXPECT_EQ(d.name(), "/job:worker/replica:1/task:2/device:CPU:" + std::to_string(i));
    EXPECT_EQ(d.index(), i);
    EXPECT_EQ(d.parsed_name(), DeviceName::make("worker", 1, 2, "CPU", i));
    EXPECT_EQ(rt.devices()[static_cast<size_t>(i)], &d);
  }
}

TEST(Runtime, DefaultsToFourDevicesWhenTheEnvironmentIsUnset) {
  ScopedEnv env(kEnv, std::nullopt);
  Runtime rt;
  EXPECT_EQ(rt.num_devices(), 4);
  EXPECT_EQ(rt.options().num_cpu_devices, 4);
  EXPECT_EQ(rt.device(3).name(), cpu(0, 3));
  ScopedEnv empty(kEnv, "");  // empty is unset, as for every variable (src/core/env.h)
  EXPECT_EQ(Runtime().num_devices(), 4);
}

TEST(Runtime, ReadsTheDeviceCountFromTheEnvironment) {
  ScopedEnv env(kEnv, "6");
  Runtime rt;
  EXPECT_EQ(rt.num_devices(), 6);
  EXPECT_EQ(rt.device(5).name(), cpu(0, 5));
  ScopedEnv max(kEnv, "1024");
  EXPECT_EQ(Runtime().num_devices(), 1024);
}

TEST(Runtime, OptionsOverrideTheEnvironment) {
  ScopedEnv env(kEnv, "not a number");
  Runtime rt({.num_cpu_devices = 2});
  EXPECT_EQ(rt.num_devices(), 2);
}

TEST(Runtime, ThrowsOnBadEnvironmentValueNamingIt) {
  for (const char* bad : {"abc", "0", "-3", "1025", "4x", " 4", "+4", "99999999999"}) {
    ScopedEnv env(kEnv, bad);
    expect_error(
        [] { Runtime rt; }, ErrorCode::kInvalidArgument, "Runtime",
        "TESSEL_CPU_DEVICES='" + std::string(bad) + "' is not a positive integer up to 1024");
  }
}

TEST(Runtime, SimulatedGpuDevicesHoldDeviceMemoryApartFromTheHost) {
  Runtime rt({.num_cpu_devices = 1, .num_simulated_gpu_devices = 2});
  ASSERT_EQ(rt.gpu_devices().size(), 2u);
  Device& gpu = *rt.gpu_devices()[1];
  EXPECT_EQ(gpu.name(), "/job:localhost/replica:0/task:0/device:GPU:1");
  EXPECT_TRUE(gpu.is_simulated_gpu());
  EXPECT_EQ(gpu.cuda_stream(), nullptr);
  EXPECT_EQ(&rt.device("/device:GPU:1"), &gpu);
  Tensor t = gpu.allocate(Shape{3}, DType::kF32);
  EXPECT_EQ(t.memory_space(), MemorySpace::simulated_gpu(1));
  EXPECT_EQ(gpu.memory_stats().live_bytes, 12);
  expect_error([&] { (void)t.data(); }, ErrorCode::kFailedPrecondition, "Tensor",
               "data needs host memory, but this [3] f32 is in simulated_gpu:1 memory");
  t.copy_from(Tensor::full(Shape{3}, DType::kF32, 2.5));
  EXPECT_EQ(t.to_host().to_vector<float>(), (std::vector<float>{2.5f, 2.5f, 2.5f}));
  rt.synchronize();
}

TEST(Runtime, ThrowsOnABadSimulatedGpuCount) {
  ScopedEnv env("TESSEL_SIMULATED_GPUS", "two");
  expect_error([] { Runtime rt({.num_cpu_devices = 1}); }, ErrorCode::kInvalidArgument, "Runtime",
               "TESSEL_SIMULATED_GPUS='two' is not an integer in [0, 1024]");
  expect_error([] { Runtime rt({.num_cpu_devices = 1, .num_simulated_gpu_devices = -2}); },
               ErrorCode::kInvalidArgument, "Runtime",
               "num_simulated_gpu_devices must be -1 or in [0, 1024], got -2");
}

// gpu_ordinals names CUDA ordinals that must be visible (none is on a machine without a GPU, so
// the ordinal past the last visible one is refused everywhere), and is not given beside
// num_gpu_devices. tests/gpu covers devices sharing a GPU.
TEST(Runtime, ThrowsOnBadGpuOrdinals) {
  const int past = visible_gpu_count();
  expect_error([past] { Runtime rt({.num_cpu_devices = 1, .gpu_ordinals = {past}}); },
               ErrorCode::kInvalidArgument, "Runtime",
               fmt::format("gpu_ordinals[0] = {} is not a visible CUDA ordinal ({} visible GPUs)",
                           past, past));
  expect_error([] { Runtime rt({.num_cpu_devices = 1, .gpu_ordinals = {-1}}); },
               ErrorCode::kInvalidArgument, "Runtime", "gpu_ordinals[0] = -1");
  expect_error([] { Runtime rt({.num_cpu_devices = 1, .num_gpu_devices = 0, .gpu_ordinals = {0}}); },
               ErrorCode::kInvalidArgument, "Runtime",
               "gpu_ordinals [0] and num_gpu_devices 0 both given");
  expect_error(
      [] { Runtime rt({.num_cpu_devices = 1, .num_simulated_gpu_devices = 2, .gpu_ordinals = {0}}); },
      ErrorCode::kInvalidArgument, "Runtime",
      "num_simulated_gpu_devices 2 and gpu_ordinals [0] both given");
}

// Explicit gpu_ordinals name real GPUs: TESSEL_SIMULATED_GPUS does not replace them (here, with
// no GPU visible, they are then refused as not visible instead of silently simulated).
TEST(Runtime, GpuOrdinalsAreNotReplacedBySimulatedGpusFromTheEnvironment) {
  ScopedEnv env("TESSEL_SIMULATED_GPUS", "2");
  const int past = visible_gpu_count();
  expect_error([past] { Runtime rt({.num_cpu_devices = 1, .gpu_ordinals = {past}}); },
               ErrorCode::kInvalidArgument, "Runtime", "is not a visible CUDA ordinal");
  EXPECT_EQ(Runtime({.num_cpu_devices = 1}).gpu_devices().size(), 2u);  // without: simulated
}

TEST(Runtime, ThrowsOnBadOptions) {
  for (int n : {0, -2, 1025}) {
    expect_error([n] { Runtime rt({.num_cpu_devices = n}); }, ErrorCode::kInvalidArgument,
                 "Runtime", "num_cpu_devices must be -1 or in [1, 1024], got " + std::to_string(n));
  }
  expect_error([] { Runtime rt({.num_cpu_devices = 1, .job = "9lives"}); },
               ErrorCode::kInvalidArgument, "Runtime", "job '9lives'");
  expect_error([] { Runtime rt({.num_cpu_devices = 1, .task = -1}); }, ErrorCode::kInvalidArgument,
               "Runtime", "task -1");
  expect_error([] { Runtime rt({.num_cpu_devices = 1, .replica = -5}); },
               ErrorCode::kInvalidArgument, "Runtime", "replica -5");
}

TEST(Runtime, ThrowsOnDeviceIndexOutOfRangeNamingIndexAndCount) {
  Runtime rt({.num_cpu_devices = 2});
  expect_error([&] { rt.device(2); }, ErrorCode::kOutOfRange, "Runtime",
               "device index 2 is out of range for 2 devices");
  expect_error([&] { rt.device(-1); }, ErrorCode::kOutOfRange, "Runtime",
               "device index -1 is out of range for 2 devices");
}

TEST(Runtime, FindsDevicesByFullOrPartialName) {
  Runtime rt({.num_cpu_devices = 3, .task = 1});
  EXPECT_EQ(&rt.device(cpu(1, 2)), &rt.device(2));
  EXPECT_EQ(&rt.device("/device:CPU:1"), &rt.device(1));
  EXPECT_EQ(&rt.device("/cpu:0"), &rt.device(0));
  EXPECT_EQ(&rt.device("/job:localhost/task:1/device:CPU:2"), &rt.device(2));
}

TEST(Runtime, ThrowsNotFoundOnUnknownDeviceName) {
  Runtime rt({.num_cpu_devices = 2, .task = 1});
  expect_error([&] { rt.device(cpu(0, 0)); }, ErrorCode::kNotFound, "Runtime",
               "no device '" + cpu(0, 0) + "' among the 2 devices " + cpu(1, 0) + ".." + cpu(1, 1));
  expect_error([&] { rt.device("/device:CPU:2"); }, ErrorCode::kNotFound, "Runtime",
               "no device '/device:CPU:2'");
  expect_error([&] { rt.device("/device:GPU:0"); }, ErrorCode::kNotFound, "Runtime",
               "no device '/device:GPU:0'");
}

TEST(Runtime, ThrowsInvalidArgumentOnMalformedOrVagueDeviceName) {
  Runtime rt({.num_cpu_devices = 2});
  for (const char* bad : {"CPU 0", "", "/job:localhost", "/device:CPU:*"}) {
    // Built by append: gcc 12 warns falsely (-Wrestrict) on "'" + std::string(...).
    std::string expected = "'";
    expected.append(bad).append("' is not a device name with a type and an id");
    expect_error([&] { rt.device(bad); }, ErrorCode::kInvalidArgument, "Runtime", expected);
  }
}

TEST(Runtime, SeveralRuntimesInOneProcessHaveDistinctTasks) {
  Runtime host0({.num_cpu_devices = 2, .task = 0});
  Runtime host1({.num_cpu_devices = 2, .task = 1});
  std::set<std::string> names;
  for (Runtime* rt : {&host0, &host1}) {
    for (Device* d : rt->devices()) names.insert(d->name());
  }
  EXPECT_EQ(names, (std::set<std::string>{cpu(0, 0), cpu(0, 1), cpu(1, 0), cpu(1, 1)}));
  // Both run work independently; an error on one does not touch the other.
  std::atomic<int> ran{0};
  host0.device(1).stream().enqueue("count", [&] { ++ran; });
  host1.device(1).stream().enqueue("fails", [] { throw std::runtime_error("host 1 broke"); });
  host1.device(0).stream().enqueue("count", [&] { ++ran; });
  host0.synchronize(kWaitLimit);
  expect_error([&] { host1.synchronize(kWaitLimit); }, ErrorCode::kInternal, "Stream",
               "op 'fails' on " + cpu(1, 1) + " failed: host 1 broke");
  EXPECT_EQ(ran.load(), 2);
}

TEST(Runtime, EachDeviceRunsOnItsOwnThread) {
  Runtime rt({.num_cpu_devices = 4});
  std::vector<std::thread::id> ids(4);
  for (int i = 0; i < 4; ++i) {
    rt.device(i).stream().enqueue(
        "whoami", [&ids, i] { ids[static_cast<size_t>(i)] = std::this_thread::get_id(); });
  }
  rt.synchronize(kWaitLimit);
  std::set<std::thread::id> distinct(ids.begin(), ids.end());
  EXPECT_EQ(distinct.size(), 4u);
  EXPECT_EQ(distinct.count(std::this_thread::get_id()), 0u);
}

TEST(Runtime, DevicesRunConcurrently) {
  // Each device's task waits for the other's: finishes only if both run at once.
  Runtime rt({.num_cpu_devices = 2});
  Gate zero_started;
  Gate one_started;
  std::atomic<int> met{0};
  rt.device(0).stream().enqueue("meet", [&] {
    zero_started.open();
    if (one_started.wait()) ++met;
  });
  rt.device(1).stream().enqueue("meet", [&] {
    one_started.open();
    if (zero_started.wait()) ++met;
  });
  rt.synchronize(kWaitLimit);
  EXPECT_EQ(met.load(), 2);
}

TEST(Runtime, SynchronizeThrowsTheFirstErrorNamingDeviceAndOp) {
  Runtime rt({.num_cpu_devices = 4});
  std::atomic<int> ran{0};
  rt.device(0).stream().enqueue("fine", [&] { ++ran; });
  rt.device(3).stream().enqueue(
      "gather", [] { throw Error(ErrorCode::kAborted, "Communicator", "rank 2 failed"); });
  rt.device(2).stream().enqueue(
      "all_reduce", [] { throw Error(ErrorCode::kOutOfRange, "Kernel", "index 9 of 4"); });
  rt.device(2).stream().enqueue("skipped", [&] { ++ran; });
  try {
    rt.synchronize();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);  // device 2 comes first
    EXPECT_EQ(std::string(e.what()),
              "Stream: op 'all_reduce' on " + cpu(0, 2) +
                  " failed: Kernel: index 9 of 4; 1 later ops skipped; also: op 'gather' on " +
                  cpu(0, 3) + " failed: Communicator: rank 2 failed");
  }
  EXPECT_EQ(ran.load(), 1);
  // Every error was reported; the devices are usable again.
  rt.synchronize(kWaitLimit);
  rt.device(2).stream().enqueue("again", [&] { ++ran; });
  rt.synchronize(kWaitLimit);
  EXPECT_EQ(ran.load(), 2);
}

TEST(Runtime, SynchronizeTimeoutNamesTheBusyDevicesAndOps) {
  Runtime rt({.num_cpu_devices = 3});
  Gate release;
  Gate started;
  rt.device(1).stream().enqueue("slow_all_gather", [&] {
    started.open();
    release.wait();
  });
  rt.device(1).stream().enqueue("queued", [] {});
  rt.device(0).stream().enqueue("quick", [] {});
  ASSERT_TRUE(started.wait());
  const auto begin = std::chrono::steady_clock::now();
  expect_error([&] { rt.synchronize(50ms); }, ErrorCode::kDeadlineExceeded, "Runtime",
               "synchronize timed out after 50 ms; still busy: " + cpu(0, 1) +
                   " running 'slow_all_gather' (2 pending)");
  const auto waited = std::chrono::steady_clock::now() - begin;
  EXPECT_GE(waited, 50ms);
  EXPECT_LT(waited, 5s);
  try {
    rt.synchronize(0ms);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find(cpu(0, 0)), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find(cpu(0, 2)), std::string::npos) << e.what();
  }
  release.open();
  rt.synchronize(kWaitLimit);
}

TEST(Runtime, AnErrorTakesPrecedenceOverATimeout) {
  Runtime rt({.num_cpu_devices = 2});
  Gate release;
  rt.device(0).stream().enqueue("fails", [] { throw Error(ErrorCode::kInternal, "K", "bad"); });
  rt.device(1).stream().enqueue("slow", [&] { release.wait(); });
  // Wait (bounded) for device 0 to fail before the timed synchronize.
  const auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
  while (rt.device(0).stream().pending() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  expect_error([&] { rt.synchronize(20ms); }, ErrorCode::kInternal, "Stream",
               "op 'fails' on " + cpu(0, 0) +
                   " failed: K: bad; still busy after 20 ms: " + cpu(0, 1) + " running 'slow'");
  release.open();
  rt.synchronize(kWaitLimit);
}

TEST(Runtime, SynchronizeFromADeviceTaskFailsInsteadOfDeadlocking) {
  Runtime rt({.num_cpu_devices = 2});
  rt.device(1).stream().enqueue("nested", [&rt] { rt.synchronize(kWaitLimit); });
  expect_error([&] { rt.synchronize(kWaitLimit); }, ErrorCode::kFailedPrecondition, "Stream",
               "op 'nested' on " + cpu(0, 1) +
                   " failed: Runtime: synchronize() called from op 'nested' running on " +
                   cpu(0, 1) + " would wait for itself");
}

TEST(Runtime, ThrowsOnNegativeTimeout) {
  Runtime rt({.num_cpu_devices = 1});
  expect_error([&] { rt.synchronize(-5ms); }, ErrorCode::kInvalidArgument, "Runtime",
               "negative timeout of -5 ms");
}

TEST(Runtime, DestructionDrainsEveryDevice) {
  std::atomic<int> ran{0};
  {
    Runtime rt({.num_cpu_devices = 3});
    for (Device* d : rt.devices()) {
      for (int i = 0; i < 20; ++i) d->stream().enqueue("count", [&] { ++ran; });
    }
  }
  EXPECT_EQ(ran.load(), 60);
}

TEST(Runtime, WorkEnqueuingOntoAStoppedDeviceDuringDestructionFailsCleanly) {
  std::atomic<bool> refused{false};
  {
    Runtime rt({.num_cpu_devices = 2});
    Device& zero = rt.device(0);
    // Device 1's task runs while the destructor stops device 0 first.
    rt.device(1).stream().enqueue("late_hop", [&] {
      const auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
      while (std::chrono::steady_clock::now() < deadline) {
        try {
          zero.stream().enqueue("hop", [] {});
        } catch (const Error& e) {
          refused = e.code() == ErrorCode::kFailedPrecondition;
          return;
        }
        std::this_thread::sleep_for(1ms);
      }
    });
  }
  EXPECT_TRUE(refused.load());
}

TEST(Runtime, GlobalIsCreatedOnceForAllThreads) {
  std::vector<Runtime*> seen(4, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&seen, i] { seen[i] = &Runtime::global(); });
  }
  for (auto& t : threads) t.join();
  for (Runtime* r : seen) EXPECT_EQ(r, &Runtime::global());
  EXPECT_GE(Runtime::global().num_devices(), 1);
  EXPECT_EQ(Runtime::global().device(0).name(), cpu(0, 0));
  Runtime::global().device(0).stream().enqueue("noop", [] {});
  Runtime::global().synchronize(kWaitLimit);
}

// CPU time of this process, user + system.
std::chrono::microseconds process_cpu_time() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto us = [](timeval t) { return int64_t{t.tv_sec} * 1000000 + t.tv_usec; };
  return std::chrono::microseconds(us(usage.ru_utime) + us(usage.ru_stime));
}

TEST(Runtime, IdleWorkersSleep) {
  Runtime rt({.num_cpu_devices = 8});
  rt.synchronize(kWaitLimit);
  const auto before = process_cpu_time();
  std::this_thread::sleep_for(200ms);
  const auto used = process_cpu_time() - before;
  // Eight spinning workers would burn about 1.6 s of CPU here (or all the cores there are).
  EXPECT_LT(used, 100ms) << used.count() << " us of CPU while idle";
}

}  // namespace
}  // namespace tessel
