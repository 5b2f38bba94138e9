// ReplicaContext's cross-replica collectives (all_reduce, all_gather, broadcast, barrier) on one
// and several cores per replica, and DTensor SPMD inside a replica (2 replicas x 2 cores).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "replicate/replicate_testing.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "testing/expect_error.h"

namespace tessel {
namespace {

using testing::host_values;
using testing::replicate_options;
using testing::vec;

// Replica r's value: [r, 10 r] (two elements).
std::vector<std::vector<Tensor>> pairs(int replicas) {
  std::vector<Tensor> values;
  for (int r = 0; r < replicas; ++r) values.push_back(vec({1.0f * r, 10.0f * r}));
  return {values};
}

TEST(ReplicateCollectives, AllReduceCombinesEveryReplicasValue) {
  const auto outs = replicate(
      [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        std::vector<DTensor> out;
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
          out.push_back(ctx.all_reduce(in[0], op));
          EXPECT_EQ(out.back().layout(), in[0].layout());
        }
        return out;
      },
      pairs(4), {}, {}, {}, replicate_options(4));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(host_values(outs[r][0]), (std::vector<float>{6, 60}));
    EXPECT_EQ(host_values(outs[r][1]), (std::vector<float>{1.5, 15}));
    EXPECT_EQ(host_values(outs[r][2]), (std::vector<float>{3, 30}));
    EXPECT_EQ(host_values(outs[r][3]), (std::vector<float>{0, 0}));
  }
}

TEST(ReplicateCollectives, AllGatherConcatenatesInReplicaOrder) {
  const auto outs = replicate(
      [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        const DTensor row = reshape(in[0], Shape{1, 2});
        return std::vector<DTensor>{ctx.all_gather(in[0], 0), ctx.all_gather(row, 0),
                                    ctx.all_gather(row, -1)};
      },
      pairs(3), {}, {}, {}, replicate_options(3));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(host_values(outs[r][0]), (std::vector<float>{0, 0, 1, 10, 2, 20}));
    EXPECT_EQ(outs[r][1].shape(), (Shape{3, 2}));
    EXPECT_EQ(host_values(outs[r][1]), (std::vector<float>{0, 0, 1, 10, 2, 20}));
    EXPECT_EQ(outs[r][2].shape(), (Shape{1, 6}));
    EXPECT_EQ(host_values(outs[r][2]), (std::vector<float>{0, 0, 1, 10, 2, 20}));
  }
}

TEST(ReplicateCollectives, BroadcastGivesEveryReplicaTheRootsValue) {
  const auto outs = replicate(
      [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        return std::vector<DTensor>{ctx.broadcast(in[0], 2), ctx.broadcast(in[0], 0)};
      },
      pairs(4), {}, {}, {}, replicate_options(4));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(host_values(outs[r][0]), (std::vector<float>{2, 20}));
    EXPECT_EQ(host_values(outs[r][1]), (std::vector<float>{0, 0}));
  }
}

TEST(ReplicateCollectives, BarrierReturnsOnceEveryReplicaCalledIt) {
  std::atomic<int> before{0};
  replicate(
      [&](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        std::this_thread::sleep_for(std::chrono::milliseconds(40 * ctx.replica_id()));
        before.fetch_add(1);
        ctx.barrier();
        EXPECT_EQ(before.load(), 4);
        return in;
      },
      {}, {}, {}, {}, replicate_options(4));
}

TEST(ReplicateCollectives, BadArgumentsFailBeforeAnythingIsSent) {
  const auto expect = [](auto body, const std::string& text) {
    EXPECT_TESSEL_ERROR(replicate(body, pairs(2), {}, {}, {}, replicate_options(2)),
                        ErrorCode::kInvalidArgument, text);
  };
  expect(
      [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        return std::vector<DTensor>{ctx.broadcast(in[0], 5)};
      },
      "root_replica 5 must lie in [0, 2)");
  expect(
      [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        return std::vector<DTensor>{ctx.all_gather(in[0], 1)};
      },
      "axis 1 is out of range for f32[2] sharding_specs:unsharded,");
  expect(
      [](ReplicaContext& ctx, const std::vector<DTensor>&) {
        return std::vector<DTensor>{ctx.all_reduce(DTensor())};
      },
      "the input is a null DTensor");
  expect(
      [](ReplicaContext& ctx, const std::vector<DTensor>&) {
        // A tensor on the devices of both replicas, not on this replica's cores.
        const Mesh both = Mesh::create_on_devices({{"x", 2}}, {"CPU:0", "CPU:1"});
        const DTensor x = copy_to_mesh(vec({1}), Layout::replicated(both, 1), ctx.runtime());
        return std::vector<DTensor>{ctx.all_reduce(x)};
      },
      "the input must lie on this replica's cores");
}

