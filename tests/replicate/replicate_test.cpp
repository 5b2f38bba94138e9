// replicate() (seed 105's _TPUReplicate): one computation per replica, concurrently; inputs in
// TF's order; placement from the device assignment (BR-105-03); the checks made before running.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "replicate/replicate_testing.h"
#include "tessel/dtensor/ops.h"
#include "tessel/mesh/topology.h"
#include "tessel/replicate/replicate.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using testing::device_suffix;
using testing::ends_with;
using testing::host_values;
using testing::replicate_options;
using testing::replicate_runtime;
using testing::vec;

std::vector<DTensor> identity(ReplicaContext&, const std::vector<DTensor>& in) { return in; }

TEST(Replicate, RunsEveryReplicaConcurrentlyOnItsOwnThread) {
  std::atomic<int> arrived{0};
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::vector<int> seen(4, -1);
  const auto outs = replicate(
      [&](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        {
          std::lock_guard<std::mutex> lock(mu);
          threads.insert(std::this_thread::get_id());
          seen[static_cast<size_t>(ctx.replica_id())] = ctx.num_replicas();
        }
        // Every replica waits here for all four: only concurrent replicas get past it in time.
        arrived.fetch_add(1);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (arrived.load() < 4 && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        EXPECT_EQ(arrived.load(), 4);
        return std::vector<DTensor>{multiply(in[0], 2.0)};
      },
      {{vec({1}), vec({2}), vec({3}), vec({4})}}, {}, {}, {}, replicate_options(4));
  ASSERT_EQ(outs.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(outs[r].size(), 1u);
    EXPECT_EQ(host_values(outs[r][0]), std::vector<float>{2.0f * (r + 1)});
  }
  EXPECT_EQ(threads.size(), 4u);
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
  EXPECT_EQ(seen, (std::vector<int>{4, 4, 4, 4}));
}

TEST(Replicate, InputsArriveInTpuReplicateOrderReplicatedOnTheReplicaMesh) {
  // per-replica inputs, broadcast inputs, variables, guaranteed constants (TF's _TPUReplicate).
  const std::vector<std::vector<Tensor>> per_replica = {{vec({1}), vec({2})},
                                                        {vec({10, 11}), vec({20, 21})}};
  const std::vector<ReplicatedVariable> variables = {
      ReplicatedVariable::per_replica("v", {vec({5, 5, 5}), vec({6, 6, 6})}),
      ReplicatedVariable::mirrored("m", vec({7}))};
  const auto outs = replicate(
      [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        EXPECT_EQ(in.size(), 6u);
        for (const DTensor& d : in) {
          EXPECT_EQ(d.layout(), Layout::replicated(ctx.mesh(), d.rank()));
          EXPECT_EQ(get_default_mesh(), ctx.mesh());
        }
        return in;
      },
      per_replica, {vec({100})}, variables, {vec({-1, -2})}, replicate_options(2));
  ASSERT_EQ(outs.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(outs[r].size(), 6u);
    EXPECT_EQ(host_values(outs[r][0]), std::vector<float>{1.0f + r});
    EXPECT_EQ(host_values(outs[r][1]), (std::vector<float>{10.0f + 10 * r, 11.0f + 10 * r}));
    EXPECT_EQ(host_values(outs[r][2]), std::vector<float>{100});
    EXPECT_EQ(host_values(outs[r][3]), std::vector<float>(3, 5.0f + r));
    EXPECT_EQ(host_values(outs[r][4]), std::vector<float>{7});
    EXPECT_EQ(host_values(outs[r][5]), (std::vector<float>{-1, -2}));
  }
}

TEST(Replicate, PackedInputIsOneValueForEveryReplica) {
  ReplicateOptions options = replicate_options(3);
  options.packed_inputs = {1};
  const auto outs =
      replicate(identity, {{vec({0}), vec({1}), vec({2})}, {vec({4, 2})}}, {}, {}, {}, options);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(host_values(outs[r][0]), std::vector<float>{static_cast<float>(r)});
    EXPECT_EQ(host_values(outs[r][1]), (std::vector<float>{4, 2}));
  }
  options.packed_inputs = {2};
  EXPECT_TESSEL_ERROR(replicate(identity, {{vec({0}), vec({1}), vec({2})}}, {}, {}, {}, options),
                      ErrorCode::kInvalidArgument,
                      "replicate: packed input 2 is not one of the 1 per-replica inputs");
}

TEST(Replicate, NoInputsAndNoOutputs) {
  std::atomic<int> runs{0};
  const auto outs = replicate(
      [&](ReplicaContext&, const std::vector<DTensor>& in) {
        EXPECT_TRUE(in.empty());
        runs.fetch_add(1);
        return std::vector<DTensor>{};
      },
      {}, {}, {}, {}, replicate_options(2));
  EXPECT_EQ(runs.load(), 2);
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_TRUE(outs[0].empty() && outs[1].empty());
}

