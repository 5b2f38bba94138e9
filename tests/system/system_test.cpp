// The system lifecycle: the five steps with 2 and 4 simulated hosts (driven from one thread, and
// multi-client with one thread per host), deadlines naming the missing hosts, state machines,
// shutdown and restart.
#include <gtest/gtest.h>

#include <thread>

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
using testing::outcome;
using testing::run_hosts;
using testing::SimulatedSystem;
using Clock = std::chrono::steady_clock;


// start_system on hosts 0 (the coordinator, short deadline) and 1 (long deadline) at once, the
// other hosts left alone; what each ended with (outcome()).
std::pair<std::string, std::string> start_hosts_0_and_1(SimulatedSystem& sys) {
  auto results = run_hosts(2, [&](int t) {
    // The coordinator's deadline is short; host 1 would wait long, but hears of its failure.
    return outcome([&] {
      start_system(sys.host(t), t == 0 ? &sys.coordinator() : nullptr,
                   {.startup_timeout = t == 0 ? kShort : kGenerous});
    });
  });
  std::string at0 = results[0].get();
  return {std::move(at0), results[1].get()};
}

TEST(System, FiveStepsWithTwoHosts) {
  SimulatedSystem sys(2, 2);
  Host& h0 = sys.host(0);
  Host& h1 = sys.host(1);
  SystemCoordinator& c = sys.coordinator();
  EXPECT_EQ(h0.state(), HostState::kNew);
  EXPECT_EQ(c.state(), SystemState::kUnconfigured);
  EXPECT_EQ(c.num_hosts(), 2);

  // 1: every host disconnects and reports its device count.
  EXPECT_EQ(h0.disconnect_host(), 2);
  EXPECT_EQ(h1.disconnect_host(), 2);
  EXPECT_EQ(h1.state(), HostState::kDisconnected);
  EXPECT_EQ(h1.epoch(), 1u);
  // 2: configure on task 0.
  const HostConfiguration config = c.configure_distributed_system({2, 2});
  EXPECT_EQ(config.generation, 1u);
  EXPECT_EQ(config.num_hosts, 2);
  EXPECT_EQ(config.devices_per_host, 2);
  EXPECT_EQ(config.coordinator_task, 0);
  EXPECT_FALSE(config.enable_whole_mesh_compilations);
  EXPECT_EQ(config.topology, Topology::for_hosts(2, 2));
  EXPECT_EQ(c.state(), SystemState::kConfigured);
  EXPECT_EQ(c.configuration(), config);
  // 3: every host joins and gets its global ids.
  const std::vector<int64_t> ids0 = h0.initialize_host(config);
  const std::vector<int64_t> ids1 = h1.initialize_host(config);
  EXPECT_EQ(ids0, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(ids1, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h1.state(), HostState::kInitialized);
  EXPECT_EQ(h1.global_device_ids(), ids1);
  EXPECT_EQ(h1.configuration(), config);
  // 4: wait on task 0.
  const Topology topology = c.wait_for_distributed_system({ids0, ids1}, kGenerous);
  EXPECT_EQ(topology, Topology::for_hosts(2, 2));
  EXPECT_EQ(c.state(), SystemState::kRunning);
  // 5: every host learns the topology.
  h0.set_global_topology(topology);
  h1.set_global_topology(topology);
  EXPECT_EQ(h0.state(), HostState::kRunning);
  EXPECT_EQ(h1.topology(), topology);
  EXPECT_EQ(topology.device_name(1, 1), sys.runtime(1).device(1).name());

  // Down: disconnect every host, then shut down.
  sys.take_down();
  EXPECT_EQ(c.state(), SystemState::kShutDown);
  EXPECT_EQ(c.configuration(), std::nullopt);
  EXPECT_EQ(h0.state(), HostState::kDisconnected);
  EXPECT_EQ(h1.topology(), std::nullopt);
  EXPECT_TRUE(h1.global_device_ids().empty());
}

TEST(System, FiveStepsWithFourHosts) {
  SimulatedSystem sys(4, 3);
  const Topology topology = sys.bring_up();
  EXPECT_EQ(topology, Topology::for_hosts(4, 3));
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(sys.host(t).state(), HostState::kRunning);
    EXPECT_EQ(sys.host(t).global_device_ids(), (std::vector<int64_t>{3 * t, 3 * t + 1, 3 * t + 2}));
  }
  sys.take_down();
  EXPECT_EQ(sys.coordinator().state(), SystemState::kShutDown);
}

