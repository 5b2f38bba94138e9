// Seed 102 (TPU configuration): one test per business rule (BR-102-01..05), per row of the error
// table, for the transaction rule and for the input table's checked attributes.
#include <gtest/gtest.h>

#include "system/system_test_util.h"
#include "tessel/core/tensor.h"
#include "tessel/system/system.h"

namespace tessel {
namespace {

using testing::elapsed_ms;
using testing::kGenerous;
using testing::kNoIds;
using testing::kShort;
using testing::kShortBound;
using testing::SimulatedSystem;
using Clock = std::chrono::steady_clock;


TEST(Seed102, BR_102_01_FiveStepsRunInOrder) {
  SimulatedSystem sys(2, 2);
  Host& h1 = sys.host(1);
  SystemCoordinator& c = sys.coordinator();
  // Step 3 before step 1.
  EXPECT_TESSEL_ERROR(h1.initialize_host(HostConfiguration{}), ErrorCode::kFailedPrecondition,
                      "initialize_host (step 3) on host 1: step 1 (disconnect_host) has not run");
  // Step 5 before step 3.
  EXPECT_TESSEL_ERROR(h1.set_global_topology(Topology::for_hosts(2, 2)),
                      ErrorCode::kFailedPrecondition,
                      "set_global_topology (step 5) on host 1: step 3 (initialize_host) has not run");
  // Step 2 before step 1 on every host: the coordinator names the hosts that have not run it.
  sys.host(0).disconnect_host();
  EXPECT_TESSEL_ERROR(c.configure_distributed_system({2, 2}), ErrorCode::kFailedPrecondition,
                      "step 1 (disconnect_host) has not run on hosts [1] since the last configure");
  EXPECT_EQ(c.state(), SystemState::kUnconfigured);  // a rejected call changes nothing
  // Step 4 before step 2.
  EXPECT_TESSEL_ERROR(c.wait_for_distributed_system(kNoIds, kShort), ErrorCode::kFailedPrecondition,
                      "The system has not been initialized.");
  // In order, it works.
  h1.disconnect_host();
  const HostConfiguration config = c.configure_distributed_system({2, 2});
  // Step 2 again without a new step 1.
  EXPECT_TESSEL_ERROR(c.configure_distributed_system({2, 2}), ErrorCode::kFailedPrecondition,
                      "has not run on hosts [0, 1] since the last configure");
  const auto ids0 = sys.host(0).initialize_host(config);
  const auto ids1 = h1.initialize_host(config);
  // Step 3 twice.
  EXPECT_TESSEL_ERROR(h1.initialize_host(config), ErrorCode::kFailedPrecondition,
                      "the host is already Initialized");
  const Topology topology = c.wait_for_distributed_system({ids0, ids1}, kGenerous);
  sys.host(0).set_global_topology(topology);
  h1.set_global_topology(topology);
  EXPECT_EQ(h1.state(), HostState::kRunning);
  EXPECT_EQ(c.state(), SystemState::kRunning);
}

TEST(Seed102, BR_102_02_ConfigureAndWaitRunOnTaskZero) {
  SimulatedSystem sys(2, 2);
  // Only the host of task 0 can hold the coordinator, which alone has configure and wait.
  EXPECT_TESSEL_ERROR(SystemCoordinator(sys.host(1)), ErrorCode::kFailedPrecondition,
                      "the coordinator runs on task 0 (BR-102-02: configure and wait run on "
                      "worker 0); this host is task 1");
  SystemCoordinator on_zero(sys.host(0));
  EXPECT_EQ(on_zero.num_hosts(), 2);
  // In the multi-client driver, only task 0 may pass a coordinator.
  EXPECT_TESSEL_ERROR(start_system(sys.host(1), &sys.coordinator()), ErrorCode::kInvalidArgument,
                      "host 1 is not task 0 and runs no coordinator");
}

TEST(Seed102, BR_102_03_ShutdownOnlyAfterEveryHostDisconnected) {
  SimulatedSystem sys(4, 1);
  sys.bring_up();
  SystemCoordinator& c = sys.coordinator();
  EXPECT_TESSEL_ERROR(c.shutdown_distributed_system(), ErrorCode::kFailedPrecondition,
                      "hosts [0, 1, 2, 3] have not disconnected; disconnect_host must complete on "
                      "every host before shutdown (BR-102-03)");
  sys.host(0).disconnect_host();
  sys.host(2).disconnect_host();
  EXPECT_TESSEL_ERROR(c.shutdown_distributed_system(), ErrorCode::kFailedPrecondition,
                      "hosts [1, 3] have not disconnected");
  EXPECT_EQ(c.state(), SystemState::kRunning);
  sys.host(1).disconnect_host();
  sys.host(3).disconnect_host();
  c.shutdown_distributed_system();
  EXPECT_EQ(c.state(), SystemState::kShutDown);
}

TEST(Seed102, BR_102_04_DeviceCountsAgreeAcrossHostsAndTopology) {
  {
    SimulatedSystem sys(std::vector<int>{4, 4, 2, 4});
    // TF's code: Internal ("Host 2 has 2 TPU chips but host 0 has 4").
    EXPECT_TESSEL_ERROR(sys.coordinator().configure_distributed_system(sys.disconnect_all()),
                        ErrorCode::kInternal, "Host 2 has 2 devices but host 0 has 4");
  }
  {
    SimulatedSystem sys(2, 2);
    EXPECT_TESSEL_ERROR(sys.coordinator().configure_distributed_system(
                            sys.disconnect_all(), {.topology = Topology::for_hosts(2, 8)}),
                        ErrorCode::kInvalidArgument,
                        "Hosts [0, 1] have 2 devices each but the topology has 8 per task");
    EXPECT_EQ(sys.coordinator().configure_distributed_system(
                  sys.disconnect_all(), {.topology = Topology::for_hosts(2, 2)}).devices_per_host,
              2);
  }
}

TEST(Seed102, BR_102_05_WholeMeshCompilationsFlagIsRecordedOnEveryHost) {
  SimulatedSystem sys(2, 2);
  sys.bring_up({.enable_whole_mesh_compilations = true});
  EXPECT_TRUE(sys.coordinator().configuration()->enable_whole_mesh_compilations);
  for (int t = 0; t < 2; ++t) {
    EXPECT_TRUE(sys.host(t).configuration()->enable_whole_mesh_compilations) << "host " << t;
  }
  // It survives the wire form that carries it to other processes.
  EXPECT_TRUE(HostConfiguration::from_serialized(sys.host(1).configuration()->serialized())
                  .enable_whole_mesh_compilations);
  // A host told otherwise disagrees with the configuration.
  sys.take_down();
  const HostConfiguration config = sys.coordinator().configure_distributed_system(
      sys.disconnect_all(), {.enable_whole_mesh_compilations = true});
  EXPECT_TESSEL_ERROR(
      sys.host(1).initialize_host(config, {.enable_whole_mesh_compilations = false}),
      ErrorCode::kInvalidArgument,
      "Host 1: enable_whole_mesh_compilations is false here but true in the configuration");
  // Default: off.
  sys.host(1).disconnect_host();
  SimulatedSystem plain(1, 1);
  plain.bring_up();
  EXPECT_FALSE(plain.host(0).configuration()->enable_whole_mesh_compilations);
}

TEST(Seed102, Error_InvalidArgument_InputRankIsWrong) {
  SimulatedSystem sys(2, 1);
  sys.disconnect_all();
  const Tensor one = Tensor::from_vector<int32_t>({1}, Shape{});
  EXPECT_TESSEL_ERROR(sys.coordinator().configure_distributed_system(std::vector<Tensor>{
                          Tensor::from_vector<int32_t>({1, 1}, Shape{2}), one}),
                      ErrorCode::kInvalidArgument, "Input 0 should be a scalar but has 1 dimensions");
  const HostConfiguration config =
      sys.coordinator().configure_distributed_system(std::vector<Tensor>{one, one});
  sys.host(0).initialize_host(config);
  sys.host(1).initialize_host(config);
  EXPECT_TESSEL_ERROR(sys.coordinator().wait_for_distributed_system(
                          std::vector<Tensor>{Tensor::from_vector<int32_t>({0}, Shape{1}),
                                              Tensor::from_vector<int32_t>({1}, Shape{1, 1})},
                          kShort),
                      ErrorCode::kInvalidArgument, "Input 1 should be a vector but has 2 dimensions");
}

TEST(Seed102, ShutdownWithoutConfiguredSystemDoesNothingAsTfsKernel) {
  // TF's _ShutdownDistributedTPU deletes the system's state "if it exists".
  SimulatedSystem sys(2, 1);
  sys.coordinator().shutdown_distributed_system();
  EXPECT_EQ(sys.coordinator().state(), SystemState::kUnconfigured);
  sys.bring_up();
  sys.take_down();
  sys.coordinator().shutdown_distributed_system();
  EXPECT_EQ(sys.coordinator().state(), SystemState::kShutDown);
  EXPECT_EQ(sys.bring_up(), Topology::for_hosts(2, 1));  // and it comes up again
}

TEST(Seed102, StepsCheckTheirInputsBeforeTheSystemsState) {
  SimulatedSystem sys(2, 2);
  // Hosts have not run step 1 and the counts disagree: TF's kernel reports the counts first,
  // and the out-of-order call changes nothing.
  EXPECT_TESSEL_ERROR(sys.coordinator().configure_distributed_system({2, 3}),
                      ErrorCode::kInternal, "Host 1 has 3 devices but host 0 has 2");
  EXPECT_EQ(sys.coordinator().state(), SystemState::kUnconfigured);
  EXPECT_TESSEL_ERROR(sys.coordinator().configure_distributed_system({2, 2}),
                      ErrorCode::kFailedPrecondition, "step 1 (disconnect_host) has not run");
  // Wait before any configure: the ids' lengths first, then "not initialized".
  EXPECT_TESSEL_ERROR(sys.coordinator().wait_for_distributed_system({{0, 1}, {2}}, kShort),
                      ErrorCode::kInternal, "Host 1 has 1 devices but host 0 has 2");
  EXPECT_TESSEL_ERROR(sys.coordinator().wait_for_distributed_system(kNoIds, kShort),
                      ErrorCode::kFailedPrecondition, "The system has not been initialized");
  EXPECT_EQ(sys.coordinator().state(), SystemState::kUnconfigured);
}

TEST(Seed102, ReconfiguringARunningSystemReplacesItsConfiguration) {
  // TF's configure replaces the mesh state it finds; tessel too, once every host ran step 1.
  SimulatedSystem sys(2, 1);
  sys.bring_up();
  const HostConfiguration again =
      sys.coordinator().configure_distributed_system(sys.disconnect_all());
  EXPECT_EQ(again.generation, 2u);
  EXPECT_EQ(sys.coordinator().state(), SystemState::kConfigured);
}

TEST(Seed102, Error_DeadlineExceeded_HostsNotUpWithinStartupTimeout) {
  SimulatedSystem sys(4, 1);
  const HostConfiguration config =
      sys.coordinator().configure_distributed_system(sys.disconnect_all());
  sys.host(0).initialize_host(config);
  sys.host(2).initialize_host(config);
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(sys.coordinator().wait_for_distributed_system(kNoIds, kShort),
                      ErrorCode::kDeadlineExceeded,
                      "hosts [1, 3] did not report step 3 (initialize_host) within 0.15 s");
  EXPECT_LT(elapsed_ms(start), kShortBound.count());
}

TEST(Seed102, Error_Internal_DeviceCountsDisagreeBetweenHosts) {
  SimulatedSystem sys(std::vector<int>{3, 1});
  EXPECT_TESSEL_ERROR(sys.coordinator().configure_distributed_system(sys.disconnect_all()),
                      ErrorCode::kInternal, "Host 1 has 1 devices but host 0 has 3");
}

TEST(Seed102, Transaction_FailedConfigureRestartsFromDisconnect) {
  SimulatedSystem sys(2, 2);
  SystemCoordinator& c = sys.coordinator();
  EXPECT_TESSEL_ERROR(
      c.configure_distributed_system(sys.disconnect_all(), {.topology = Topology::for_hosts(2, 3)}),
      ErrorCode::kInvalidArgument, "the topology has 3 per task");
  EXPECT_EQ(c.state(), SystemState::kFailed);
  // Not retried silently: configure and wait refuse until every host disconnects again.
  EXPECT_TESSEL_ERROR(c.configure_distributed_system({2, 2}), ErrorCode::kFailedPrecondition,
                      "the last configure or wait failed (SystemCoordinator: Hosts [0, 1] have 2 "
                      "devices each");
  EXPECT_TESSEL_ERROR(c.wait_for_distributed_system(kNoIds, kShort), ErrorCode::kFailedPrecondition,
                      "The system has not been initialized: the last configure or wait failed");
  c.shutdown_distributed_system();  // nothing configured: nothing to do (TF's kernel)
  EXPECT_EQ(c.state(), SystemState::kFailed);
  sys.host(0).disconnect_host();
  EXPECT_TESSEL_ERROR(c.configure_distributed_system({2, 2}), ErrorCode::kFailedPrecondition,
                      "and hosts [1] have not");
  sys.host(1).disconnect_host();
  EXPECT_EQ(c.configure_distributed_system({2, 2}).generation, 1u);  // the first that succeeded
  EXPECT_EQ(c.state(), SystemState::kConfigured);
}

TEST(Seed102, Transaction_FailedWaitRestartsFromDisconnect) {
  SimulatedSystem sys(2, 1);
  SystemCoordinator& c = sys.coordinator();
  const HostConfiguration config = c.configure_distributed_system(sys.disconnect_all());
  sys.host(0).initialize_host(config);
  EXPECT_TESSEL_ERROR(c.wait_for_distributed_system(kNoIds, kShort), ErrorCode::kDeadlineExceeded,
                      "hosts [1]");
  // Host 1 comes late; the wait is not retried silently.
  sys.host(1).initialize_host(config);
  EXPECT_TESSEL_ERROR(c.wait_for_distributed_system(kNoIds, kGenerous), ErrorCode::kFailedPrecondition,
                      "the last configure or wait failed (SystemCoordinator: "
                      "wait_for_distributed_system: hosts [1] did not report");
  // The configured system can still be shut down once everyone disconnected, and started again.
  sys.take_down();
  EXPECT_EQ(c.state(), SystemState::kShutDown);
  EXPECT_EQ(sys.bring_up(), Topology::for_hosts(2, 1));
}

TEST(Seed102, Input_StartupTimeoutDefaultsToTwentySeconds) {
  EXPECT_EQ(kDefaultStartupTimeout, std::chrono::seconds(20));
  EXPECT_EQ(StartOptions{}.startup_timeout, std::chrono::seconds(20));
}

TEST(Seed102, Input_CancellationClosesChipsIsZeroOneOrTwo) {
  SimulatedSystem sys(1, 1);
  const HostConfiguration config =
      sys.coordinator().configure_distributed_system(sys.disconnect_all());
  EXPECT_TESSEL_ERROR(sys.host(0).initialize_host(config, {.cancellation_closes_devices = 3}),
                      ErrorCode::kInvalidArgument,
                      "tpu_cancellation_closes_chips must be 0 (unset), 1 (enabled) or 2 "
                      "(disabled); got 3");
  sys.host(0).disconnect_host();
  const HostConfiguration again =
      sys.coordinator().configure_distributed_system(std::vector<int>{1});
  EXPECT_EQ(sys.host(0).initialize_host(again, {.cancellation_closes_devices = 2}),
            (std::vector<int64_t>{0}));
}

}  // namespace
}  // namespace tessel
