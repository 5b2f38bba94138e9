// replicate() across processes: every process of `mpirun -np N` is a client with 2 CPU devices
// (client_runtime) and makes the same replicate() call with 2 N replicas (4 over -np 2); each
// runs its own replicas, whose cross-replica collectives cross the process boundary. Every
// process checks its replicas' outputs against plain arithmetic and against the same call run in
// this process alone over a runtime of 2 N devices (tests/testing/replicate_clients_case.h).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "mpi_client.h"
#include "tessel/replicate/replicate.h"
#include "testing/expect_error.h"
#include "testing/replicate_clients_case.h"

namespace tessel {
namespace {

using testing::client_runtime;
using testing::kClientDevices;

TEST(MpiReplicate, ReplicasOverTheProcessesEqualOneProcess) {
  const int replicas = kClientDevices * mpi_size();
  Runtime one({.num_cpu_devices = replicas});
  const auto reference = testing::run_replicate_case(one, replicas);
  const auto outs = testing::run_replicate_case(client_runtime(), replicas);
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
    testing::expect_replica_outputs(outs[static_cast<size_t>(r)],
                                    reference[static_cast<size_t>(r)], replicas, r);
  }
  EXPECT_EQ(mine, kClientDevices);  // the default placement: 2 replicas per process
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

}  // namespace
}  // namespace tessel