// Multi-client: every host runs start_system / stop_system on its own thread.
void start_and_stop_on_threads(int num_hosts, int devices) {
  SimulatedSystem sys(num_hosts, devices);
  auto started = run_hosts(num_hosts, [&](int t) {
    return start_system(sys.host(t), t == 0 ? &sys.coordinator() : nullptr,
                        {.startup_timeout = kGenerous});
  });
  for (int t = 0; t < num_hosts; ++t) {
    EXPECT_EQ(started[t].get(), Topology::for_hosts(num_hosts, devices)) << "host " << t;
    EXPECT_EQ(sys.host(t).state(), HostState::kRunning);
    EXPECT_EQ(sys.host(t).global_device_ids(),
              Topology::for_hosts(num_hosts, devices).global_device_ids(t));
  }
  EXPECT_EQ(sys.coordinator().state(), SystemState::kRunning);
  auto stopped = run_hosts(num_hosts, [&](int t) {
    stop_system(sys.host(t), t == 0 ? &sys.coordinator() : nullptr, kGenerous);
    return t;
  });
  for (int t = 0; t < num_hosts; ++t) EXPECT_EQ(stopped[t].get(), t);
  EXPECT_EQ(sys.coordinator().state(), SystemState::kShutDown);
}

TEST(System, StartAndStopOnTwoHostThreads) { start_and_stop_on_threads(2, 2); }
TEST(System, StartAndStopOnFourHostThreads) { start_and_stop_on_threads(4, 2); }

TEST(System, HostThatNeverReportsIsNamedAtTheDeadline) {
  SimulatedSystem sys(3, 2);
  const HostConfiguration config = sys.coordinator().configure_distributed_system(sys.disconnect_all());
  const auto ids0 = sys.host(0).initialize_host(config);
  const auto ids1 = sys.host(1).initialize_host(config);
  // Host 2 never runs step 3.
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(sys.coordinator().wait_for_distributed_system({ids0, ids1}, kShort),
                      ErrorCode::kDeadlineExceeded,
                      "hosts [2] did not report step 3 (initialize_host) within 0.15 s "
                      "(startup_timeout); reported: hosts [0, 1]");
  EXPECT_GE(elapsed_ms(start), kShort.count() - 1);
  EXPECT_LT(elapsed_ms(start), kShortBound.count());
  EXPECT_EQ(sys.coordinator().state(), SystemState::kFailed);
}

TEST(System, HostThreadThatNeverStartsIsNamedOnEveryHost) {
  SimulatedSystem sys(3, 2);
  const auto start = Clock::now();
  // Host 2's thread never calls start_system.
  const auto [at0, at1] = start_hosts_0_and_1(sys);
  EXPECT_LT(elapsed_ms(start), kShortBound.count());
  EXPECT_NE(at0.find("DeadlineExceeded"), std::string::npos) << at0;
  EXPECT_NE(at0.find("hosts [2] did not run step 1 (disconnect_host) within 0.15 s"),
            std::string::npos)
      << at0;
  // Host 1 hears the coordinator's error (its code too) instead of waiting for its own deadline.
  EXPECT_NE(at1.find("DeadlineExceeded"), std::string::npos) << at1;
  EXPECT_NE(at1.find("the coordinator (task 0) failed"), std::string::npos) << at1;
  EXPECT_NE(at1.find("hosts [2]"), std::string::npos) << at1;
}

TEST(System, HostThatStopsAfterStepOneIsNamedByWait) {
  SimulatedSystem sys(3, 2);
  sys.host(2).disconnect_host();  // step 1, then host 2 "dies"
  const auto start = Clock::now();
  const auto [at0, at1] = start_hosts_0_and_1(sys);
  EXPECT_LT(elapsed_ms(start), kShortBound.count());
  EXPECT_NE(at0.find("DeadlineExceeded"), std::string::npos) << at0;
  EXPECT_NE(at0.find("hosts [2] did not report step 3"), std::string::npos) << at0;
  EXPECT_NE(at1.find("DeadlineExceeded"), std::string::npos) << at1;
  EXPECT_NE(at1.find("hosts [2] did not report step 3"), std::string::npos) << at1;
}