TEST(ReplicatePlacement, DefaultAssignmentPutsReplicaROnDeviceR) {
  const auto outs = replicate(
      [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        EXPECT_EQ(ctx.mesh().dim_names(), std::vector<std::string>{"core"});
        EXPECT_EQ(ctx.mesh().size(), 1);
        EXPECT_EQ(ctx.mesh().name(), "replica_" + std::to_string(ctx.replica_id()));
        EXPECT_TRUE(ends_with(ctx.mesh().local_devices()[0], device_suffix(ctx.replica_id())));
        EXPECT_EQ(&ctx.runtime(), &replicate_runtime());
        return in;
      },
      {{vec({0}), vec({1}), vec({2}), vec({3})}}, {}, {}, {}, replicate_options(4));
  for (int r = 0; r < 4; ++r) EXPECT_EQ(outs[r][0].device(0).index(), r);
}

TEST(ReplicatePlacement, DefaultAssignmentGivesEachReplicaABlockOfCores) {
  ReplicateOptions options = replicate_options(2, 2);
  const auto names = replica_device_names(options.metadata, replicate_runtime());
  ASSERT_EQ(names.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(names[r].size(), 2u);
    for (int c = 0; c < 2; ++c) EXPECT_TRUE(ends_with(names[r][c], device_suffix(2 * r + c)));
  }
}

TEST(ReplicatePlacement, BR_105_03_TheDeviceAssignmentPlacesTheReplicas) {
  ReplicateOptions options = replicate_options(2);
  options.metadata.topology = Topology::for_hosts(1, 4).serialized();
  options.metadata.device_assignment = {3, 0, 0, 0, 1, 0, 0, 0};  // replica 0: CPU:3, 1: CPU:1
  std::vector<std::string> meshes(2);
  const auto outs = replicate(
      [&](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        meshes[static_cast<size_t>(ctx.replica_id())] = ctx.mesh().local_devices()[0];
        return std::vector<DTensor>{add(in[0], 1.0)};
      },
      {{vec({1}), vec({2})}}, {}, {}, {}, options);
  EXPECT_TRUE(ends_with(meshes[0], device_suffix(3)));
  EXPECT_TRUE(ends_with(meshes[1], device_suffix(1)));
  EXPECT_EQ(outs[0][0].device(0).index(), 3);
  EXPECT_EQ(outs[1][0].device(0).index(), 1);
  EXPECT_EQ(host_values(outs[1][0]), std::vector<float>{3});
  EXPECT_EQ(replica_device_names(options.metadata, replicate_runtime())[0][0],
            replicate_runtime().device(3).name());
}

TEST(ReplicatePlacement, BR_105_03_AssignmentsOutsideTheRuntimeAreRejected) {
  ReplicateOptions options = replicate_options(1);
  options.metadata.topology = Topology::for_hosts(1, 8).serialized();
  options.metadata.device_assignment = {6, 0, 0, 0};
  EXPECT_TESSEL_ERROR(replicate(identity, {}, {}, {}, {}, options), ErrorCode::kInvalidArgument,
                      "replicate: replica 0 logical core 0 is assigned to "
                      "/job:localhost/replica:0/task:0/device:CPU:6, which is not a device of this "
                      "runtime (its CPU devices 0..3 of task 0)");
  options.metadata.topology = Topology::for_hosts(2, 2).serialized();
  options.metadata.device_assignment = {0, 1, 0, 0};  // task 1's device 0
  EXPECT_TESSEL_ERROR(replicate(identity, {}, {}, {}, {}, options), ErrorCode::kInvalidArgument,
                      "is assigned to /job:localhost/replica:0/task:1/device:CPU:0, which is not a "
                      "device of this runtime");
  options.metadata.num_replicas = 2;
  options.metadata.device_assignment = {1, 0, 0, 0, 1, 0, 0, 0};  // the same device twice
  EXPECT_TESSEL_ERROR(replicate(identity, {}, {}, {}, {}, options), ErrorCode::kInvalidArgument,
                      "is assigned twice: replica 0 logical core 0 and replica 1 logical core 0");
}

TEST(ReplicatePlacement, MoreReplicasTimesCoresThanDevicesNamesTheCounts) {
  EXPECT_TESSEL_ERROR(replicate(identity, {}, {}, {}, {}, replicate_options(3, 2)),
                      ErrorCode::kInvalidArgument,
                      "replicate: 3 replicas x 2 cores per replica need 6 devices; the runtime "
                      "has 4");
  EXPECT_TESSEL_ERROR(replicate(identity, {}, {}, {}, {}, replicate_options(5)),
                      ErrorCode::kInvalidArgument,
                      "5 replicas x 1 cores per replica need 5 devices; the runtime has 4");
}

