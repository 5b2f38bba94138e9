// Multi-client DTensors across real processes: every process of `mpirun -np N` is a client with
// 2 CPU devices, and runs the programs of tests/testing/multi_client_cases.h (the same ones the
// simulated clients of tests/dtensor/multi_client_test.cpp run): each relayout kind and an ops
// program over meshes that span the processes, checked block by block on every process.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tessel/comm/mpi.h"
#include "tessel/comm/multi_client.h"
#include "tessel/runtime/clients.h"
#include "mpi_client.h"
#include "testing/expect_error.h"
#include "testing/multi_client_cases.h"
#include "testing/run_ranks.h"

namespace tessel {
namespace {

constexpr int kLocalDevices = testing::kClientDevices;
using testing::client_mesh;
using testing::client_runtime;

class MpiDTensorRelayout : public ::testing::TestWithParam<testing::RelayoutCase> {};

TEST_P(MpiDTensorRelayout, GivesEachProcessItsBlocks) {
  const testing::RelayoutCase& rc = GetParam();
  const int clients = mpi_size();
  testing::run_relayout_case(rc,
                             client_mesh(rc.two_dimensional ? testing::client_by_device_mesh(clients)
                                                            : testing::flat_mesh(clients)),
                             client_runtime());
}

INSTANTIATE_TEST_SUITE_P(Cases, MpiDTensorRelayout, ::testing::ValuesIn(testing::relayout_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(MpiDTensor, OpsMatchOneDevice) {
  testing::run_ops_case(client_mesh(testing::client_by_device_mesh(mpi_size())), client_runtime());
}

TEST(MpiDTensor, TrainingStepsMatchOneDevice) {
  testing::run_training_case(client_mesh(testing::client_by_device_mesh(mpi_size())), client_runtime());
}

TEST(MpiDTensor, RuntimeGlobalIsNamedAfterThisProcess) {
  // Under mpirun the environment names this client: job "worker", task = rank.
  EXPECT_EQ(num_clients(), mpi_size());
  EXPECT_EQ(client_id(), mpi_rank());
  EXPECT_EQ(Runtime::global().options().task, mpi_rank());
  EXPECT_EQ(Runtime::global().options().job, mpi_size() > 1 ? "worker" : "localhost");
}

TEST(MpiDTensor, RuntimeOfAnotherTaskIsRefused) {
  if (mpi_size() < 2) GTEST_SKIP() << "needs two processes";
  // A runtime named as another task cannot take part in this process's cluster.
  Runtime wrong({.num_cpu_devices = kLocalDevices, .job = "worker", .task = (mpi_rank() + 1) % mpi_size()});
  const Mesh mesh = create_distributed_mesh({{"x", 2 * mpi_size()}}, {"CPU:0", "CPU:1"},
                                            ClientConfig{mpi_size(), (mpi_rank() + 1) % mpi_size(), "worker"});
  const Tensor host = Tensor::random_uniform(Shape({8}), DType::kF32, 5, -1.0, 1.0);
  const DTensor d = copy_to_mesh(host, Layout::batch_sharded(mesh, "x", 1), wrong);
  EXPECT_TESSEL_ERROR(relayout(d, Layout::replicated(mesh, 1)), ErrorCode::kInvalidArgument,
                      "RuntimeOptions::task");
}

}  // namespace
}  // namespace tessel

namespace tessel {
namespace {

// Rank r's communicators of `mine` (nullptr for other processes' members) on one thread each.
std::string on_members(std::vector<std::unique_ptr<Communicator>>& mine,
                       const std::function<void(Communicator&)>& body) {
  std::vector<Communicator*> local;
  for (auto& c : mine) {
    if (c) local.push_back(c.get());
  }
  return testing::first_error(testing::run_ranks(static_cast<int>(local.size()),
                                                 [&](int i) { body(*local[static_cast<size_t>(i)]); }));
}

TEST(MpiCluster, UnevenMembersPerProcessReduceAcrossProcesses) {
  if (mpi_size() < 2) GTEST_SKIP() << "needs two processes";
  auto cluster = make_mpi_cluster();
  // Process 0 owns three members, every other process one.
  std::vector<std::string> members;
  std::vector<int> owners;
  for (int p = 0; p < mpi_size(); ++p) {
    for (int d = 0; d < (p == 0 ? 3 : 1); ++d) {
      members.push_back(fmt::format("/job:worker/replica:0/task:{}/device:CPU:{}", p, d));
      owners.push_back(p);
    }
  }
  auto mine = cluster->join(members, owners, std::chrono::seconds(20));
  const int n = static_cast<int>(members.size());
  for (Algorithm algorithm : {Algorithm::kAuto, Algorithm::kRing}) {
    EXPECT_EQ(on_members(mine, [&](Communicator& c) {
                EXPECT_EQ(c.size(), n);
                Tensor x = Tensor::full({1000}, DType::kF64, c.rank() + 1.0);
                Tensor y = Tensor::zeros({1000}, DType::kF64);
                CollectiveOptions options;
                options.algorithm = algorithm;
                options.timeout = std::chrono::seconds(20);
                c.all_reduce(x, y, ReduceOp::kSum, options);
                EXPECT_EQ(y.to_doubles(), std::vector<double>(1000, n * (n + 1) / 2.0));
                c.barrier(options);
              }),
              "")
        << algorithm_name(algorithm);
  }
}

TEST(MpiCluster, ProcessesJoiningDifferentGroupsFailWithFailedPrecondition) {
  if (mpi_size() < 2) GTEST_SKIP() << "needs two processes";
  auto cluster = make_mpi_cluster();
  std::vector<std::string> members, agreed;
  std::vector<int> owners;
  for (int p = 0; p < mpi_size(); ++p) {
    // Rank 0 spells its device differently from the others: not the same group.
    members.push_back(fmt::format("/job:worker/replica:0/task:{}/device:CPU:{}", p,
                                  mpi_rank() == 0 && p == 0 ? 7 : 0));
    agreed.push_back(fmt::format("/job:worker/replica:0/task:{}/device:CPU:0", p));
    owners.push_back(p);
  }
  EXPECT_TESSEL_ERROR(cluster->join(members, owners, std::chrono::seconds(20)),
                      ErrorCode::kFailedPrecondition, "another group");
  // The failed meeting left nothing behind: the same cluster then joins the agreed group.
  auto comms = cluster->join(agreed, owners, std::chrono::seconds(20));
  ASSERT_EQ(comms.size(), agreed.size());
  Tensor x = Tensor::full({4}, DType::kF32, 1);
  comms[static_cast<size_t>(mpi_rank())]->all_reduce(x, x, ReduceOp::kSum, CollectiveOptions{});
  EXPECT_EQ(x.to_doubles(), std::vector<double>(4, mpi_size()));
}

TEST(MpiCluster, ProcessThatNeverJoinsIsNamed) {
  if (mpi_size() < 2) GTEST_SKIP() << "needs two processes";
  auto cluster = make_mpi_cluster();
  const std::vector<std::string> members = {"/job:worker/replica:0/task:0/device:CPU:0",
                                             "/job:worker/replica:0/task:1/device:CPU:0"};
  if (mpi_rank() == 0) {
    EXPECT_TESSEL_ERROR(cluster->join(members, {0, 1}, std::chrono::milliseconds(300)),
                        ErrorCode::kDeadlineExceeded, "rank 1");
  }
}

}  // namespace
}  // namespace tessel
