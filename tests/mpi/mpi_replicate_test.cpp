// replicate() across processes: every process of `mpirun -np N` is a client with 2 CPU devices
// (client_runtime) and makes the same replicate() call with 2 N replicas (4 over -np 2); each
// runs its own replicas, whose cross-replica collectives cross the process boundary. Every
// process checks its replicas' outputs against plain arithmetic and against the same call run in
// this process alone over a runtime of 2 N devices (tests/testing/replicate_clients_case.h);
// the same for compile()'s computation, and for the mirrored variables the replicas update
// (every process ends with the one-process values).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "mpi_client.h"
#include "tessel/replicate/compile.h"
#include "tessel/replicate/replicate.h"
#include "testing/expect_error.h"
#include "testing/replicate_clients_case.h"

namespace tessel {
namespace {

using testing::client_runtime;
using testing::kClientDevices;

// Checks this process's replicas' outputs `outs` against arithmetic and the one-process run
// `reference`, and that the other processes' replicas returned nothing here.
void expect_this_process_replicas(const std::vector<std::vector<DTensor>>& outs,
                                  const std::vector<std::vector<DTensor>>& reference, int replicas,
                                  bool compiled) {
  ReplicateMetadata md;
  md.num_replicas = replicas;
  const auto names = replica_device_names(md, client_runtime());
  ASSERT_EQ(outs.size(), static_cast<size_t>(replicas));
  int mine = 0;
  for (int r = 0; r < replicas; ++r) {
    const bool here = names[static_cast<size_t>(r)][0].find(
                          fmt::format("/task:{}/", mpi_rank())) != std::string::npos;
    if (!here) {
      EXPECT_TRUE(outs[static_cast<size_t>(r)].empty()) << "replica " << r;
      continue;
    }
    ++mine;
    testing::expect_replica_outputs(outs[static_cast<size_t>(r)], reference[static_cast<size_t>(r)],
                                    replicas, r, compiled);
  }
  EXPECT_EQ(mine, kClientDevices);  // the default placement: 2 replicas per process
}

TEST(MpiReplicate, ReplicasOverTheProcessesEqualOneProcess) {
  const int replicas = kClientDevices * mpi_size();
  Runtime one({.num_cpu_devices = replicas});
  const auto reference = testing::run_replicate_case(one, replicas);
  const auto outs = testing::run_replicate_case(client_runtime(), replicas);
  expect_this_process_replicas(outs, reference, replicas, /*compiled=*/false);
}

TEST(MpiReplicate, CompiledOverTheProcessesEqualsOneProcess) {
  // compile() traces in every process; run() replays this process's replicas, whose
  // collectives meet the other processes' replicas.
  const int replicas = kClientDevices * mpi_size();
  Runtime one({.num_cpu_devices = replicas});
  const auto reference = testing::run_compiled_case(one, replicas);
  const auto outs = testing::run_compiled_case(client_runtime(), replicas);
  expect_this_process_replicas(outs, reference, replicas, /*compiled=*/true);
}

TEST(MpiReplicate, MirroredVariablesUpdatedOverTheProcessesEqualOneProcess) {
  // SUM, MEAN and ONLY_FIRST_REPLICA variables assigned by every replica: every process ends
  // with the values of the one-process call (exactly: combined in the same order).
  const int replicas = kClientDevices * mpi_size();
  Runtime one({.num_cpu_devices = replicas});
  const std::vector<ReplicatedVariable> reference = testing::mirrored_variables();
  testing::run_mirrored_case(one, replicas, reference);
  const std::vector<ReplicatedVariable> variables = testing::mirrored_variables();
  testing::run_mirrored_case(client_runtime(), replicas, variables);
  const auto want = testing::expected_mirrored_values(replicas);
  for (size_t k = 0; k < variables.size(); ++k) {
    EXPECT_EQ(variables[k].values[0].to_vector<float>(), want[k]) << variables[k].name;
    EXPECT_EQ(variables[k].values[0].to_vector<float>(), reference[k].values[0].to_vector<float>())
        << variables[k].name;
  }
}

TEST(MpiReplicate, AMirroredVariableAReplicaDidNotAssignIsRefusedOnEveryProcess) {
  // The last replica (in the last process) assigns nothing: every process raises the
  // one-process error naming it, and no process writes anything back.
  const int replicas = kClientDevices * mpi_size();
  const std::vector<ReplicatedVariable> variables = testing::mirrored_variables();
  EXPECT_TESSEL_ERROR(
      testing::run_mirrored_case(client_runtime(), replicas, variables, replicas - 1),
      ErrorCode::kInvalidArgument,
      fmt::format("variable 'sum' is mirrored: replica 0 assigned it and replica {} did not",
                  replicas - 1));
  for (const ReplicatedVariable& v : variables) {
    EXPECT_EQ(v.values[0].to_vector<float>(), testing::replica_weights().to_vector<float>())
        << v.name;
  }
}

TEST(MpiReplicate, AFailingReplicaAbortsTheOtherProcesses) {
  // Replica 0 throws before its collective; every other replica, in every process, is in or
  // reaches the all-reduce and ends with an error instead of waiting out the deadline.
  const int replicas = kClientDevices * mpi_size();
  ReplicateOptions options;
  options.metadata.num_replicas = replicas;
  options.runtime = &client_runtime();
  options.timeout = std::chrono::seconds(20);
  const auto start = std::chrono::steady_clock::now();
  try {
    replicate(
        [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
          if (ctx.replica_id() == 0) {
            throw Error(ErrorCode::kInvalidArgument, "test", "replica 0 gives up");
          }
          return std::vector<DTensor>{ctx.all_reduce(in[0])};
        },
        testing::replica_inputs(replicas), {}, {}, {}, options);
    ADD_FAILURE() << "replicate() returned";
  } catch (const Error& e) {
    if (mpi_rank() == 0) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("replica 0 gives up"), std::string::npos) << e.what();
    } else {
      EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
    }
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 15.0);
}

