// replicate() when the program runs as several clients: simulated clients of one process
// (make_in_process_cluster, one Runtime of 2 devices per client), the code path of processes
// under mpirun (tests/mpi/mpi_replicate_test.cpp). 4 replicas over 2 clients give the same
// outputs as 4 replicas in one process, through replicate() and compile(); mirrored variables
// end with the one-process values on every client; each client returns its own replicas'
// outputs; bad placements get clear errors.
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

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

// Checks every client's outputs: each of its own replicas against arithmetic and the
// one-process `reference`, an empty list for the others'; every replica ran once.
void expect_clients_outputs(testing::SimulatedClients& clients,
                            const std::vector<std::vector<std::vector<DTensor>>>& outs,
                            const std::vector<std::vector<DTensor>>& reference, bool compiled) {
  ReplicateMetadata md;
  md.num_replicas = kReplicas;
  int ran = 0;
  for (int c = 0; c < kClients; ++c) {
    const auto names = replica_device_names(md, clients.client(c).runtime());
    ASSERT_EQ(outs[static_cast<size_t>(c)].size(), static_cast<size_t>(kReplicas));
    for (int r = 0; r < kReplicas; ++r) {
      const auto& got = outs[static_cast<size_t>(c)][static_cast<size_t>(r)];
      const bool mine =
          names[static_cast<size_t>(r)][0].find(fmt::format("/task:{}/", c)) != std::string::npos;
      if (!mine) {
        EXPECT_TRUE(got.empty()) << "client " << c << " replica " << r;
        continue;
      }
      ++ran;
      testing::expect_replica_outputs(got, reference[static_cast<size_t>(r)], kReplicas, r,
                                      compiled);
    }
  }
  EXPECT_EQ(ran, kReplicas);
}

TEST(ReplicateClients, CompiledOverTwoClientsEqualsOneProcess) {
  Runtime one({.num_cpu_devices = kReplicas});
  const auto reference = testing::run_compiled_case(one, kReplicas);
  testing::SimulatedClients clients(kClients, kLocal);
  std::vector<std::vector<std::vector<DTensor>>> outs(kClients);
  run_clients(clients, [&](testing::SimulatedClient& c) {
    outs[static_cast<size_t>(c.id())] = testing::run_compiled_case(c.runtime(), kReplicas);
  });
  expect_clients_outputs(clients, outs, reference, /*compiled=*/true);
}

TEST(ReplicateClients, CompileOnAClientThatRunsNoReplica) {
  // 2 replicas on a job of 2 x 2 devices: both on client 0. Client 1 traces on its own devices
  // (the same graph) and its run() returns empty lists.
  testing::SimulatedClients clients(kClients, kLocal);
  std::vector<std::vector<std::vector<DTensor>>> outs(kClients);
  run_clients(clients, [&](testing::SimulatedClient& c) {
    outs[static_cast<size_t>(c.id())] = testing::run_compiled_case(c.runtime(), 2);
  });
  Runtime one({.num_cpu_devices = 2});
  const auto reference = testing::run_compiled_case(one, 2);
  for (int r = 0; r < 2; ++r) {
    testing::expect_replica_outputs(outs[0][static_cast<size_t>(r)],
                                    reference[static_cast<size_t>(r)], 2, r, /*compiled=*/true);
    EXPECT_TRUE(outs[1][static_cast<size_t>(r)].empty()) << "replica " << r;
  }
}