// A subclass as a tracer would write one: the base class's single-replica semantics.
class SingleReplicaContext : public ReplicaContext {
 public:
  SingleReplicaContext(int replicas, Mesh mesh)
      : ReplicaContext(0, replicas, std::move(mesh), testing::replicate_runtime()) {}
};

TEST(ReplicateCollectives, TheBaseContextIsTheSingleReplicaCase) {
  const Mesh mesh = Mesh::create_on_devices({{"core", 1}}, {"CPU:0"});
  SingleReplicaContext one(1, mesh);
  const DTensor x = copy_to_mesh(vec({3, 4}), Layout::replicated(mesh, 1), one.runtime());
  EXPECT_EQ(host_values(one.all_reduce(x)), (std::vector<float>{3, 4}));
  EXPECT_EQ(host_values(one.all_gather(x, 0)), (std::vector<float>{3, 4}));
  EXPECT_EQ(host_values(one.broadcast(x, 0)), (std::vector<float>{3, 4}));
  one.barrier();
  SingleReplicaContext two(2, mesh);
  EXPECT_TESSEL_ERROR(two.all_reduce(x), ErrorCode::kFailedPrecondition,
                      "ReplicaContext: all_reduce over 2 replicas needs cross-replica "
                      "communicators");
  EXPECT_TESSEL_ERROR(SingleReplicaContext(0, mesh), ErrorCode::kInvalidArgument,
                      "replica_id 0 must lie in [0, num_replicas = 0)");
  // A context without bound variables (a tracer's) does not record variable reads or writes.
  EXPECT_TESSEL_ERROR(one.assign_variable(0, x), ErrorCode::kUnimplemented,
                      "assign_variable on replica 0: compile()'s traced computation does not "
                      "record variable reads and assignments");
  EXPECT_TESSEL_ERROR(one.read_variable(0), ErrorCode::kUnimplemented, "read_variable");
}

// ---- several cores per replica ------------------------------------------------------------

Tensor host_matmul(const Tensor& a, const Tensor& b) {
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  std::vector<float> out(static_cast<size_t>(m * n), 0.0f);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) s += double(x[i * k + l]) * y[l * n + j];
      out[i * n + j] = static_cast<float>(s);
    }
  }
  return Tensor::from_vector<float>(out, Shape{m, n});
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << "element " << i;
}

TEST(ReplicateSpmd, TwoReplicasOfTwoCoresRunAShardedMatmul) {
  const Tensor x0 = Tensor::random_uniform({4, 6}, DType::kF32, 1);
  const Tensor x1 = Tensor::random_uniform({4, 6}, DType::kF32, 2);
  const Tensor w = Tensor::random_uniform({6, 8}, DType::kF32, 3);
  const auto outs = replicate(
      [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        EXPECT_EQ(ctx.mesh().size(), 2);
        const int first = 2 * ctx.replica_id();
        EXPECT_EQ(in[0].device(0).index(), first);
        EXPECT_EQ(in[0].device(1).index(), first + 1);
        // Contraction sharded over the cores: the matmul leaves partial sums on them.
        const DTensor x = relayout(in[0], Layout({"unsharded", "core"}, ctx.mesh()));
        const DTensor w = relayout(in[1], Layout({"core", "unsharded"}, ctx.mesh()));
        const DTensor y = matmul(x, w);
        EXPECT_TRUE(y.layout().is_partial());
        // Output columns sharded over the cores.
        const DTensor wc = relayout(in[1], Layout({"unsharded", "core"}, ctx.mesh()));
        const DTensor yc = matmul(in[0], wc);
        return std::vector<DTensor>{y, ctx.all_reduce(y), yc, ctx.all_gather(yc, 1)};
      },
      {{x0, x1}}, {w}, {}, {}, replicate_options(2, 2));
  const Tensor y0 = host_matmul(x0, w), y1 = host_matmul(x1, w);
  std::vector<float> sum = y0.to_vector<float>();
  const std::vector<float> y1v = y1.to_vector<float>();
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += y1v[i];
  for (int r = 0; r < 2; ++r) {
    expect_near(host_values(outs[r][0]), (r == 0 ? y0 : y1).to_vector<float>());
    expect_near(host_values(outs[r][1]), sum);
    expect_near(host_values(outs[r][2]), (r == 0 ? y0 : y1).to_vector<float>());
    EXPECT_EQ(outs[r][3].shape(), (Shape{4, 16}));
    EXPECT_EQ(outs[r][3].layout(), outs[r][2].layout());
  }
  // Columns 8..15 of the gathered result are replica 1's.
  const Tensor gathered = to_host(outs[0][3]);
  expect_near(gathered.slice(1, 8, 16).contiguous().to_vector<float>(), y1.to_vector<float>());
}