TEST(System, HostWaitingForAnAbsentCoordinatorTimesOut) {
  SimulatedSystem sys(2, 2);
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(start_system(sys.host(1), nullptr, {.startup_timeout = kShort}),
                      ErrorCode::kDeadlineExceeded,
                      "start_system on host 1: no configuration from the coordinator (task 0) "
                      "within 0.15 s");
  EXPECT_LT(elapsed_ms(start), kShortBound.count());
}

TEST(System, MismatchedDeviceCountsNameTheHost) {
  SimulatedSystem sys(std::vector<int>{2, 2, 3});
  const std::vector<int> counts = sys.disconnect_all();
  EXPECT_EQ(counts, (std::vector<int>{2, 2, 3}));
  EXPECT_TESSEL_ERROR(sys.coordinator().configure_distributed_system(counts),
                      ErrorCode::kInternal, "Host 2 has 3 devices but host 0 has 2");
  EXPECT_EQ(sys.coordinator().state(), SystemState::kFailed);
  EXPECT_EQ(sys.coordinator().configuration(), std::nullopt);
}

TEST(System, MismatchedDeviceCountsOnHostThreads) {
  SimulatedSystem sys(std::vector<int>{2, 3});
  auto results = run_hosts(2, [&](int t) {
    return outcome([&] {
      start_system(sys.host(t), t == 0 ? &sys.coordinator() : nullptr,
                   {.startup_timeout = kGenerous});
    });
  });
  const std::string at0 = results[0].get();
  const std::string at1 = results[1].get();
  EXPECT_NE(at0.find("Internal"), std::string::npos) << at0;
  EXPECT_NE(at0.find("Host 1 has 3 devices but host 0 has 2"), std::string::npos) << at0;
  // BR-102-04's error (TF's code, Internal) on every host, not only on task 0.
  EXPECT_NE(at1.find("Internal"), std::string::npos) << at1;
  EXPECT_NE(at1.find("Host 1 has 3 devices but host 0 has 2"), std::string::npos) << at1;
}

TEST(System, CountsMustBeWhatTheHostsReported) {
  SimulatedSystem sys(2, 2);
  sys.disconnect_all();
  EXPECT_TESSEL_ERROR(sys.coordinator().configure_distributed_system({4, 4}),
                      ErrorCode::kInvalidArgument,
                      "Host 0: device count 4 differs from the 2 it reported at disconnect_host");
}

TEST(System, CountsMustCoverEveryHost) {
  SimulatedSystem sys(2, 2);
  sys.disconnect_all();
  EXPECT_TESSEL_ERROR(sys.coordinator().configure_distributed_system(std::vector<int>{}),
                      ErrorCode::kInvalidArgument, "(N >= 1); got none");
  sys.disconnect_all();
  EXPECT_TESSEL_ERROR(sys.coordinator().configure_distributed_system(std::vector<int>{2}),
                      ErrorCode::kInvalidArgument, "got 1 device counts for a system of 2 hosts");
}

TEST(System, CountsMustMatchTheFlagTopology) {
  SimulatedSystem sys(2, 2);
  sys.disconnect_all();
  EXPECT_TESSEL_ERROR(
      sys.coordinator().configure_distributed_system({2, 2}, {.topology = Topology::for_hosts(2, 4)}),
      ErrorCode::kInvalidArgument, "Hosts [0, 1] have 2 devices each but the topology has 4 per task");
  sys.disconnect_all();
  EXPECT_TESSEL_ERROR(
      sys.coordinator().configure_distributed_system({2, 2}, {.topology = Topology::for_hosts(3, 2)}),
      ErrorCode::kInvalidArgument, "the topology has 3 tasks but the system has 2 hosts");
}

TEST(System, FlagTopologyIsTheOneReturned) {
  SimulatedSystem sys(2, 2);
  // A 2x2 mesh where host 0 holds the first column and host 1 the second.
  const Topology flag({2, 2}, {{{0, 0}, {1, 0}}, {{0, 1}, {1, 1}}});
  const Topology topology = sys.bring_up({.topology = flag});
  EXPECT_EQ(topology, flag);
  EXPECT_EQ(sys.host(1).topology(), flag);
  EXPECT_EQ(sys.host(1).global_device_ids(), (std::vector<int64_t>{2, 3}));
}

TEST(System, ShutdownWaitsForLateDisconnects) {
  SimulatedSystem sys(2, 2);
  sys.bring_up();
  sys.host(0).disconnect_host();
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    sys.host(1).disconnect_host();
  });
  sys.coordinator().shutdown_distributed_system(kGenerous);
  late.join();
  EXPECT_EQ(sys.coordinator().state(), SystemState::kShutDown);
}

