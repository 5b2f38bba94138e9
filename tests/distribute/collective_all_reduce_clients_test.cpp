// CollectiveAllReduce when the program runs as several clients (TF's MultiWorkerMirroredStrategy:
// each client is one worker and calls with its local per-replica values): simulated clients of
// one process (make_in_process_cluster, one Runtime per client, set_cluster), the same code path
// as processes under mpirun (tests/mpi/mpi_distribute_test.cpp). Results are checked against
// the sums computed here by plain arithmetic.
#include <gtest/gtest.h>

#include <functional>

#include "distribute/distribute_test_util.h"
#include "testing/expect_error.h"
#include "testing/scoped_env.h"
#include "testing/simulated_clients.h"

namespace tessel {
namespace {

using testing::cpu;
using testing::floats;
using testing::vec;

constexpr int kClients = 2;
constexpr int kLocal = 2;

// This client's two devices, full names.
std::vector<std::string> devices_of(const testing::SimulatedClient& client) {
  return {client.runtime().device(0).name(), client.runtime().device(1).name()};
}

// program(client) on every client at once; fails the test with what the first one threw.
void run_clients(testing::SimulatedClients& clients,
                 const std::function<void(testing::SimulatedClient&)>& program) {
  for (const std::exception_ptr& e : clients.run(program)) {
    if (e) std::rethrow_exception(e);
  }
}

TEST(CollectiveAllReduceClients, ReduceAndBatchReduceSpanTheClients) {
  testing::SimulatedClients clients(kClients, kLocal);
  // Global device g = client * 2 + local device holds {g + 1, 10 * (g + 1)}.
  std::vector<std::vector<float>> sums(kClients), means(kClients), maxes(kClients);
  std::vector<std::vector<float>> batch0(kClients), batch1(kClients);
  std::vector<std::vector<float>> gathered(kClients);
  run_clients(clients, [&](testing::SimulatedClient& client) {
    const int c = client.id();
    const std::vector<std::string> devs = devices_of(client);
    CollectiveAllReduce ops(devs, kClients * kLocal, CommunicationOptions(0, 10.0),
                            client.runtime());
    EXPECT_EQ(ops.num_between_graph_workers(), kClients);
    auto value = [&](float scale) {
      const float g = static_cast<float>(c * kLocal);
      return PerReplica(devs, {vec({scale * (g + 1), scale * 10 * (g + 1)}),
                               vec({scale * (g + 2), scale * 10 * (g + 2)})});
    };
    const PerReplica v = value(1);
    sums[static_cast<size_t>(c)] = floats(ops.reduce(ReduceOp::kSum, v, v).value(1));
    means[static_cast<size_t>(c)] = floats(ops.reduce(ReduceOp::kMean, v, v).value(0));
    EXPECT_EQ(ops.last_plan().mean_divisors, std::vector<int64_t>{kClients * kLocal});
    maxes[static_cast<size_t>(c)] = floats(ops.reduce(ReduceOp::kMax, v, v).value(0));
    const PerReplica w = value(2);
    const std::vector<Mirrored> batch =
        ops.batch_reduce(ReduceOp::kSum, {{v, v}, {w, w}}, CommunicationOptions(0, 10.0));
    batch0[static_cast<size_t>(c)] = floats(batch[0].value(0));
    batch1[static_cast<size_t>(c)] = floats(batch[1].value(1));
    EXPECT_EQ(ops.last_plan().path, "collective");
    gathered[static_cast<size_t>(c)] = floats(ops.gather(v, v, 0).value(0));
  });
  // Plain arithmetic over the 4 devices: 1 + 2 + 3 + 4 = 10.
  for (int c = 0; c < kClients; ++c) {
    const auto i = static_cast<size_t>(c);
    EXPECT_EQ(sums[i], (std::vector<float>{10, 100}));
    EXPECT_EQ(means[i], (std::vector<float>{2.5, 25}));
    EXPECT_EQ(maxes[i], (std::vector<float>{4, 40}));
    EXPECT_EQ(batch0[i], (std::vector<float>{10, 100}));
    EXPECT_EQ(batch1[i], (std::vector<float>{20, 200}));
    // Rank order: client (task), then device.
    EXPECT_EQ(gathered[i], (std::vector<float>{1, 10, 2, 20, 3, 30, 4, 40}));
  }
}

TEST(CollectiveAllReduceClients, AGroupSizeOtherThanClientsTimesDevicesIsRefused) {
  testing::SimulatedClients clients(kClients, kLocal);
  const std::vector<std::string> devs = devices_of(clients.client(0));
  CollectiveAllReduce ops(devs, 3 * kLocal, CommunicationOptions(0, 10.0),
                          clients.client(0).runtime());
  const PerReplica v(devs, {vec({1}), vec({2})});
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, v, v), ErrorCode::kInvalidArgument,
                      "group_size 6 over 2 devices per worker makes 3 workers, but this program "
                      "runs as 2 clients");
}

TEST(CollectiveAllReduceClients, AMissingClientIsADeadlineNamingIt) {
  // Client 1 never calls: client 0's collective names its devices at the deadline.
  testing::SimulatedClients clients(kClients, kLocal);
  const std::vector<std::string> devs = devices_of(clients.client(0));
  CollectiveAllReduce ops(devs, kClients * kLocal, CommunicationOptions(0, 0.3),
                          clients.client(0).runtime());
  const PerReplica v(devs, {vec({1}), vec({2})});
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, v, v), ErrorCode::kDeadlineExceeded, "task:1");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST(CollectiveAllReduceClients, MpirunVariablesWithoutMpiSayWhatToDo) {
  // What mpirun -np 2 exports, in a process that has not initialised MPI: a runtime named as
  // this client (job "worker", task 0) is a worker of a 2-client program and cannot reach the
  // other; a runtime of this process alone (job "localhost") keeps the in-process rendezvous.
  const testing::ScopedEnv mpirun({{"OMPI_COMM_WORLD_SIZE", "2"},
                                   {"OMPI_COMM_WORLD_RANK", "0"},
                                   {"TESSEL_NUM_CLIENTS", std::nullopt},
                                   {"DTENSOR_NUM_CLIENTS", std::nullopt},
                                   {"DTENSOR_JOBS", std::nullopt},
                                   {"TESSEL_CLIENT_ID", std::nullopt},
                                   {"DTENSOR_CLIENT_ID", std::nullopt},
                                   {"TESSEL_JOB_NAME", std::nullopt},
                                   {"DTENSOR_JOB_NAME", std::nullopt}});
  Runtime client({.num_cpu_devices = kLocal, .job = "worker", .task = 0});
  const std::vector<std::string> devs = {client.device(0).name(), client.device(1).name()};
  CollectiveAllReduce ops(devs, 2 * kLocal, CommunicationOptions(0, 2.0), client);
  const PerReplica v(devs, {vec({1}), vec({2})});
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, v, v), ErrorCode::kFailedPrecondition,
                      "spans several clients, but this process is in no multi-client cluster");

  Runtime alone({.num_cpu_devices = kLocal});
  const std::vector<std::string> own = {alone.device(0).name(), alone.device(1).name()};
  CollectiveAllReduce local(own, 2 * kLocal, CommunicationOptions(0, 0.2), alone);
  const PerReplica w(own, {vec({1}), vec({2})});
  EXPECT_TESSEL_ERROR(local.reduce(ReduceOp::kSum, w, w), ErrorCode::kDeadlineExceeded,
                      "only 2 of 4 devices joined before the deadline");
}

}  // namespace
}  // namespace tessel