TEST(ReplicateSpmd, CollectivesOnUnevenShardedAndPartialLayouts) {
  // [5, 3] rows over 2 cores: 3 + 2 rows.
  const Tensor a = Tensor::random_uniform({5, 3}, DType::kF32, 4);
  const Tensor b = Tensor::random_uniform({5, 3}, DType::kF32, 5);
  const auto outs = replicate(
      [](ReplicaContext& ctx, const std::vector<DTensor>& in) {
        const Layout rows({"core", "unsharded"}, ctx.mesh());
        const DTensor x = relayout(in[0], rows);
        // The value as pending sums over the cores (core 0 holds it, core 1 zeros).
        const DTensor p =
            relayout(in[0], Layout::create(LayoutType::kStatic,
                                           {ShardingSpec::unsharded(), ShardingSpec::unsharded()},
                                           ctx.mesh(), {PartialDim{"core", ReduceOp::kSum}}));
        std::vector<DTensor> out = {ctx.all_reduce(x),
                                    ctx.all_gather(x, 0),
                                    ctx.all_gather(x, 1),
                                    ctx.broadcast(x, 1),
                                    ctx.all_reduce(p, ReduceOp::kSum),
                                    ctx.all_reduce(p, ReduceOp::kMax)};
        EXPECT_EQ(out[0].layout(), rows);
        EXPECT_EQ(out[1].layout(), rows);
        EXPECT_EQ(out[4].layout(), p.layout());
        EXPECT_EQ(out[5].layout(), p.layout());
        return out;
      },
      {{a, b}}, {}, {}, {}, replicate_options(2, 2));
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  std::vector<float> sum(av.size()), max(av.size());
  for (size_t i = 0; i < av.size(); ++i) {
    sum[i] = av[i] + bv[i];
    max[i] = std::max(av[i], bv[i]);
  }
  std::vector<float> rows_cat = av, cols_cat;
  rows_cat.insert(rows_cat.end(), bv.begin(), bv.end());
  for (int i = 0; i < 5; ++i) {
    cols_cat.insert(cols_cat.end(), av.begin() + 3 * i, av.begin() + 3 * i + 3);
    cols_cat.insert(cols_cat.end(), bv.begin() + 3 * i, bv.begin() + 3 * i + 3);
  }
  for (int r = 0; r < 2; ++r) {
    expect_near(host_values(outs[r][0]), sum);
    EXPECT_EQ(outs[r][1].shape(), (Shape{10, 3}));
    expect_near(host_values(outs[r][1]), rows_cat);
    EXPECT_EQ(outs[r][2].shape(), (Shape{5, 6}));
    expect_near(host_values(outs[r][2]), cols_cat);
    expect_near(host_values(outs[r][3]), bv);
    expect_near(host_values(outs[r][4]), sum);
    expect_near(host_values(outs[r][5]), max);
  }
}

TEST(ReplicateSpmd, SeveralCoresWithoutSpmdPartitioningIsUnimplemented) {
  ReplicateOptions options = replicate_options(2, 2);
  options.metadata.use_spmd_for_xla_partitioning = false;
  EXPECT_TESSEL_ERROR(replicate([](ReplicaContext&, const std::vector<DTensor>& in) { return in; },
                                {}, {}, {}, {}, options),
                      ErrorCode::kUnimplemented,
                      "replicate: num_cores_per_replica = 2 without use_spmd_for_xla_partitioning");
}

}  // namespace
}  // namespace tessel