TEST(System, ShutdownTimesOutNamingConnectedHosts) {
  SimulatedSystem sys(3, 1);
  sys.bring_up();
  sys.host(1).disconnect_host();
  const auto start = Clock::now();
  EXPECT_TESSEL_ERROR(sys.coordinator().shutdown_distributed_system(kShort),
                      ErrorCode::kDeadlineExceeded,
                      "hosts [0, 2] did not disconnect within 0.15 s");
  EXPECT_LT(elapsed_ms(start), kShortBound.count());
  EXPECT_EQ(sys.coordinator().state(), SystemState::kRunning);  // still up; may retry
  sys.host(0).disconnect_host();
  sys.host(2).disconnect_host();
  sys.coordinator().shutdown_distributed_system();
  EXPECT_EQ(sys.coordinator().state(), SystemState::kShutDown);
}

TEST(System, WaitBeforeConfigureIsNotInitialized) {
  SimulatedSystem sys(2, 2);
  EXPECT_TESSEL_ERROR(sys.coordinator().wait_for_distributed_system(kNoIds, kShort),
                      ErrorCode::kFailedPrecondition, "The system has not been initialized.");
  sys.bring_up();
  sys.take_down();
  EXPECT_TESSEL_ERROR(sys.coordinator().wait_for_distributed_system(kNoIds, kShort),
                      ErrorCode::kFailedPrecondition, "The system has not been initialized.");
}

TEST(System, ReconfigureAfterShutdown) {
  SimulatedSystem sys(2, 2);
  sys.bring_up();
  sys.take_down();
  const Topology again = sys.bring_up();
  EXPECT_EQ(again, Topology::for_hosts(2, 2));
  EXPECT_EQ(sys.coordinator().configuration()->generation, 2u);
  EXPECT_EQ(sys.host(1).configuration()->generation, 2u);
  EXPECT_EQ(sys.host(1).global_device_ids(), (std::vector<int64_t>{2, 3}));
  sys.take_down();
  // And on host threads, twice in a row on the same channel.
  for (int round = 0; round < 2; ++round) {
    auto started = run_hosts(2, [&](int t) {
      return start_system(sys.host(t), t == 0 ? &sys.coordinator() : nullptr,
                          {.startup_timeout = kGenerous});
    });
    for (auto& f : started) EXPECT_EQ(f.get(), Topology::for_hosts(2, 2));
    auto stopped = run_hosts(2, [&](int t) {
      stop_system(sys.host(t), t == 0 ? &sys.coordinator() : nullptr, kGenerous);
      return 0;
    });
    for (auto& f : stopped) f.get();
  }
  EXPECT_EQ(sys.coordinator().state(), SystemState::kShutDown);
}

TEST(System, RestartAfterAFailedStartSkipsStaleReplies) {
  SimulatedSystem sys(3, 2);
  // Round 1: host 2 is absent, so the coordinator fails and sends its failure to hosts 1 and 2;
  // host 2 never reads it.
  auto first = run_hosts(2, [&](int t) {
    // The coordinator's deadline is short; the others would wait long, but hear of its failure.
    return outcome([&] {
      start_system(sys.host(t), t == 0 ? &sys.coordinator() : nullptr,
                   {.startup_timeout = t == 0 ? kShort : kGenerous});
    });
  });
  for (auto& f : first) EXPECT_NE(f.get(), "ok");
  // Round 2: everyone. Host 2 must skip the old failure waiting in its queue.
  auto second = run_hosts(3, [&](int t) {
    return start_system(sys.host(t), t == 0 ? &sys.coordinator() : nullptr,
                        {.startup_timeout = kGenerous});
  });
  for (auto& f : second) EXPECT_EQ(f.get(), Topology::for_hosts(3, 2));
}

TEST(System, StaleConfigurationIsRejectedAtWait) {
  SimulatedSystem sys(2, 2);
  sys.bring_up();
  const HostConfiguration old = *sys.coordinator().configuration();
  sys.take_down();
  const HostConfiguration current = sys.coordinator().configure_distributed_system(sys.disconnect_all());
  const auto ids0 = sys.host(0).initialize_host(current);
  const auto ids1 = sys.host(1).initialize_host(old);
  EXPECT_TESSEL_ERROR(sys.coordinator().wait_for_distributed_system({ids0, ids1}, kGenerous),
                      ErrorCode::kFailedPrecondition,
                      "Host 1 initialized with the configuration of generation 1, but the current "
                      "one is generation 2");
  EXPECT_EQ(sys.coordinator().state(), SystemState::kFailed);
}

