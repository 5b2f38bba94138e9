// CollectiveAllReduce across processes (TF's MultiWorkerMirroredStrategy model): every process of
// `mpirun -np N` is one worker with 2 CPU devices (client_runtime) and calls with its local
// per-replica values; group_size is N x 2. Each result is checked against the reduction computed
// here by plain arithmetic over every process's known values, and against the same reduction run
// in this process alone over a runtime of N x 2 devices holding all of the values.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "mpi_client.h"
#include "mpi_testing.h"
#include "tessel/distribute/cross_device_ops.h"
#include "tessel/distribute/indexed_slices.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using testing::client_runtime;
using testing::kClientDevices;

std::vector<std::string> local_devices() {
  return {client_runtime().device(0).name(), client_runtime().device(1).name()};
}

// The value of global device g (= process * 2 + local device) for tensor k: n elements,
// element i = (g + 1) * (k + 1) + i / 4 (exact in f32 and its sums).
Tensor value_of(int g, int k, int64_t n, DType dtype = DType::kF32) {
  return testing::tensor_of(n, dtype, [g, k](int64_t i) {
    return static_cast<double>((g + 1) * (k + 1)) + static_cast<double>(i) / 4;
  });
}

// What a reduction over all N x 2 devices gives, element by element, computed here.
std::vector<double> expected(ReduceOp op, int devices, int k, int64_t n) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double acc = op == ReduceOp::kMax ? -INFINITY : 0;
    for (int g = 0; g < devices; ++g) {
      const double v = static_cast<double>((g + 1) * (k + 1)) + static_cast<double>(i) / 4;
      acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
    }
    out[static_cast<size_t>(i)] = op == ReduceOp::kMean ? acc / devices : acc;
  }
  return out;
}

std::vector<double> doubles(const Value& v) {
  return std::get<Tensor>(v).astype(DType::kF64).to_vector<double>();
}

// This process's values of tensor k, on its two devices.
PerReplica local_value(int k, int64_t n, DType dtype = DType::kF32) {
  const int first = mpi_rank() * kClientDevices;
  return PerReplica(local_devices(),
                    {value_of(first, k, n, dtype), value_of(first + 1, k, n, dtype)});
}

// The same values of every process on the devices of one runtime (the in-process reference).
PerReplica all_values(const Runtime& rt, int k, int64_t n, DType dtype = DType::kF32) {
  std::vector<std::string> names;
  std::vector<Value> values;
  for (int g = 0; g < rt.num_devices(); ++g) {
    names.push_back(rt.device(g).name());
    values.push_back(value_of(g, k, n, dtype));
  }
  return PerReplica(names, values);
}

const CommunicationOptions kOptions(0, 30.0);

TEST(MpiCollectiveAllReduce, ReduceEqualsArithmeticAndTheInProcessResult) {
  const int group = mpi_size() * kClientDevices;
  CollectiveAllReduce ops(local_devices(), group, kOptions, client_runtime());
  EXPECT_EQ(ops.num_between_graph_workers(), mpi_size());
  Runtime one({.num_cpu_devices = group});
  CollectiveAllReduce reference(first_devices(group, one), group, kOptions, one);
  const int64_t n = 1000;
  const PerReplica mine = local_value(0, n);
  const PerReplica all = all_values(one, 0, n);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
    const Mirrored got = ops.reduce(op, mine, mine);
    const Mirrored want = reference.reduce(op, all, all);
    ASSERT_EQ(got.devices(), local_devices());
    for (int d = 0; d < kClientDevices; ++d) {
      EXPECT_EQ(doubles(got.value(d)), expected(op, group, 0, n)) << reduce_op_name(op) << " " << d;
      EXPECT_EQ(doubles(got.value(d)), doubles(want.value(0))) << reduce_op_name(op) << " " << d;
    }
    EXPECT_EQ(ops.last_plan().path, "collective");
  }
}

TEST(MpiCollectiveAllReduce, ReduceToOneDestination) {
  // Destination device 1 only: it keeps its own result.
  const int group = mpi_size() * kClientDevices;
  CollectiveAllReduce ops(local_devices(), group, kOptions, client_runtime());
  const PerReplica mine = local_value(0, 7);
  const Mirrored got = ops.reduce(ReduceOp::kSum, mine, Destinations(local_devices()[1]));
  ASSERT_EQ(got.devices(), std::vector<std::string>{local_devices()[1]});
  EXPECT_EQ(doubles(got.value(0)), expected(ReduceOp::kSum, group, 0, 7));
}

