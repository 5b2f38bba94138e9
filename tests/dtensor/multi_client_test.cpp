// Multi-client DTensors on simulated clients (tests/testing/simulated_clients.h): every relayout
// kind and a few ops across clients give, on each client's devices, exactly the blocks a single
// client computes. The same program runs under mpirun in tests/mpi/mpi_dtensor_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>

#include "tessel/comm/mesh_groups.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "tessel/mesh/shard_map.h"
#include "testing/expect_error.h"
#include "testing/multi_client_cases.h"
#include "testing/simulated_clients.h"

namespace tessel {
namespace {

using testing::layout_of;
using testing::SimulatedClient;
using testing::SimulatedClients;

void expect_no_errors(const std::vector<std::exception_ptr>& errors) {
  EXPECT_EQ(testing::first_error(errors), "");
}

class MultiClientRelayout : public ::testing::TestWithParam<testing::RelayoutCase> {};

TEST_P(MultiClientRelayout, GivesEachClientItsBlocks) {
  const testing::RelayoutCase& rc = GetParam();
  SimulatedClients clients(2, 2);
  expect_no_errors(clients.run([&](SimulatedClient& c) {
    const Mesh mesh = c.mesh(rc.two_dimensional ? testing::client_by_device_mesh(2)
                                                : testing::flat_mesh(2));
    testing::run_relayout_case(rc, mesh, c.runtime());
  }));
}

INSTANTIATE_TEST_SUITE_P(Cases, MultiClientRelayout, ::testing::ValuesIn(testing::relayout_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(MultiClient, OpsMatchOneDevice) {
  SimulatedClients clients(2, 2);
  expect_no_errors(clients.run([&](SimulatedClient& c) {
    testing::run_ops_case(c.mesh(testing::client_by_device_mesh(2)), c.runtime());
  }));
}

TEST(MultiClient, TrainingStepsMatchOneDevice) {
  SimulatedClients clients(2, 2);
  expect_no_errors(clients.run([&](SimulatedClient& c) {
    testing::run_training_case(c.mesh(testing::client_by_device_mesh(2)), c.runtime());
  }));
}

TEST(MultiClient, ClientThatNeverJoinsIsNamedInDeadlineExceeded) {
  SimulatedClients clients(2, 2);
  const Tensor host = Tensor::random_uniform(Shape({8, 2}), DType::kF32, 3, -1.0, 1.0);
  const auto errors = clients.run([&](SimulatedClient& c) {
    const Mesh mesh = c.mesh({{"x", 4}});
    const DTensor d = copy_to_mesh(host, layout_of(mesh, {"x", "unsharded"}), c.runtime());
    if (c.id() == 1) return;  // client 1 skips the collective
    RelayoutOptions options;
    options.timeout = std::chrono::milliseconds(300);
    EXPECT_TESSEL_ERROR(relayout(d, Layout::replicated(mesh, 2), options),
                        ErrorCode::kDeadlineExceeded, "task:1");
  });
  expect_no_errors(errors);
}

// A mesh of client 1's devices only (a pipeline stage on another process): relayout_batch of
// its Partial tensors reduces them there and does nothing on client 0, which holds none of
// their components. (It used to size its fused buckets by this client's first component, and
// so failed on client 0: "component index 0 is outside the 0 local components".)
TEST(MultiClient, RelayoutBatchOfAnotherClientsMeshRunsOnlyOnItsOwner) {
  SimulatedClients clients(2, 2);
  const Tensor host = Tensor::random_uniform(Shape({6, 2}), DType::kF32, 5, -1.0, 1.0);
  expect_no_errors(clients.run([&](SimulatedClient& c) {
    const Mesh all = c.mesh({{"client", 2}, {"x", 2}});
    std::vector<int64_t> ids, local_ids;
    std::vector<std::string> local_devices, global_devices;
    for (size_t o = 2; o < 4; ++o) {
      ids.push_back(all.global_device_ids()[o]);
      if (!all.global_devices().empty()) global_devices.push_back(all.global_devices()[o]);
    }
    for (size_t i = 0; i < all.local_device_ids().size(); ++i) {
      if (std::find(ids.begin(), ids.end(), all.local_device_ids()[i]) != ids.end()) {
        local_ids.push_back(all.local_device_ids()[i]);
        local_devices.push_back(all.local_devices()[i]);
      }
    }
    const Mesh mesh({"x"}, {2}, ids, local_ids, local_devices, "", global_devices);
    const DTensor d = copy_to_mesh(
        host, layout_of(mesh, {"unsharded", "unsharded"}, {{"x", ReduceOp::kSum}}), c.runtime());
    const Layout replicated = Layout::replicated(mesh, 2);
    const std::vector<DTensor> out = relayout_batch({d, d}, {replicated, replicated});
    ASSERT_EQ(out.size(), 2u);
    for (const DTensor& r : out) {
      EXPECT_EQ(r.layout(), replicated);
      EXPECT_EQ(r.num_components(), c.id() == 1 ? 2 : 0);
      if (c.id() == 1) testing::expect_blocks_of(r, host, 1e-6);
    }
  }));
}

TEST(MultiClient, MeshSpanningClientsWithoutClusterIsFailedPrecondition) {
  Runtime runtime({.num_cpu_devices = 2, .job = "worker", .task = 0});
  const Mesh mesh = create_distributed_mesh({{"x", 4}}, {"CPU:0", "CPU:1"},
                                            ClientConfig{2, 0, "worker"});
  const Tensor host = Tensor::random_uniform(Shape({8}), DType::kF32, 4, -1.0, 1.0);
  const DTensor d = copy_to_mesh(host, Layout::batch_sharded(mesh, "x", 1), runtime);
  EXPECT_TESSEL_ERROR(relayout(d, Layout::replicated(mesh, 1)), ErrorCode::kFailedPrecondition,
                      "multi-client cluster");
}

TEST(MultiClient, PoolRefusesAnotherClientsDevice) {
  auto views = make_in_process_cluster(2);
  CommunicatorPool pool(views[0]);
  const Mesh mesh = create_distributed_mesh({{"x", 2}, {"y", 2}}, {"CPU:0", "CPU:1"},
                                            ClientConfig{2, 0, "worker"});
  EXPECT_NO_THROW(pool.get(mesh, {"y"}, 1));
  EXPECT_TESSEL_ERROR(pool.get(mesh, {"y"}, 2), ErrorCode::kInvalidArgument, "belongs to client 1");
}

TEST(Cluster, JoinRejectsBadMemberLists) {
  auto views = make_in_process_cluster(2);
  Cluster& c = *views[0];
  const std::chrono::milliseconds t(100);
  EXPECT_TESSEL_ERROR(c.join({"a", "b"}, {0}, t), ErrorCode::kInvalidArgument, "2 members but 1 owners");
  EXPECT_TESSEL_ERROR(c.join({"a", "b"}, {0, 2}, t), ErrorCode::kInvalidArgument, "outside [0, 2)");
  EXPECT_TESSEL_ERROR(c.join({"a", "a"}, {0, 1}, t), ErrorCode::kInvalidArgument, "listed twice");
  EXPECT_TESSEL_ERROR(c.join({"a", "b"}, {1, 1}, t), ErrorCode::kInvalidArgument, "owns none");
  EXPECT_TESSEL_ERROR(make_in_process_cluster(0), ErrorCode::kInvalidArgument, "0 clients");
}

TEST(Cluster, InProcessJoinsMatchByListAndCount) {
  auto views = make_in_process_cluster(2);
  const std::chrono::milliseconds t(1000);
  auto first0 = views[0]->join({"a", "b"}, {0, 1}, t);
  auto second0 = views[0]->join({"a", "b"}, {0, 1}, t);
  auto first1 = views[1]->join({"a", "b"}, {0, 1}, t);
  auto second1 = views[1]->join({"a", "b"}, {0, 1}, t);
  ASSERT_TRUE(first0[0] && !first0[1] && first1[1] && !first1[0]);
  // The first joins form one group, the second ones another: a value reduced in the first
  // group never reaches the second.
  Tensor x0 = Tensor::full({4}, DType::kF32, 1.0), x1 = Tensor::full({4}, DType::kF32, 2.0);
  const auto errors = testing::run_ranks(2, [&](int r) {
    Tensor& x = r == 0 ? x0 : x1;
    (r == 0 ? *first0[0] : *first1[1]).all_reduce(x, x, ReduceOp::kSum);
  });
  expect_no_errors(errors);
  EXPECT_EQ(x0.to_doubles(), std::vector<double>(4, 3.0));
  EXPECT_EQ(x1.to_doubles(), std::vector<double>(4, 3.0));
  EXPECT_TRUE(second0[0] && second1[1]);
}

}  // namespace
}  // namespace tessel