TEST(System, HostRejectsAConfigurationThatDoesNotFit) {
  SimulatedSystem sys(std::vector<int>{2, 3});
  Host& h1 = sys.host(1);
  h1.disconnect_host();
  HostConfiguration config;
  config.generation = 1;
  config.num_hosts = 2;
  config.devices_per_host = 2;
  config.topology = Topology::for_hosts(2, 2);
  EXPECT_TESSEL_ERROR(h1.initialize_host(config), ErrorCode::kInvalidArgument,
                      "Host 1 has 3 devices but the configuration has 2 per host");
  EXPECT_EQ(h1.state(), HostState::kFailed);
  EXPECT_TESSEL_ERROR(h1.initialize_host(config), ErrorCode::kFailedPrecondition,
                      "an earlier step failed (Host: Host 1 has 3 devices");
  EXPECT_EQ(h1.disconnect_host(), 3);
  EXPECT_EQ(h1.state(), HostState::kDisconnected);

  config.num_hosts = 4;
  config.topology = Topology::for_hosts(4, 3);
  config.devices_per_host = 3;
  EXPECT_TESSEL_ERROR(h1.initialize_host(config), ErrorCode::kInvalidArgument,
                      "Host 1: the configuration is for 4 hosts but the system has 2");
  h1.disconnect_host();
  config.num_hosts = 2;
  EXPECT_TESSEL_ERROR(h1.initialize_host(config), ErrorCode::kInvalidArgument,
                      "Host 1: the configuration's topology has 4 tasks x 3 devices, not 2 x 3");
}

TEST(System, SetGlobalTopologyMustBeTheConfiguredOne) {
  SimulatedSystem sys(2, 2);
  const HostConfiguration config = sys.coordinator().configure_distributed_system(sys.disconnect_all());
  sys.host(1).initialize_host(config);
  EXPECT_TESSEL_ERROR(sys.host(1).set_global_topology(Topology::for_hosts(1, 4)),
                      ErrorCode::kInvalidArgument,
                      "Host 1: the topology Topology(mesh_shape=[4,1,1,1], num_tasks=1");
  EXPECT_EQ(sys.host(1).state(), HostState::kFailed);
}

TEST(System, WaitIdsFollowTensorFlowRules) {
  SimulatedSystem sys(2, 2);
  HostConfiguration config = sys.coordinator().configure_distributed_system(sys.disconnect_all());
  EXPECT_TESSEL_ERROR(sys.coordinator().wait_for_distributed_system({{0, 1}, {2}}, kShort),
                      ErrorCode::kInternal, "Host 1 has 1 devices but host 0 has 2");
  config = sys.coordinator().configure_distributed_system(sys.disconnect_all());
  EXPECT_TESSEL_ERROR(sys.coordinator().wait_for_distributed_system({{0, 1}, {3, 2}}, kShort),
                      ErrorCode::kInvalidArgument,
                      "Host 1: global device ids [3,2] are not the ids the configuration assigns "
                      "it ([2,3])");
  config = sys.coordinator().configure_distributed_system(sys.disconnect_all());
  EXPECT_TESSEL_ERROR(
      sys.coordinator().wait_for_distributed_system({{0, 1}, {2, 3}, {4, 5}}, kShort),
      ErrorCode::kInvalidArgument, "got 3 id vectors for a system of 2 hosts");
  EXPECT_TESSEL_ERROR(sys.coordinator().wait_for_distributed_system(kNoIds, std::chrono::milliseconds(-1)),
                      ErrorCode::kInvalidArgument, "the timeout must be >= 0");
}

TEST(System, WaitTakesOnlyTheLocalHostsIds) {
  // TF multi-client: the inputs cover the local hosts; the others' ids arrive as reports.
  SimulatedSystem sys(2, 2);
  const HostConfiguration config = sys.coordinator().configure_distributed_system(sys.disconnect_all());
  const auto ids0 = sys.host(0).initialize_host(config);
  sys.host(1).initialize_host(config);
  EXPECT_EQ(sys.coordinator().wait_for_distributed_system({ids0}, kGenerous), config.topology);
  // In kRunning, wait returns the topology again.
  EXPECT_EQ(sys.coordinator().wait_for_distributed_system(kNoIds, kShort), config.topology);
}