TEST(ReplicateClients, CompileWithAnAssignmentNamingAMissingTaskFails) {
  testing::SimulatedClients clients(kClients, kLocal);
  CompileOptions options;
  options.replicate.metadata.num_replicas = 2;
  options.replicate.metadata.topology = Topology::for_hosts(3, kLocal).serialized();
  options.replicate.metadata.device_assignment = {0, 0, 0, 0, 1, 2, 0, 0};  // replica 1: task 2
  options.replicate.runtime = &clients.client(0).runtime();
  const Function identity("identity", [](ReplicaContext&, const std::vector<DTensor>& in) {
    return std::vector<DTensor>{in[0]};
  });
  const CompilationResult result = compile(identity, {InputSpec(Shape{2})}, options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(result.status_string().find(
                "function 'identity': replicate: replica 1 logical core 0 is assigned to "
                "/job:worker/replica:0/task:2/device:CPU:1, which is not a device of this job "
                "(2 clients, tasks 0..1, each with CPU devices 0..1)"),
            std::string::npos)
      << result.status_string();
}

TEST(ReplicateClients, MirroredVariablesOverTwoClientsEqualOneProcess) {
  // Each client holds its own copy of the variables (as a process would); both end with the
  // values of the one-process call.
  Runtime one({.num_cpu_devices = kReplicas});
  const std::vector<ReplicatedVariable> reference = testing::mirrored_variables();
  testing::run_mirrored_case(one, kReplicas, reference);
  const auto want = testing::expected_mirrored_values(kReplicas);
  testing::SimulatedClients clients(kClients, kLocal);
  std::vector<std::vector<ReplicatedVariable>> variables;
  for (int c = 0; c < kClients; ++c) variables.push_back(testing::mirrored_variables());
  run_clients(clients, [&](testing::SimulatedClient& c) {
    testing::run_mirrored_case(c.runtime(), kReplicas, variables[static_cast<size_t>(c.id())]);
  });
  for (int c = 0; c < kClients; ++c) {
    for (size_t k = 0; k < want.size(); ++k) {
      const ReplicatedVariable& v = variables[static_cast<size_t>(c)][k];
      EXPECT_EQ(v.values[0].to_vector<float>(), want[k]) << "client " << c << " " << v.name;
      EXPECT_EQ(v.values[0].to_vector<float>(), reference[k].values[0].to_vector<float>())
          << "client " << c << " " << v.name;
    }
  }
}

TEST(ReplicateClients, MirroredVariablesOfReplicasWithTwoCoresOverTwoClients) {
  // 2 replicas x 2 cores (SPMD), one replica per client: the exchange runs on each replica's
  // logical core 0 group; both clients end with the one-process values.
  constexpr int kTwoCoreReplicas = 2;
  Runtime one({.num_cpu_devices = kTwoCoreReplicas * 2});
  const std::vector<ReplicatedVariable> reference = testing::mirrored_variables();
  testing::run_mirrored_case(one, kTwoCoreReplicas, reference, -1, /*cores=*/2);
  const auto want = testing::expected_mirrored_values(kTwoCoreReplicas);
  testing::SimulatedClients clients(kClients, kLocal);
  std::vector<std::vector<ReplicatedVariable>> variables;
  for (int c = 0; c < kClients; ++c) variables.push_back(testing::mirrored_variables());
  run_clients(clients, [&](testing::SimulatedClient& c) {
    testing::run_mirrored_case(c.runtime(), kTwoCoreReplicas,
                               variables[static_cast<size_t>(c.id())], -1, /*cores=*/2);
  });
  for (int c = 0; c < kClients; ++c) {
    for (size_t k = 0; k < want.size(); ++k) {
      const ReplicatedVariable& v = variables[static_cast<size_t>(c)][k];
      EXPECT_EQ(v.values[0].to_vector<float>(), want[k]) << "client " << c << " " << v.name;
      EXPECT_EQ(v.values[0].to_vector<float>(), reference[k].values[0].to_vector<float>())
          << "client " << c << " " << v.name;
    }
  }
}

TEST(ReplicateClients, AMirroredVariableAReplicaDidNotAssignIsRefusedOnEveryClient) {
  // Replica 2 (client 1) assigns nothing: both clients raise the one-process error naming it
  // and write nothing back.
  testing::SimulatedClients clients(kClients, kLocal);
  std::vector<std::vector<ReplicatedVariable>> variables;
  for (int c = 0; c < kClients; ++c) variables.push_back(testing::mirrored_variables());
  const std::vector<std::exception_ptr> errors = clients.run([&](testing::SimulatedClient& c) {
    testing::run_mirrored_case(c.runtime(), kReplicas, variables[static_cast<size_t>(c.id())],
                               /*skipping=*/2);
  });
  for (int c = 0; c < kClients; ++c) {
    ASSERT_TRUE(errors[static_cast<size_t>(c)]) << "client " << c;
    EXPECT_TESSEL_ERROR(
        std::rethrow_exception(errors[static_cast<size_t>(c)]), ErrorCode::kInvalidArgument,
        "replicate: variable 'sum' is mirrored: replica 0 assigned it and replica 2 "
        "did not");
    for (const ReplicatedVariable& v : variables[static_cast<size_t>(c)]) {
      EXPECT_EQ(v.values[0].to_vector<float>(), testing::replica_weights().to_vector<float>())
          << "client " << c << " " << v.name;
    }
  }
}

TEST(ReplicateClients, AFailingReplicaStopsTheMirroredWriteBackOfEveryClient) {
  // Replica 0 (client 0) throws; the computation has no collective, so client 1's replicas
  // learn of it only in the write-back's exchange: kAborted, long before the deadline, and
  // neither client writes anything back.
  testing::SimulatedClients clients(kClients, kLocal);
  std::vector<std::vector<ReplicatedVariable>> variables;
  for (int c = 0; c < kClients; ++c) variables.push_back(testing::mirrored_variables());
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::exception_ptr> errors = clients.run([&](testing::SimulatedClient& c) {
    ReplicateOptions options = testing::case_options(c.runtime(), kReplicas);
    options.timeout = std::chrono::seconds(20);
    replicate(
        [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
          if (ctx.replica_id() == 0) {
            throw Error(ErrorCode::kInvalidArgument, "test", "replica 0 gives up");
          }
          ctx.assign_variable(0, in[0]);
          return std::vector<DTensor>{};
        },
        {}, {}, variables[static_cast<size_t>(c.id())], {}, options);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_TRUE(errors[0] && errors[1]);
  EXPECT_TESSEL_ERROR(std::rethrow_exception(errors[0]), ErrorCode::kInvalidArgument,
                      "replica 0: test: replica 0 gives up");
  EXPECT_TESSEL_ERROR(std::rethrow_exception(errors[1]), ErrorCode::kAborted, "replica 0 gives up");
  for (int c = 0; c < kClients; ++c) {
    for (const ReplicatedVariable& v : variables[static_cast<size_t>(c)]) {
      EXPECT_EQ(v.values[0].to_vector<float>(), testing::replica_weights().to_vector<float>())
          << "client " << c << " " << v.name;
    }
  }
}

TEST(ReplicateClients, AMirroredWriteBackWaitingForALateReplicaEndsAtTheDeadline) {
  // Replica 2 (client 1) is still in its computation at the deadline. Client 0 (timeout 400 ms)
  // waits for it in the write-back's exchange and ends at its deadline naming it; client 1
  // (timeout 1.2 s, so that client 0's wait ends first) ends at its own, its replica 3 naming
  // replica 2 at the exchange. Nothing is written back. Leaked on purpose: the late replica's
  // detached thread goes on with client 1's runtime after the test.
  using std::chrono::milliseconds;
  auto* clients = new testing::SimulatedClients(kClients, kLocal);
  std::vector<std::vector<ReplicatedVariable>> variables;
  for (int c = 0; c < kClients; ++c) variables.push_back(testing::mirrored_variables());
  std::vector<std::chrono::steady_clock::duration> took(kClients);
  const std::vector<std::exception_ptr> errors = clients->run([&](testing::SimulatedClient& c) {
    ReplicateOptions options = testing::case_options(c.runtime(), kReplicas);
    options.timeout = milliseconds(c.id() == 0 ? 400 : 1200);
    const auto start = std::chrono::steady_clock::now();
    try {
      replicate(
          [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
            if (ctx.replica_id() == 2) std::this_thread::sleep_for(std::chrono::seconds(4));
            ctx.assign_variable(0, in[0]);
            return std::vector<DTensor>{};
          },
          {}, {}, variables[static_cast<size_t>(c.id())], {}, options);
    } catch (...) {
      took[static_cast<size_t>(c.id())] = std::chrono::steady_clock::now() - start;
      throw;
    }
  });
  const char* const named[] = {"(replica 2 (/job:worker/replica:0/task:1/",
                               "replica 2 did not reach collective #0 (write-back: which "
                               "replicas assigned the mirrored variables 'sum', 'mean', 'first')"};
  const milliseconds bound[] = {milliseconds(1100), milliseconds(2500)};
  for (int c = 0; c < kClients; ++c) {
    const auto i = static_cast<size_t>(c);
    ASSERT_TRUE(errors[i]) << "client " << c;
    EXPECT_TESSEL_ERROR(std::rethrow_exception(errors[i]), ErrorCode::kDeadlineExceeded,
                        named[i]);
    EXPECT_LT(took[i], bound[i]) << "client " << c;
    for (const ReplicatedVariable& v : variables[i]) {
      EXPECT_EQ(v.values[0].to_vector<float>(), testing::replica_weights().to_vector<float>())
          << "client " << c << " " << v.name;
    }
  }
}

}  // namespace
}  // namespace tessel
