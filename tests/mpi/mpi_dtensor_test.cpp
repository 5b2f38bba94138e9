// Multi-client DTensors across real processes: every process of `mpirun -np N` is a client with
// 2 CPU devices, and runs the programs of tests/testing/multi_client_cases.h (the same ones the
// simulated clients of tests/dtensor/multi_client_test.cpp run): each relayout kind and an ops
// program over meshes that span the processes, checked block by block on every process.
#include <gtest/gtest.h>

#include "testing/expect_error.h"
#include "testing/multi_client_cases.h"
#include "tessel/clients.h"
#include "tessel/mpi.h"
#include "tessel/multi_client.h"

namespace tessel {
namespace {

constexpr int kLocalDevices = 2;

// This process's client: its runtime is named after its MPI rank, so the default cluster (the
// process's MPI cluster) serves it.
Runtime& client_runtime() {
  static Runtime* runtime = new Runtime(
      RuntimeOptions{.num_cpu_devices = kLocalDevices, .job = "worker", .task = mpi_rank()});
  return *runtime;
}

Mesh client_mesh(const std::vector<MeshDimension>& dims) {
  return create_distributed_mesh(dims, {"CPU:0", "CPU:1"},
                                 ClientConfig{mpi_size(), mpi_rank(), "worker"});
}

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