TEST(System, TensorInputsFollowTensorFlowRankRules) {
  SimulatedSystem sys(2, 2);
  sys.disconnect_all();
  const Tensor two = Tensor::from_vector<int32_t>({2}, Shape{});
  EXPECT_TESSEL_ERROR(sys.coordinator().configure_distributed_system(
                          std::vector<Tensor>{two, Tensor::from_vector<int32_t>({2}, Shape{1})}),
                      ErrorCode::kInvalidArgument, "Input 1 should be a scalar but has 1 dimensions");
  EXPECT_TESSEL_ERROR(sys.coordinator().configure_distributed_system(
                          std::vector<Tensor>{two, Tensor::full(Shape{}, DType::kF32, 2.0)}),
                      ErrorCode::kInvalidArgument, "Input 1 has dtype f32");
  const HostConfiguration config =
      sys.coordinator().configure_distributed_system(std::vector<Tensor>{two, two});
  EXPECT_EQ(config.devices_per_host, 2);
  const auto ids0 = sys.host(0).initialize_host(config);
  const auto ids1 = sys.host(1).initialize_host(config);
  EXPECT_TESSEL_ERROR(sys.coordinator().wait_for_distributed_system(
                          std::vector<Tensor>{Tensor::from_vector<int64_t>({0}, Shape{})}, kShort),
                      ErrorCode::kInvalidArgument, "Input 0 should be a vector but has 0 dimensions");
  const Topology t = sys.coordinator().wait_for_distributed_system(
      std::vector<Tensor>{Tensor::from_vector<int64_t>(ids0, Shape{2}),
                          Tensor::from_vector<int64_t>(ids1, Shape{2})},
      kGenerous);
  EXPECT_EQ(t, Topology::for_hosts(2, 2));
}

TEST(System, HostConfigurationRoundTrips) {
  HostConfiguration config;
  config.generation = 7;
  config.num_hosts = 2;
  config.devices_per_host = 3;
  config.enable_whole_mesh_compilations = true;
  config.topology = Topology::for_hosts(2, 3);
  EXPECT_EQ(HostConfiguration::from_serialized(config.serialized()), config);
  EXPECT_TESSEL_ERROR(HostConfiguration::from_serialized("\xff\x01"), ErrorCode::kInvalidArgument,
                      "are not a HostConfigurationProto");
  config.devices_per_host = 4;
  EXPECT_TESSEL_ERROR(HostConfiguration::from_serialized(config.serialized()),
                      ErrorCode::kInvalidArgument,
                      "2 hosts x 4 devices do not match its topology (2 tasks x 3 devices)");
}

TEST(System, HostTaskMustBeAHostOfTheChannel) {
  Runtime rt({.num_cpu_devices = 1, .task = 2});
  EXPECT_TESSEL_ERROR(Host(rt, make_in_process_system_channel(2)), ErrorCode::kInvalidArgument,
                      "task 2 is not a host of a 2-host system (tasks 0..1)");
  EXPECT_TESSEL_ERROR(Host(rt, nullptr), ErrorCode::kInvalidArgument, "the channel is null");
}

TEST(System, StartSystemChecksRoles) {
  SimulatedSystem sys(2, 1);
  EXPECT_TESSEL_ERROR(start_system(sys.host(0), nullptr), ErrorCode::kInvalidArgument,
                      "task 0 runs the coordinator; pass it");
  EXPECT_TESSEL_ERROR(start_system(sys.host(1), &sys.coordinator()), ErrorCode::kInvalidArgument,
                      "host 1 is not task 0 and runs no coordinator");
  EXPECT_TESSEL_ERROR(stop_system(sys.host(1), &sys.coordinator()), ErrorCode::kInvalidArgument,
                      "runs no coordinator");
}

TEST(System, StateNames) {
  EXPECT_EQ(host_state_name(HostState::kNew), "New");
  EXPECT_EQ(host_state_name(HostState::kRunning), "Running");
  EXPECT_EQ(host_state_name(HostState::kFailed), "Failed");
  EXPECT_EQ(system_state_name(SystemState::kUnconfigured), "Unconfigured");
  EXPECT_EQ(system_state_name(SystemState::kShutDown), "ShutDown");
}

}  // namespace
}  // namespace tessel