TEST(MpiReplicate, AnAssignmentNamingAnotherHostsMissingDeviceIsRefused) {
  // Each process has CPU devices 0 and 1; a topology of 3 devices per host names CPU:2 of the
  // last process, which does not exist. Refused on every process before anything runs.
  ReplicateMetadata md;
  md.num_replicas = 2;
  md.topology = Topology::for_hosts(mpi_size(), 3).serialized();
  const int last = mpi_size() - 1;
  md.device_assignment = {0, 0, 0, 0, 2, last, 0, 0};
  EXPECT_TESSEL_ERROR(replica_device_names(md, client_runtime()), ErrorCode::kInvalidArgument,
                      fmt::format("replica 1 logical core 0 is assigned to "
                                  "/job:worker/replica:0/task:{}/device:CPU:2, which is not a "
                                  "device of this job ({} clients",
                                  last, mpi_size()));
}

TEST(MpiReplicate, CompileWithAnAssignmentNamingAnotherHostsMissingDeviceFails) {
  // As above, through compile(): a failed CompilationResult on every process, nothing run.
  CompileOptions options;
  options.replicate.metadata.num_replicas = 2;
  options.replicate.metadata.topology = Topology::for_hosts(mpi_size(), 3).serialized();
  const int last = mpi_size() - 1;
  options.replicate.metadata.device_assignment = {0, 0, 0, 0, 2, last, 0, 0};
  options.replicate.runtime = &client_runtime();
  const Function identity("identity", [](ReplicaContext&, const std::vector<DTensor>& in) {
    return std::vector<DTensor>{in[0]};
  });
  const CompilationResult result = compile(identity, {InputSpec(Shape{2})}, options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(result.status_string().find(fmt::format(
                "function 'identity': replicate: replica 1 logical core 0 is assigned to "
                "/job:worker/replica:0/task:{}/device:CPU:2, which is not a device of this job",
                last)),
            std::string::npos)
      << result.status_string();
}

}  // namespace
}  // namespace tessel
