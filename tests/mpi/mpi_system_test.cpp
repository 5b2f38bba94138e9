// The seed-102 system lifecycle across the processes of the MPI job, one host per process:
// - MpiSystemChannel.*: the MPI SystemChannel's contract (system_channel.h) between processes;
// - MpiSystem.*: the seed's business rules and error rows (named as tests/system/seed102_test.cpp
//   names them for simulated hosts), driven step by step or by start_system / stop_system;
// - MpiAcceleratorSystem.*: initialize_accelerator_system / shutdown_accelerator_system in every
//   process of the job.
// Every test makes its own channel (and a communicator for the barriers between its phases), so
// that a process that skipped a step leaves nothing behind for the next test. Every wait is
// bounded; the barriers too.
#include <gtest/gtest.h>
#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mpi_testing.h"
#include "system/system_test_util.h"
#include "tessel/comm/communicator.h"
#include "tessel/comm/mpi.h"
#include "tessel/runtime/runtime.h"
#include "tessel/system/accelerator_system.h"
#include "tessel/system/mpi_system_channel.h"
#include "tessel/system/system.h"

namespace tessel {
namespace {

using testing::contains;
using testing::elapsed_ms;
using testing::kGenerous;
using testing::kShort;
using testing::kShortBound;
using testing::outcome;
using Clock = std::chrono::steady_clock;

constexpr int kDevices = 2;  // per process, unless a test says otherwise
// No step-3 outputs held by the caller (they all arrive as the hosts' reports).
const std::vector<std::vector<int64_t>> kNoIds;

// "[from, from + 1, ..., to - 1]" as the coordinator's messages list tasks.
std::string task_list(int from, int to, int step = 1) {
  std::string out = "[";
  for (int t = from; t < to; t += step) out += (t == from ? "" : ", ") + std::to_string(t);
  return out + "]";
}

// True on every process when `bytes` is the same on every process (scaffolding, every process
// must call it).
bool same_on_every_process(const std::string& bytes) {
  uint64_t hash = std::hash<std::string>()(bytes), low = 0, high = 0;
  MPI_Allreduce(&hash, &low, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&hash, &high, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return low == high;
}

// This process's host of a system over the processes of the job: a fresh MPI channel, a Runtime
// named as Runtime::global() is under mpirun (job "worker", task = rank), its Host and, on rank
// 0, the coordinator. Collective: every process makes one at the same point.
class ProcessHost {
 public:
  explicit ProcessHost(int devices = kDevices, const MpiSystemChannelOptions& options = {})
      : sync_(make_mpi_communicator(MpiCommunicatorOptions{"", kGenerous})),
        channel_(make_mpi_system_channel(options)),
        runtime_(RuntimeOptions{.num_cpu_devices = devices, .job = "worker", .task = mpi_rank()}),
        host_(runtime_, channel_) {
    if (rank() == 0) coordinator_ = std::make_unique<SystemCoordinator>(host_);
  }

  int rank() const { return host_.task(); }
  int size() const { return channel_->num_hosts(); }
  int last() const { return size() - 1; }
  Host& host() { return host_; }
  SystemCoordinator& coordinator() { return *coordinator_; }  // rank 0 only
  SystemChannel& channel() { return *channel_; }

  // Returns once every process called it (bounded: kDeadlineExceeded naming the late ones).
  void barrier() { sync_->barrier(testing::mpi_options(Algorithm::kAuto, kGenerous)); }

  Topology start(std::chrono::milliseconds timeout = kGenerous, StartOptions options = {}) {
    options.startup_timeout = timeout;
    return start_system(host_, coordinator_.get(), options);
  }
  void stop() { stop_system(host_, coordinator_.get(), kGenerous); }

  // Rank 0 hands `bytes` to every other process over the channel, as start_system sends its
  // replies (a Host never reads the channel itself); every process returns them.
  std::string from_coordinator(const std::string& bytes) {
    if (rank() == 0) {
      for (int t = 1; t < size(); ++t) channel_->send_to_host(t, bytes);
      return bytes;
    }
    std::optional<std::string> got = channel_->receive_at_host(rank(), Clock::now() + kGenerous);
    if (!got) ADD_FAILURE() << "host " << rank() << " heard nothing from the coordinator";
    return got.value_or("");
  }

 private:
  std::unique_ptr<Communicator> sync_;
  std::shared_ptr<SystemChannel> channel_;
  Runtime runtime_;
  Host host_;
  std::unique_ptr<SystemCoordinator> coordinator_;
};

// ---- the channel ---------------------------------------------------------------------------

TEST(MpiSystemChannel, EveryHostReachesTheCoordinatorInOrder) {
  auto channel = make_mpi_system_channel();
  const int rank = mpi_rank();
  const int size = channel->num_hosts();
  EXPECT_EQ(size, mpi_size());
  constexpr int kCount = 300;
  for (int i = 0; i < kCount; ++i) {
    channel->send_to_coordinator(rank, std::to_string(rank) + ":" + std::to_string(i));
  }
  if (rank == 0) {
    std::vector<int> next(static_cast<size_t>(size), 0);  // per sender, the index expected next
    for (int n = 0; n < size * kCount; ++n) {
      std::optional<SystemChannel::Envelope> m = channel->receive_at_coordinator(Clock::now() + kGenerous);
      ASSERT_TRUE(m.has_value()) << "message " << n << " of " << size * kCount << " never came";
      ASSERT_GE(m->task, 0);
      ASSERT_LT(m->task, size);
      EXPECT_EQ(m->message, std::to_string(m->task) + ":" + std::to_string(next[m->task]))
          << "out of order from host " << m->task;
      ++next[m->task];
    }
    EXPECT_EQ(next, std::vector<int>(static_cast<size_t>(size), kCount));
    EXPECT_EQ(channel->receive_at_coordinator(Clock::now() + kShort), std::nullopt);  // no extra
    for (int t = 0; t < size; ++t) {
      for (int i = 0; i < kCount; ++i) channel->send_to_host(t, "to " + std::to_string(t) + ":" + std::to_string(i));
    }
  }
  for (int i = 0; i < kCount; ++i) {
    std::optional<std::string> m = channel->receive_at_host(rank, Clock::now() + kGenerous);
    ASSERT_TRUE(m.has_value()) << "message " << i << " never came";
    EXPECT_EQ(*m, "to " + std::to_string(rank) + ":" + std::to_string(i));
  }
  EXPECT_EQ(channel->receive_at_host(rank, Clock::now()), std::nullopt);
}

TEST(MpiSystemChannel, ReceiveTimesOutQuicklyAndConsumesNothing) {
  ProcessHost p;
  SystemChannel& channel = p.channel();
  auto start = Clock::now();
  if (p.rank() == 0) {
    EXPECT_EQ(channel.receive_at_coordinator(start + kShort), std::nullopt);
    EXPECT_GE(elapsed_ms(start), kShort.count() - 1);
    EXPECT_LT(elapsed_ms(start), kShortBound.count());
    start = Clock::now();
    EXPECT_EQ(channel.receive_at_coordinator(start - kShort), std::nullopt);  // already past
    EXPECT_LT(elapsed_ms(start), kShortBound.count());
  }
  start = Clock::now();
  EXPECT_EQ(channel.receive_at_host(p.rank(), start + kShort), std::nullopt);
  EXPECT_GE(elapsed_ms(start), kShort.count() - 1);
  EXPECT_LT(elapsed_ms(start), kShortBound.count());
  p.barrier();
  // What the timed-out receives did not take arrives whole, once, afterwards.
  channel.send_to_coordinator(p.rank(), "after " + std::to_string(p.rank()));
  if (p.rank() == 0) {
    std::vector<int> seen(static_cast<size_t>(p.size()), 0);
    for (int n = 0; n < p.size(); ++n) {
      auto m = channel.receive_at_coordinator(Clock::now() + kGenerous);
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->message, "after " + std::to_string(m->task));
      ++seen[m->task];
    }
    EXPECT_EQ(seen, std::vector<int>(static_cast<size_t>(p.size()), 1));
    EXPECT_EQ(channel.receive_at_coordinator(Clock::now() + kShort), std::nullopt);
  }
}

TEST(MpiSystemChannel, LargeMessagesArriveWhole) {
  auto channel = make_mpi_system_channel();
  const int rank = mpi_rank();
  auto payload = [](int task) {
    std::string s((size_t{1} << 20) + 3, '\0');  // above any eager limit
    for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>((i * 7 + task) & 0xff);
    return s;
  };
  channel->send_to_coordinator(rank, payload(rank));
  if (rank == 0) {
    for (int n = 0; n < channel->num_hosts(); ++n) {
      auto m = channel->receive_at_coordinator(Clock::now() + kGenerous);
      ASSERT_TRUE(m.has_value());
      EXPECT_TRUE(m->message == payload(m->task)) << "the message of host " << m->task << " differs";
    }
    for (int t = 0; t < channel->num_hosts(); ++t) channel->send_to_host(t, payload(100 + t));
  }
  auto m = channel->receive_at_host(rank, Clock::now() + kGenerous);
  ASSERT_TRUE(m.has_value());
  EXPECT_TRUE(*m == payload(100 + rank));
}

TEST(MpiSystemChannel, TasksAreThisProcesssOwnAndInRange) {
  auto channel = make_mpi_system_channel();
  const int rank = mpi_rank();
  const int size = channel->num_hosts();
  const int other = (rank + 1) % size;
  EXPECT_TESSEL_ERROR(channel->send_to_coordinator(size, "x"), ErrorCode::kInvalidArgument,
                      "send_to_coordinator: task " + std::to_string(size) +
                          " is not a host of this channel (0.." + std::to_string(size - 1) + ")");
  EXPECT_TESSEL_ERROR(channel->receive_at_host(-1, Clock::now()), ErrorCode::kInvalidArgument,
                      "task -1 is not a host");
  EXPECT_TESSEL_ERROR(channel->send_to_host(size, "x"), ErrorCode::kInvalidArgument,
                      "is not a host of this channel");
  EXPECT_TESSEL_ERROR(channel->send_to_coordinator(other, "x"), ErrorCode::kInvalidArgument,
                      "this process is task " + std::to_string(rank) + " (MPI rank " +
                          std::to_string(rank) + ") and cannot act for task " + std::to_string(other));
  EXPECT_TESSEL_ERROR(channel->receive_at_host(other, Clock::now()), ErrorCode::kInvalidArgument,
                      "cannot act for task " + std::to_string(other));
  if (rank != 0) {
    EXPECT_TESSEL_ERROR(channel->receive_at_coordinator(Clock::now()),
                        ErrorCode::kFailedPrecondition,
                        "receive_at_coordinator: the coordinator is task 0 (MPI rank 0); this "
                        "process is task " + std::to_string(rank));
    EXPECT_TESSEL_ERROR(channel->send_to_host(0, "x"), ErrorCode::kFailedPrecondition,
                        "send_to_host: the coordinator is task 0");
  }
  EXPECT_TESSEL_ERROR(make_mpi_system_channel({.timeout = std::chrono::milliseconds(0)}),
                      ErrorCode::kInvalidArgument, "timeout must be > 0");
}

TEST(MpiSystemChannel, MessagesOfAnEarlierChannelNeverReachALaterOne) {
  const int rank = mpi_rank();
  {
    ProcessHost old;
    old.channel().send_to_coordinator(rank, "old");
    if (rank == 0) {
      for (int t = 0; t < old.size(); ++t) old.channel().send_to_host(t, "old");
    }
    old.barrier();  // every "old" is sent; nobody receives them
  }
  // A new channel (MPI may give it the old one's context id) delivers none of them.
  ProcessHost p;
  if (rank == 0) {
    EXPECT_EQ(p.channel().receive_at_coordinator(Clock::now() + kShort), std::nullopt);
  }
  EXPECT_EQ(p.channel().receive_at_host(rank, Clock::now() + kShort), std::nullopt);
  p.barrier();
  p.channel().send_to_coordinator(rank, "new");
  if (rank == 0) {
    for (int n = 0; n < p.size(); ++n) {
      auto m = p.channel().receive_at_coordinator(Clock::now() + kGenerous);
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->message, "new");
    }
  }
}

// The last process leaves its channel at once while rank 0 still sends to it (as a process that
// skipped the rest of a start does): the next channel still carries every message both ways.
TEST(MpiSystemChannel, AProcessLeavingEarlyLeavesTheNextChannelWorking) {
  const int rank = mpi_rank(), size = mpi_size(), last = size - 1;
  auto early = make_mpi_system_channel({.close_timeout = kShort});
  if (rank == last) early.reset();
  if (rank == 0) {
    std::this_thread::sleep_for(2 * kShort);
    for (int t = 1; t < size; ++t) early->send_to_host(t, "late");
  }
  testing::world_barrier();
  early.reset();
  auto next = make_mpi_system_channel();
  next->send_to_coordinator(rank, "next " + std::to_string(rank));
  if (rank == 0) {
    std::vector<int> seen(static_cast<size_t>(size), 0);
    for (int n = 0; n < size; ++n) {
      auto m = next->receive_at_coordinator(Clock::now() + kGenerous);
      ASSERT_TRUE(m.has_value()) << "only " << n << " of " << size << " hosts were heard";
      EXPECT_EQ(m->message, "next " + std::to_string(m->task));
      ++seen[m->task];
    }
    EXPECT_EQ(seen, std::vector<int>(static_cast<size_t>(size), 1));
    for (int t = 0; t < size; ++t) next->send_to_host(t, "to " + std::to_string(t));
  }
  EXPECT_EQ(next->receive_at_host(rank, Clock::now() + kGenerous), "to " + std::to_string(rank));
}

TEST(MpiSystemChannel, DestructionDoesNotWaitForUnreceivedSends) {
  const int rank = mpi_rank();
  Clock::time_point start;
  {
    auto channel = make_mpi_system_channel({.close_timeout = kShort});
    // Too large to go eagerly: the send completes only when the coordinator, which never
    // receives, takes it.
    channel->send_to_coordinator(rank, std::string(size_t{4} << 20, 'x'));
    start = Clock::now();
  }
  EXPECT_LT(elapsed_ms(start), kShortBound.count());
  testing::world_barrier();
}

// ---- the seed's rules across processes ------------------------------------------------------

TEST(MpiSystem, BR_102_01_FiveStepsRunInOrderAcrossProcesses) {
  ProcessHost p;
  const int n = p.size();
  const std::string me = std::to_string(p.rank());
  // Steps 3 and 5 before step 1, on every process.
  EXPECT_TESSEL_ERROR(p.host().initialize_host(HostConfiguration{}), ErrorCode::kFailedPrecondition,
                      "initialize_host (step 3) on host " + me + ": step 1 (disconnect_host) has not run");
  EXPECT_TESSEL_ERROR(p.host().set_global_topology(Topology::for_hosts(n, kDevices)),
                      ErrorCode::kFailedPrecondition,
                      "set_global_topology (step 5) on host " + me + ": step 3 (initialize_host) has not run");
  if (p.rank() == 0) {
    // Step 2 before step 1 on the other processes (they wait at the barrier below).
    p.host().disconnect_host();
    EXPECT_TESSEL_ERROR(p.coordinator().configure_distributed_system(std::vector<int>(n, kDevices)),
                        ErrorCode::kFailedPrecondition,
                        "step 1 (disconnect_host) has not run on hosts " + task_list(1, n) +
                            " since the last configure");
    EXPECT_TESSEL_ERROR(p.coordinator().wait_for_distributed_system(kNoIds, kShort),
                        ErrorCode::kFailedPrecondition, "The system has not been initialized.");
    EXPECT_EQ(p.coordinator().state(), SystemState::kUnconfigured);
  }
  p.barrier();
  if (p.rank() != 0) p.host().disconnect_host();  // step 1
  // Step 2 on task 0 with every process's reported count; the configuration to every process.
  std::string bytes;
  if (p.rank() == 0) {
    const std::vector<int> counts = p.coordinator().gather_device_counts(kGenerous);
    bytes = p.coordinator().configure_distributed_system(counts).serialized();
  }
  const HostConfiguration config = HostConfiguration::from_serialized(p.from_coordinator(bytes));
  EXPECT_EQ(config.num_hosts, n);
  const std::vector<int64_t> ids = p.host().initialize_host(config);  // step 3
  EXPECT_EQ(ids, (std::vector<int64_t>{p.rank() * kDevices, p.rank() * kDevices + 1}));
  if (p.rank() == 0) {
    bytes = p.coordinator().wait_for_distributed_system({ids}, kGenerous).serialized();  // step 4
    EXPECT_EQ(p.coordinator().state(), SystemState::kRunning);
  }
  const Topology topology = Topology::from_serialized(p.from_coordinator(bytes));
  p.host().set_global_topology(topology);  // step 5
  EXPECT_EQ(p.host().state(), HostState::kRunning);
  EXPECT_EQ(p.host().topology(), Topology::for_hosts(n, kDevices));
  EXPECT_TRUE(same_on_every_process(p.host().topology().value_or(Topology()).serialized()));
  // Down: every process disconnects, then task 0 shuts down.
  p.host().disconnect_host();
  if (p.rank() == 0) {
    p.coordinator().shutdown_distributed_system(kGenerous);
    EXPECT_EQ(p.coordinator().state(), SystemState::kShutDown);
  }
}

TEST(MpiSystem, BR_102_02_CoordinatorOnTaskZeroGathersEveryHostsDeviceCount) {
  ProcessHost p(1 + mpi_rank() % 3);  // a device count of its own per process
  if (p.rank() != 0) {
    EXPECT_TESSEL_ERROR(SystemCoordinator(p.host()), ErrorCode::kFailedPrecondition,
                        "the coordinator runs on task 0 (BR-102-02: configure and wait run on "
                        "worker 0); this host is task " + std::to_string(p.rank()));
  }
  EXPECT_EQ(p.host().disconnect_host(), 1 + p.rank() % 3);
  if (p.rank() == 0) {
    std::vector<int> expected;
    for (int t = 0; t < p.size(); ++t) expected.push_back(1 + t % 3);
    EXPECT_EQ(p.coordinator().gather_device_counts(kGenerous), expected);
  }
}

TEST(MpiSystem, BR_102_03_ShutdownOnlyAfterEveryHostDisconnected) {
  ProcessHost p;
  const int n = p.size();
  EXPECT_EQ(p.start(), Topology::for_hosts(n, kDevices));
  if (p.rank() == 0) {
    // Nobody has disconnected: the others wait at the barrier.
    EXPECT_TESSEL_ERROR(p.coordinator().shutdown_distributed_system(),
                        ErrorCode::kFailedPrecondition,
                        "hosts " + task_list(0, n) + " have not disconnected; disconnect_host must "
                        "complete on every host before shutdown (BR-102-03)");
    p.host().disconnect_host();
  }
  p.barrier();
  if (p.rank() % 2 == 0 && p.rank() != 0) p.host().disconnect_host();
  p.barrier();
  if (p.rank() == 0) {
    // The odd hosts are still connected.
    EXPECT_TESSEL_ERROR(p.coordinator().shutdown_distributed_system(std::chrono::milliseconds(500)),
                        ErrorCode::kDeadlineExceeded,
                        "hosts " + task_list(1, n, 2) + " did not disconnect within 0.5 s; "
                        "disconnect_host must complete on every host before shutdown (BR-102-03); "
                        "disconnected: hosts " + task_list(0, n, 2));
    EXPECT_EQ(p.coordinator().state(), SystemState::kRunning);
  }
  p.barrier();
  if (p.rank() % 2 == 1) p.host().disconnect_host();
  if (p.rank() == 0) {
    p.coordinator().shutdown_distributed_system(kGenerous);
    EXPECT_EQ(p.coordinator().state(), SystemState::kShutDown);
  }
}

TEST(MpiSystem, BR_102_04_HostWithAnotherDeviceCountIsNamedOnEveryProcess) {
  const int last = mpi_size() - 1;
  ProcessHost p(mpi_rank() == last ? 1 : kDevices);
  const std::string result = outcome([&] { p.start(); });
  // Task 0's configure fails; every process reports its kInternal (TF's code) naming the host.
  EXPECT_TRUE(contains(result, "Internal: ")) << result;
  EXPECT_TRUE(contains(result, "Host " + std::to_string(last) + " has 1 devices but host 0 has 2"))
      << result;
  if (p.rank() != 0) {
    EXPECT_TRUE(contains(result, "start_system on host " + std::to_string(p.rank()) +
                                     ": the coordinator (task 0) failed"))
        << result;
  } else {
    EXPECT_EQ(p.coordinator().state(), SystemState::kFailed);
  }
}

TEST(MpiSystem, BR_102_05_WholeMeshCompilationsFlagReachesEveryProcess) {
  ProcessHost p;
  StartOptions options;
  options.configure.enable_whole_mesh_compilations = true;
  p.start(kGenerous, options);
  ASSERT_TRUE(p.host().configuration().has_value());
  EXPECT_TRUE(p.host().configuration()->enable_whole_mesh_compilations);
  p.stop();
}

TEST(MpiSystem, ShutdownWithoutConfiguredSystemDoesNothing) {
  // TF's _ShutdownDistributedTPU deletes the system's state "if it exists".
  ProcessHost p;
  if (p.rank() == 0) {
    p.coordinator().shutdown_distributed_system();
    EXPECT_EQ(p.coordinator().state(), SystemState::kUnconfigured);
  }
  p.start();
  p.stop();
  if (p.rank() == 0) {
    p.coordinator().shutdown_distributed_system();
    EXPECT_EQ(p.coordinator().state(), SystemState::kShutDown);
  }
}

TEST(MpiSystem, Error_DeadlineExceeded_HostThatSkipsInitializeIsNamedOnEveryProcess) {
  ProcessHost p;
  const int last = p.last();
  const auto timeout = std::chrono::milliseconds(1000);
  if (p.rank() == last) p.host().disconnect_host();  // step 1, then this process "dies"
  p.barrier();
  if (p.rank() == last) return;
  const auto start = Clock::now();
  // Task 0 waits `timeout`; the others would wait longer but hear of its failure.
  const std::string result = outcome([&] { p.start(p.rank() == 0 ? timeout : kGenerous); });
  EXPECT_LT(elapsed_ms(start), (timeout + kShortBound).count());
  EXPECT_TRUE(contains(result, "DeadlineExceeded: ")) << result;
  EXPECT_TRUE(contains(result, "hosts [" + std::to_string(last) +
                                   "] did not report step 3 (initialize_host) within 1 s"))
      << result;
}

TEST(MpiSystem, Transaction_FailedStartIsRedoneFromDisconnect) {
  ProcessHost p;
  const int n = p.size();
  StartOptions wrong;
  wrong.configure.topology = Topology::for_hosts(n, 3);  // task 0's flag topology disagrees
  const std::string result = outcome([&] { p.start(kGenerous, wrong); });
  EXPECT_TRUE(contains(result, "InvalidArgument: ")) << result;
  EXPECT_TRUE(contains(result, "have 2 devices each but the topology has 3 per task")) << result;
  EXPECT_EQ(p.host().state(), HostState::kDisconnected);
  // Every process starts again from step 1 (start_system's first step) and the system comes up.
  EXPECT_EQ(p.start(), Topology::for_hosts(n, kDevices));
  EXPECT_EQ(p.host().state(), HostState::kRunning);
  p.stop();
}

TEST(MpiSystem, StartAndStopAcrossProcessesTwice) {
  ProcessHost p;
  const int n = p.size();
  for (int round = 1; round <= 2; ++round) {
    const Topology topology = p.start();
    EXPECT_EQ(topology, Topology::for_hosts(n, kDevices));
    EXPECT_EQ(p.host().topology(), topology);
    EXPECT_TRUE(same_on_every_process(topology.serialized()));
    EXPECT_EQ(p.host().global_device_ids(), topology.global_device_ids(p.rank()));
    ASSERT_TRUE(p.host().configuration().has_value());
    EXPECT_EQ(p.host().configuration()->generation, static_cast<uint64_t>(round));
    p.stop();
    EXPECT_EQ(p.host().state(), HostState::kDisconnected);
    if (p.rank() == 0) {
      EXPECT_EQ(p.coordinator().state(), SystemState::kShutDown);
    }
  }
}

// ---- initialize_accelerator_system under mpirun --------------------------------------------

class MpiAcceleratorSystem : public ::testing::Test {
 protected:
  void TearDown() override {
    if (is_accelerator_system_initialized()) shutdown_accelerator_system();
  }
  static AcceleratorSystemOptions options(int devices = -1) {
    return {.num_logical_cpu_devices = devices, .startup_timeout = kGenerous,
            .shutdown_timeout = kGenerous};
  }
};

TEST_F(MpiAcceleratorSystem, InitializeBringsUpOneHostPerProcess) {
  const int rank = mpi_rank(), n = mpi_size();
  const int d = Runtime::global().num_devices();
  const AcceleratorSystemInfo info = initialize_accelerator_system(options());
  EXPECT_EQ(info.num_hosts, n);
  EXPECT_EQ(info.task, rank);
  EXPECT_EQ(info.num_local_devices, d);
  EXPECT_EQ(info.num_devices, n * d);
  EXPECT_EQ(info.topology, Topology::for_hosts(n, d));
  EXPECT_TRUE(same_on_every_process(info.topology.serialized()));
  EXPECT_EQ(info.local_device_ids, info.topology.global_device_ids(rank));
  // The global runtime fits: it is named after this client (job "worker", task = rank).
  EXPECT_FALSE(info.owns_runtime);
  EXPECT_EQ(accelerator_system_runtime().get(), &Runtime::global());
  EXPECT_EQ(Runtime::global().device(0).name(),
            "/job:worker/replica:0/task:" + std::to_string(rank) + "/device:CPU:0");
  shutdown_accelerator_system();
  EXPECT_FALSE(is_accelerator_system_initialized());
}

TEST_F(MpiAcceleratorSystem, ReinitializeAfterShutdownWithOtherDeviceCounts) {
  const int rank = mpi_rank(), n = mpi_size();
  for (int d : {3, 1, -1}) {
    const AcceleratorSystemInfo info = initialize_accelerator_system(options(d));
    const int local = d == -1 ? Runtime::global().num_devices() : d;
    EXPECT_EQ(info.num_devices, n * local) << "devices " << d;
    EXPECT_EQ(info.topology, Topology::for_hosts(n, local));
    const std::shared_ptr<Runtime> rt = accelerator_system_runtime();
    EXPECT_EQ(rt->device(local - 1).name(), "/job:worker/replica:0/task:" + std::to_string(rank) +
                                                "/device:CPU:" + std::to_string(local - 1));
    shutdown_accelerator_system();
  }
  EXPECT_FALSE(is_accelerator_system_initialized());
}

TEST_F(MpiAcceleratorSystem, DifferingDeviceCountFailsOnEveryProcessAndLeavesItUninitialized) {
  const int last = mpi_size() - 1;
  const std::string result =
      outcome([&] { initialize_accelerator_system(options(mpi_rank() == last ? 1 : 2)); });
  EXPECT_TRUE(contains(result, "Internal: ")) << result;
  EXPECT_TRUE(contains(result, "Host " + std::to_string(last) + " has 1 devices but host 0 has 2"))
      << result;
  EXPECT_FALSE(is_accelerator_system_initialized());
  // Every process starts again, with agreeing counts.
  EXPECT_EQ(initialize_accelerator_system(options(2)).num_devices, 2 * mpi_size());
  shutdown_accelerator_system();
}

}  // namespace
}  // namespace tessel