TEST(MpiCollectiveAllReduce, BatchReducePacksAndEqualsTheInProcessResult) {
  // Five tensors of three sizes and two dtypes, 4 KiB packs: several collectives, each across
  // the processes.
  const int group = mpi_size() * kClientDevices;
  CollectiveAllReduce ops(local_devices(), group, CommunicationOptions(4096, 30.0),
                          client_runtime());
  Runtime one({.num_cpu_devices = group});
  CollectiveAllReduce reference(first_devices(group, one), group,
                                CommunicationOptions(4096, 30.0), one);
  const std::vector<int64_t> sizes = {3, 1500, 64, 2000, 1};
  const std::vector<DType> dtypes = {DType::kF32, DType::kF32, DType::kI32, DType::kF64,
                                     DType::kF32};
  std::vector<ValueDestinationPair> mine, all;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const PerReplica m = local_value(static_cast<int>(k), sizes[k], dtypes[k]);
    const PerReplica a = all_values(one, static_cast<int>(k), sizes[k], dtypes[k]);
    mine.emplace_back(m, m);
    all.emplace_back(a, a);
  }
  const std::vector<Mirrored> got = ops.batch_reduce(ReduceOp::kSum, mine);
  const std::vector<Mirrored> want = reference.batch_reduce(ReduceOp::kSum, all);
  EXPECT_EQ(ops.last_plan().path, "collective");
  EXPECT_GT(ops.last_plan().num_collectives(), 1);
  EXPECT_EQ(ops.last_plan().num_collectives(), reference.last_plan().num_collectives());
  ASSERT_EQ(got.size(), sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) {
    for (int d = 0; d < kClientDevices; ++d) {
      EXPECT_EQ(std::get<Tensor>(got[k].value(d)).dtype(), dtypes[k]);
      // The i32 tensor's elements i / 4 truncate; compare with its own integer arithmetic.
      std::vector<double> want_k = expected(ReduceOp::kSum, group, static_cast<int>(k), sizes[k]);
      if (dtypes[k] == DType::kI32) {
        for (int64_t i = 0; i < sizes[k]; ++i) {
          double acc = 0;
          for (int g = 0; g < group; ++g)
            acc += (g + 1) * (static_cast<int>(k) + 1) + static_cast<int64_t>(i / 4);
          want_k[static_cast<size_t>(i)] = acc;
        }
      }
      EXPECT_EQ(doubles(got[k].value(d)), want_k) << "tensor " << k << " device " << d;
      EXPECT_EQ(doubles(got[k].value(d)), doubles(want[k].value(0))) << "tensor " << k;
    }
  }
  // MEAN divides by the whole group.
  const std::vector<Mirrored> means = ops.batch_reduce(ReduceOp::kMean, {mine[0], mine[1]});
  EXPECT_EQ(doubles(means[1].value(0)), expected(ReduceOp::kMean, group, 1, sizes[1]));
  EXPECT_FALSE(ops.last_plan().mean_divisors.empty());
  for (int64_t divisor : ops.last_plan().mean_divisors) EXPECT_EQ(divisor, group);
}

TEST(MpiCollectiveAllReduce, IndexedSlicesAndGatherSpanTheProcesses) {
  const int group = mpi_size() * kClientDevices;
  CollectiveAllReduce ops(local_devices(), group, kOptions, client_runtime());
  // Global device g contributes row g of a [group, 2] gradient with values (g, 10 g).
  std::vector<Value> slices;
  for (int d = 0; d < kClientDevices; ++d) {
    const int g = mpi_rank() * kClientDevices + d;
    slices.push_back(IndexedSlices(
        Tensor::from_vector<float>({static_cast<float>(g), 10.0f * g}, Shape{1, 2}),
        Tensor::from_vector<int64_t>({g}, Shape{1}), Shape{group, 2}));
  }
  const PerReplica sparse(local_devices(), slices);
  const Mirrored summed = ops.reduce(ReduceOp::kSum, sparse, sparse);
  std::vector<double> dense_want;
  for (int g = 0; g < group; ++g) {
    dense_want.push_back(g);
    dense_want.push_back(10.0 * g);
  }
  for (int d = 0; d < kClientDevices; ++d) {
    const Tensor dense = std::get<IndexedSlices>(summed.value(d)).to_dense();
    EXPECT_EQ(dense.astype(DType::kF64).to_vector<double>(), dense_want) << "device " << d;
  }
  // Gather: every device's [2] vector, concatenated in rank order (process, then device).
  const PerReplica mine = local_value(0, 2);
  const Mirrored gathered = ops.gather(mine, mine, 0);
  std::vector<double> want;
  for (int g = 0; g < group; ++g) {
    for (int64_t i = 0; i < 2; ++i) want.push_back((g + 1) + static_cast<double>(i) / 4);
  }
  EXPECT_EQ(doubles(gathered.value(0)), want);
}

TEST(MpiCollectiveAllReduce, AGroupSizeOtherThanProcessesTimesDevicesIsRefused) {
  // Checked before any process communicates, so every process fails alike.
  CollectiveAllReduce ops(local_devices(), (mpi_size() + 1) * kClientDevices, kOptions,
                          client_runtime());
  const PerReplica mine = local_value(0, 4);
  EXPECT_TESSEL_ERROR(ops.reduce(ReduceOp::kSum, mine, mine), ErrorCode::kInvalidArgument,
                      fmt::format("but this program runs as {} clients", mpi_size()));
}

}  // namespace
}  // namespace tessel
