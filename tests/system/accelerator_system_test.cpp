// initialize_accelerator_system / shutdown_accelerator_system: the process-wide pair.
#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>

#include "runtime/runtime_test_util.h"
#include "system/system_test_util.h"
#include "tessel/comm/mpi.h"
#include "tessel/runtime/runtime.h"
#include "tessel/system/accelerator_system.h"
#include "testing/scoped_env.h"

namespace tessel {
namespace {

using testing::elapsed_ms;
using testing::kGenerous;
using testing::kShort;
using testing::kShortBound;
using Clock = std::chrono::steady_clock;

// Leaves the process uninitialized after every test, whatever happened.
class SystemAccelerator : public ::testing::Test {
 protected:
  void TearDown() override {
    if (is_accelerator_system_initialized()) shutdown_accelerator_system();
  }
  // A device count other than the global runtime's, so that the system owns its runtime.
  static int other_count(int avoid_too = -1) {
    const int global = Runtime::global().num_devices();
    for (int n = 2;; ++n) {
      if (n != global && n != avoid_too) return n;
    }
  }
};

TEST_F(SystemAccelerator, InitializeAndShutdownOneHost) {
  EXPECT_FALSE(is_accelerator_system_initialized());
  const int n = other_count();
  const AcceleratorSystemInfo info = initialize_accelerator_system({.num_logical_cpu_devices = n});
  EXPECT_TRUE(is_accelerator_system_initialized());
  EXPECT_EQ(info.device_type, "CPU");
  EXPECT_EQ(info.num_devices, n);
  EXPECT_EQ(info.num_local_devices, n);
  EXPECT_EQ(info.num_hosts, 1);
  EXPECT_EQ(info.task, 0);
  EXPECT_EQ(info.topology, Topology::for_hosts(1, n));
  EXPECT_EQ(info.local_device_ids.size(), static_cast<size_t>(n));
  EXPECT_EQ(info.local_device_ids.back(), n - 1);
  EXPECT_TRUE(info.owns_runtime);
  EXPECT_TRUE(info.enable_coordination_service);
  const std::shared_ptr<Runtime> rt = accelerator_system_runtime();
  EXPECT_EQ(rt->num_devices(), n);
  EXPECT_NE(rt.get(), &Runtime::global());
  EXPECT_EQ(accelerator_system_info().topology, info.topology);
  shutdown_accelerator_system();
  EXPECT_FALSE(is_accelerator_system_initialized());
  // The runtime outlives the system while someone holds it.
  EXPECT_EQ(rt->device(n - 1).name(), "/job:localhost/replica:0/task:0/device:CPU:" + std::to_string(n - 1));
}

TEST_F(SystemAccelerator, UsesTheGlobalRuntimeWhenItFits) {
  const AcceleratorSystemInfo info = initialize_accelerator_system();
  EXPECT_FALSE(info.owns_runtime);
  EXPECT_EQ(accelerator_system_runtime().get(), &Runtime::global());
  EXPECT_EQ(info.num_devices, Runtime::global().num_devices());
  shutdown_accelerator_system();
  // Shutdown leaves the global runtime alone.
  EXPECT_GE(Runtime::global().num_devices(), 1);
  const AcceleratorSystemInfo same = initialize_accelerator_system(
      {.num_logical_cpu_devices = Runtime::global().num_devices()});
  EXPECT_FALSE(same.owns_runtime);
}

TEST_F(SystemAccelerator, ReinitializeAfterShutdownWithAnotherDeviceCount) {
  const int a = other_count();
  const int b = other_count(a);
  EXPECT_EQ(initialize_accelerator_system({.num_logical_cpu_devices = a}).num_devices, a);
  shutdown_accelerator_system();
  const AcceleratorSystemInfo info = initialize_accelerator_system({.num_logical_cpu_devices = b});
  EXPECT_EQ(info.num_devices, b);
  EXPECT_EQ(accelerator_system_runtime()->num_devices(), b);
  shutdown_accelerator_system();
  for (int round = 0; round < 3; ++round) {
    initialize_accelerator_system({.num_logical_cpu_devices = a});
    shutdown_accelerator_system();
  }
  EXPECT_FALSE(is_accelerator_system_initialized());
}

TEST_F(SystemAccelerator, InitializeTwiceIsTensorFlowsError) {
  initialize_accelerator_system({.num_logical_cpu_devices = other_count()});
  EXPECT_TESSEL_ERROR(initialize_accelerator_system(), ErrorCode::kFailedPrecondition,
                      "Accelerator system has already been initialized. Call "
                      "shutdown_accelerator_system() first.");
  EXPECT_TRUE(is_accelerator_system_initialized());
}

TEST_F(SystemAccelerator, ShutdownWithoutInitializeIsTensorFlowsError) {
  EXPECT_TESSEL_ERROR(shutdown_accelerator_system(), ErrorCode::kFailedPrecondition,
                      "Accelerator system is not initialized. Call initialize_accelerator_system "
                      "first.");
  EXPECT_TESSEL_ERROR(accelerator_system_runtime(), ErrorCode::kFailedPrecondition,
                      "not initialized");
  EXPECT_TESSEL_ERROR(accelerator_system_info(), ErrorCode::kFailedPrecondition,
                      "not initialized");
}

TEST_F(SystemAccelerator, DeviceTypeFollowsTensorFlow) {
  EXPECT_TESSEL_ERROR(initialize_accelerator_system({.device_type = "XPU"}),
                      ErrorCode::kInvalidArgument,
                      "Unknown device_type XPU. Allowed values are CPU, GPU, or TPU");
  EXPECT_TESSEL_ERROR(initialize_accelerator_system({.device_type = "tpu"}),
                      ErrorCode::kUnimplemented, "device_type TPU: tessel's runtime has only");
  EXPECT_TESSEL_ERROR(initialize_accelerator_system({.device_type = "GPU"}),
                      ErrorCode::kUnimplemented, "device_type GPU");
  EXPECT_FALSE(is_accelerator_system_initialized());
  EXPECT_EQ(initialize_accelerator_system({.device_type = "cpu"}).device_type, "CPU");
}

TEST_F(SystemAccelerator, BadOptionsAreRejected) {
  EXPECT_TESSEL_ERROR(initialize_accelerator_system({.num_logical_cpu_devices = 0}),
                      ErrorCode::kInvalidArgument, "num_logical_cpu_devices must be -1 or 1..1024; got 0");
  EXPECT_TESSEL_ERROR(
      initialize_accelerator_system({.startup_timeout = std::chrono::milliseconds(-1)}),
      ErrorCode::kInvalidArgument, "must be >= 0");
  EXPECT_TESSEL_ERROR(initialize_accelerator_system({.task = 1}), ErrorCode::kInvalidArgument,
                      "task 1 is not a host of a 1-host system");
  EXPECT_TESSEL_ERROR(initialize_accelerator_system({.enable_coordination_service = false,
                                                     .channel = make_in_process_system_channel(2)}),
                      ErrorCode::kInvalidArgument,
                      "enable_coordination_service=false: the 2 hosts need the coordinator");
  EXPECT_FALSE(is_accelerator_system_initialized());
  // One host: nothing to coordinate; accepted and recorded.
  EXPECT_FALSE(initialize_accelerator_system({.enable_coordination_service = false})
                   .enable_coordination_service);
}

TEST_F(SystemAccelerator, ResetContextMakesAFreshRuntime) {
  const AcceleratorSystemInfo info =
      initialize_accelerator_system({.experimental_reset_context = true});
  EXPECT_TRUE(info.owns_runtime);
  EXPECT_TRUE(info.experimental_reset_context);
  EXPECT_NE(accelerator_system_runtime().get(), &Runtime::global());
  EXPECT_EQ(info.num_devices, Runtime::global().num_devices());  // same count, fresh devices
}

TEST_F(SystemAccelerator, WholeMeshCompilationsFlagReachesTheConfiguration) {
  EXPECT_TRUE(initialize_accelerator_system({.enable_whole_mesh_compilations = true})
                  .enable_whole_mesh_compilations);
}

TEST_F(SystemAccelerator, ShutdownWaitsForQueuedWork) {
  initialize_accelerator_system({.num_logical_cpu_devices = other_count()});
  std::atomic<bool> ran{false};
  accelerator_system_runtime()->device(0).stream().enqueue("slow", [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    ran = true;
  });
  shutdown_accelerator_system();
  EXPECT_TRUE(ran);
}

TEST_F(SystemAccelerator, ShutdownTimesOutOnBusyDevicesAndCanBeRetried) {
  initialize_accelerator_system(
      {.num_logical_cpu_devices = other_count(), .shutdown_timeout = kShort});
  testing::Gate gate;
  accelerator_system_runtime()->device(0).stream().enqueue("blocked", [&] { gate.wait(); });
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(shutdown_accelerator_system(), ErrorCode::kDeadlineExceeded, "blocked");
  EXPECT_LT(elapsed_ms(start), kShortBound.count());
  EXPECT_TRUE(is_accelerator_system_initialized());
  gate.open();
  shutdown_accelerator_system();
  EXPECT_FALSE(is_accelerator_system_initialized());
}

TEST_F(SystemAccelerator, FailedWorkIsThrownAfterTheShutdown) {
  initialize_accelerator_system({.num_logical_cpu_devices = other_count()});
  accelerator_system_runtime()->device(1).stream().enqueue(
      "broken", [] { throw std::runtime_error("kernel failed"); });
  try {
    shutdown_accelerator_system();
    ADD_FAILURE() << "expected the work's error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel failed"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(is_accelerator_system_initialized());
}

TEST_F(SystemAccelerator, TwoHostsThroughAChannel) {
  auto channel = make_in_process_system_channel(2);
  Runtime rt1({.num_cpu_devices = 2, .task = 1});
  Host h1(rt1, channel);
  auto remote = std::async(std::launch::async, [&] {
    return start_system(h1, nullptr, {.startup_timeout = kGenerous});
  });
  const AcceleratorSystemInfo info = initialize_accelerator_system(
      {.num_logical_cpu_devices = 2, .startup_timeout = kGenerous, .shutdown_timeout = kGenerous,
       .channel = channel, .task = 0});
  ASSERT_EQ(remote.wait_for(kGenerous), std::future_status::ready);
  EXPECT_EQ(remote.get(), Topology::for_hosts(2, 2));
  EXPECT_EQ(info.num_devices, 4);
  EXPECT_EQ(info.num_local_devices, 2);
  EXPECT_EQ(info.num_hosts, 2);
  EXPECT_EQ(info.local_device_ids, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(h1.global_device_ids(), (std::vector<int64_t>{2, 3}));
  // Host 1 leaves a little later; task 0's shutdown waits for it.
  auto leave = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    stop_system(h1, nullptr);
  });
  shutdown_accelerator_system();
  leave.get();
  EXPECT_FALSE(is_accelerator_system_initialized());
}

TEST_F(SystemAccelerator, FailedInitializeLeavesTheProcessUninitialized) {
  // A second host that never comes.
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(
      initialize_accelerator_system({.num_logical_cpu_devices = 1, .startup_timeout = kShort,
                                     .channel = make_in_process_system_channel(2)}),
      ErrorCode::kDeadlineExceeded, "hosts [1] did not run step 1 (disconnect_host) within 0.15 s");
  EXPECT_LT(elapsed_ms(start), kShortBound.count());
  EXPECT_FALSE(is_accelerator_system_initialized());
  EXPECT_EQ(initialize_accelerator_system({.num_logical_cpu_devices = 1}).num_devices, 1);
}

TEST_F(SystemAccelerator, UnderMpirunWithoutMpiIsAClearFailedPrecondition) {
  // What mpirun -np 2 exports, in a process that has not initialised MPI.
  testing::ScopedEnv mpirun({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}});
  if (mpi_available()) {
    EXPECT_TESSEL_ERROR(initialize_accelerator_system(), ErrorCode::kFailedPrecondition,
                        "initialize_accelerator_system: this process is client 1 of 2 (mpirun), "
                        "whose hosts talk over MPI, but MPI is not ready: create a "
                        "tessel::MpiEnvironment first");
  } else {
    EXPECT_TESSEL_ERROR(initialize_accelerator_system(), ErrorCode::kUnavailable,
                        "tessel was built without MPI");
  }
  EXPECT_FALSE(is_accelerator_system_initialized());
}

}  // namespace
}  // namespace tessel
