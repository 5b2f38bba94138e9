// replicate() when the program runs as several clients: simulated clients of one process
// (make_in_process_cluster, one Runtime of 2 devices per client), the code path of processes
// under mpirun (tests/mpi/mpi_replicate_test.cpp). 4 replicas over 2 clients give the same
// outputs as 4 replicas in one process; each client returns its own replicas' outputs; bad
// placements and what is not supported across clients get clear errors.
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "tessel/replicate/compile.h"
#include "tessel/replicate/replicate.h"
#include "testing/expect_error.h"
#include "testing/replicate_clients_case.h"
#include "testing/simulated_clients.h"

namespace tessel {
namespace {

constexpr int kClients = 2;
constexpr int kLocal = 2;
constexpr int kReplicas = kClients * kLocal;

// program(client) on every client at once; rethrows what the first one threw.
void run_clients(testing::SimulatedClients& clients,
                 const std::function<void(testing::SimulatedClient&)>& program) {
  for (const std::exception_ptr& e : clients.run(program)) {
    if (e) std::rethrow_exception(e);
  }
}

TEST(ReplicateClients, DefaultPlacementSpreadsTheReplicasOverTheClients) {
  testing::SimulatedClients clients(kClients, kLocal);
  ReplicateMetadata md;
  md.num_replicas = kReplicas;
  const auto names = replica_device_names(md, clients.client(1).runtime());
  ASSERT_EQ(names.size(), static_cast<size_t>(kReplicas));
  int on_task1 = 0;
  for (const auto& cores : names) {
    on_task1 += cores[0].find("/task:1/") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(on_task1, kLocal) << fmt::format("{}", fmt::join(names, ", "));
}

TEST(ReplicateClients, FourReplicasOverTwoClientsEqualOneProcess) {
  Runtime one({.num_cpu_devices = kReplicas});
  const auto reference = testing::run_replicate_case(one, kReplicas);
  testing::SimulatedClients clients(kClients, kLocal);
  std::vector<std::vector<std::vector<DTensor>>> outs(kClients);
  run_clients(clients, [&](testing::SimulatedClient& c) {
    outs[static_cast<size_t>(c.id())] = testing::run_replicate_case(c.runtime(), kReplicas);
  });
  ReplicateMetadata md;
  md.num_replicas = kReplicas;
  int ran = 0;
  for (int c = 0; c < kClients; ++c) {
    const auto names = replica_device_names(md, clients.client(c).runtime());
    ASSERT_EQ(outs[static_cast<size_t>(c)].size(), static_cast<size_t>(kReplicas));
    for (int r = 0; r < kReplicas; ++r) {
      const auto& got = outs[static_cast<size_t>(c)][static_cast<size_t>(r)];
      const bool mine = names[static_cast<size_t>(r)][0].find(fmt::format("/task:{}/", c)) !=
                        std::string::npos;
      if (!mine) {
        EXPECT_TRUE(got.empty()) << "client " << c << " replica " << r;
        continue;
      }
      ++ran;
      testing::expect_replica_outputs(got, reference[static_cast<size_t>(r)], kReplicas, r);
    }
  }
  EXPECT_EQ(ran, kReplicas);  // every replica ran once, in one client
}

TEST(ReplicateClients, PerReplicaVariablesAreWrittenBackByTheirOwnClient) {
  // One per-replica variable shared by both clients' calls (one process: the same tensors): each
  // replica assigns its value plus the cross-replica sum; each client writes back only its own
  // replicas' values, so that after both calls every replica's value is updated once.
  testing::SimulatedClients clients(kClients, kLocal);
  std::vector<Tensor> values;
  for (int r = 0; r < kReplicas; ++r) values.push_back(Tensor::from_vector<float>({1.0f * r}, Shape{1}));
  const ReplicatedVariable v = ReplicatedVariable::per_replica("v", values);
  run_clients(clients, [&](testing::SimulatedClient& c) {
    ReplicateOptions options;
    options.metadata.num_replicas = kReplicas;
    options.runtime = &c.runtime();
    options.timeout = std::chrono::seconds(30);
    replicate(
        [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
          ctx.assign_variable(0, add(in[0], ctx.all_reduce(in[0])));
          return std::vector<DTensor>{};
        },
        {}, {}, {v}, {}, options);
  });
  for (int r = 0; r < kReplicas; ++r) {  // r + (0 + 1 + 2 + 3)
    EXPECT_EQ(values[static_cast<size_t>(r)].to_vector<float>(), std::vector<float>{r + 6.0f})
        << "replica " << r;
  }
}

TEST(ReplicateClients, AClientThatNeverCallsIsADeadlineNamingItsReplica) {
  // Client 1 never calls replicate(): client 0's replicas wait in their all-reduce until the
  // call's deadline, which names a replica of client 1.
  testing::SimulatedClients clients(kClients, kLocal);
  ReplicateOptions options;
  options.metadata.num_replicas = kReplicas;
  options.runtime = &clients.client(0).runtime();
  options.timeout = std::chrono::milliseconds(500);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TESSEL_ERROR(replicate(
                          [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
                            return std::vector<DTensor>{ctx.all_reduce(in[0])};
                          },
                          testing::replica_inputs(kReplicas), {}, {}, {}, options),
                      ErrorCode::kDeadlineExceeded, "(replica 2 (/job:worker/replica:0/task:1/");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST(ReplicateClients, AnAssignmentNamingAMissingTaskIsRefused) {
  // A topology of 3 hosts x 2 devices, replica 3 on task 2: the job has 2 clients.
  testing::SimulatedClients clients(kClients, kLocal);
  ReplicateMetadata md;
  md.num_replicas = 4;
  md.topology = Topology::for_hosts(3, kLocal).serialized();
  // [replica][core][x, y, z, core] on mesh [devices, tasks, 1, 1]: replica r at (r % 2, r / 2),
  // and replica 3 at task 2.
  md.device_assignment = {0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 2, 0, 0};
  EXPECT_TESSEL_ERROR(replica_device_names(md, clients.client(0).runtime()),
                      ErrorCode::kInvalidArgument,
                      "replica 3 logical core 0 is assigned to "
                      "/job:worker/replica:0/task:2/device:CPU:1, which is not a device of this "
                      "job (2 clients, tasks 0..1, each with CPU devices 0..1)");
  // A device beyond the ones each client has.
  ReplicateMetadata wide;
  wide.num_replicas = 2;
  wide.topology = Topology::for_hosts(2, 3).serialized();
  wide.device_assignment = {2, 0, 0, 0, 2, 1, 0, 0};
  EXPECT_TESSEL_ERROR(replica_device_names(wide, clients.client(1).runtime()),
                      ErrorCode::kInvalidArgument,
                      "replica 0 logical core 0 is assigned to "
                      "/job:worker/replica:0/task:0/device:CPU:2, which is not a device of this job");
}

TEST(ReplicateClients, MoreReplicasThanTheJobsDevicesAreRefused) {
  testing::SimulatedClients clients(kClients, kLocal);
  ReplicateMetadata md;
  md.num_replicas = kReplicas + 1;
  EXPECT_TESSEL_ERROR(replica_device_names(md, clients.client(0).runtime()),
                      ErrorCode::kInvalidArgument,
                      "5 replicas x 1 cores per replica need 5 devices; the runtime has 2 on each "
                      "of 2 clients (4 in all)");
}

TEST(ReplicateClients, AMirroredVariableAcrossClientsIsUnimplemented) {
  testing::SimulatedClients clients(kClients, kLocal);
  ReplicateOptions options;
  options.metadata.num_replicas = kReplicas;
  options.runtime = &clients.client(0).runtime();
  const ReplicatedVariable w = ReplicatedVariable::mirrored(
      "w", Tensor::from_vector<float>({1}, Shape{1}), {}, VariableAggregation::kMean);
  EXPECT_TESSEL_ERROR(
      replicate([](ReplicaContext&, const std::vector<DTensor>&) { return std::vector<DTensor>{}; },
                {}, {}, {w}, {}, options),
      ErrorCode::kUnimplemented, "variable 'w' is mirrored, and the replicas run in 2 clients");
}

TEST(ReplicateClients, CompileAcrossClientsIsUnimplemented) {
  testing::SimulatedClients clients(kClients, kLocal);
  CompileOptions options;
  options.replicate.metadata.num_replicas = kReplicas;
  options.replicate.runtime = &clients.client(0).runtime();
  const Function identity("identity", [](ReplicaContext&, const std::vector<DTensor>& in) {
    return std::vector<DTensor>{in[0]};
  });
  const CompilationResult result = compile(identity, {{Shape{2}}}, options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.code(), ErrorCode::kUnimplemented);
  EXPECT_NE(result.status_string().find("compile() runs every replica in this process"),
            std::string::npos)
      << result.status_string();
}

}  // namespace
}  // namespace tessel