TEST(ReplicateErrors, ZeroReplicasIsInvalid) {
  EXPECT_TESSEL_ERROR(replicate(identity, {}, {}, {}, {}, replicate_options(0)),
                      ErrorCode::kInvalidArgument, "num_replicas must be >= 1");
}

TEST(ReplicateErrors, InputListsNeedNumReplicasValuesNamingTheInput) {
  EXPECT_TESSEL_ERROR(
      replicate(identity, {{vec({1}), vec({2})}, {vec({1})}}, {}, {}, {}, replicate_options(2)),
      ErrorCode::kInvalidArgument,
      "replicate: per-replica input 1 has 1 values; 2 expected (num_replicas = 2)");
  EXPECT_TESSEL_ERROR(replicate(identity, {{vec({1}), Tensor()}}, {}, {}, {}, replicate_options(2)),
                      ErrorCode::kInvalidArgument,
                      "per-replica input 0 of replica 1 is a null tensor");
  EXPECT_TESSEL_ERROR(replicate(identity, {}, {vec({1}), Tensor()}, {}, {}, replicate_options(2)),
                      ErrorCode::kInvalidArgument, "replicate: broadcast input 1 is a null tensor");
  EXPECT_TESSEL_ERROR(replicate(identity, {}, {}, {}, {Tensor()}, replicate_options(2)),
                      ErrorCode::kInvalidArgument,
                      "replicate: guaranteed constant 0 is a null tensor");
}

TEST(ReplicateErrors, BR_105_01_ReplicaShapesAndDtypesOfAnInputMustMerge) {
  EXPECT_TESSEL_ERROR(
      replicate(identity, {{vec({1}), vec({2})}, {vec({1, 2}), vec({1, 2, 3})}}, {}, {}, {},
                replicate_options(2)),
      ErrorCode::kInvalidArgument,
      "ReplicatedInput: per-replica input 1: replica 0 has shape [2] and replica 1 has shape [3]");
  EXPECT_TESSEL_ERROR(replicate(identity, {{vec({1}), Tensor::zeros({1}, DType::kF64)}}, {}, {}, {},
                                replicate_options(2)),
                      ErrorCode::kInvalidArgument,
                      "per-replica input 0: replica 0 has dtype f32 and replica 1 has dtype f64");
}

TEST(ReplicateErrors, BR_105_02_VariablesAreCheckedBeforeRunning) {
  std::atomic<int> runs{0};
  const auto count = [&](ReplicaContext&, const std::vector<DTensor>& in) {
    runs.fetch_add(1);
    return in;
  };
  EXPECT_TESSEL_ERROR(
      replicate(count, {}, {}, {ReplicatedVariable::per_replica("w", {vec({1}), vec({1, 2})})}, {},
                replicate_options(2)),
      ErrorCode::kInvalidArgument,
      "variable 'w': replica 0 has handle shape [1] and replica 1 has handle shape [2]");
  EXPECT_EQ(runs.load(), 0);
}

TEST(ReplicateErrors, BadArgumentsOfReplicateItself) {
  EXPECT_TESSEL_ERROR(replicate(ReplicaComputation(), {}, {}, {}, {}, replicate_options(1)),
                      ErrorCode::kInvalidArgument, "replicate: the computation is empty");
  EXPECT_TESSEL_ERROR(
      replicate(identity, {}, {}, {}, {}, replicate_options(1, 1, std::chrono::milliseconds(-1))),
      ErrorCode::kInvalidArgument, "replicate: timeout must be >= 0 ms; got -1");
}

TEST(ReplicateErrors, OutputsMustAgreeAcrossReplicas) {
  EXPECT_TESSEL_ERROR(replicate(
                          [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
                            return std::vector<DTensor>(static_cast<size_t>(ctx.replica_id()) + 1,
                                                        in[0]);
                          },
                          {{vec({1}), vec({2})}}, {}, {}, {}, replicate_options(2)),
                      ErrorCode::kInvalidArgument,
                      "replicate: replica 1 returned 2 outputs and replica 0 returned 1");
  EXPECT_TESSEL_ERROR(replicate(
                          [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
                            if (ctx.replica_id() == 1) return std::vector<DTensor>{DTensor()};
                            return in;
                          },
                          {{vec({1}), vec({2})}}, {}, {}, {}, replicate_options(2)),
                      ErrorCode::kInvalidArgument,
                      "replicate: replica 1: replicate: the computation returned a null DTensor as "
                      "output 0");
}

}  // namespace
}  // namespace tessel
