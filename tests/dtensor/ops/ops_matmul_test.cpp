// matmul and einsum (ops_matmul.cpp): exact values, the sharding rules (plan_op: rows, columns,
// contracted dims -> Partial(sum), one-sided contracted sharding as a local slice, m/n
// conflicts, batch dims, Partial inputs, the Megatron column -> row pair without a collective),
// random layouts against a single-device run, VJPs against finite differences, errors.
#include <gtest/gtest.h>

#include <random>

#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "testing/expect_error.h"
#include "testing/op_check.h"

namespace tessel {
namespace {

using testing::distribute;
using testing::expect_matches_single_device;
using testing::expect_vjp_matches_finite_differences;
using testing::OpFn;
using testing::random_host;
using testing::random_op_layout;

using testing::values;

Layout layout_of(const std::vector<std::string>& specs, const Mesh& mesh,
                 std::vector<PartialDim> partial = {}) {
  return Layout(specs, mesh).with_partial(std::move(partial));
}

DTensor put(const std::vector<double>& v, const Shape& shape, const Layout& layout, Runtime& rt,
            DType dtype = DType::kF64) {
  Tensor t = Tensor::from_vector<double>(v, shape);
  return copy_to_mesh(dtype == DType::kF64 ? t : t.astype(dtype), layout, rt);
}

DTensor put_replicated(const std::vector<double>& v, const Shape& shape, Runtime& rt,
                       DType dtype = DType::kF64) {
  return put(v, shape, Layout::replicated(Mesh::create({{"x", 2}, {"y", 2}}), shape.rank()), rt,
             dtype);
}

std::vector<Mesh> meshes() {
  return {Mesh::create({{"x", 4}}), Mesh::create({{"x", 2}, {"y", 2}}), Mesh::create({{"x", 3}})};
}

const Mesh& mesh22() {
  static const Mesh m = Mesh::create({{"x", 2}, {"y", 2}});
  return m;
}

// ---- exact values ----------------------------------------------------------------------------

TEST(MatmulValues, TwoByTwoWithEveryTransposeInBothDtypes) {
  Runtime rt({.num_cpu_devices = 4});
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const DTensor a = put_replicated({1, 2, 3, 4}, {2, 2}, rt, dtype);
    const DTensor b = put_replicated({5, 6, 7, 8}, {2, 2}, rt, dtype);
    EXPECT_EQ(values(matmul(a, b)), (std::vector<double>{19, 22, 43, 50}));
    EXPECT_EQ(values(matmul(a, b, true, false)), (std::vector<double>{26, 30, 38, 44}));
    EXPECT_EQ(values(matmul(a, b, false, true)), (std::vector<double>{17, 23, 39, 53}));
    EXPECT_EQ(values(matmul(a, b, true, true)), (std::vector<double>{23, 31, 34, 46}));
    EXPECT_EQ(matmul(a, b).dtype(), dtype);
  }
}

TEST(MatmulValues, NonSquareShardedRowsUneven) {
  Runtime rt({.num_cpu_devices = 4});
  // 3 rows over x=4: the last device holds an empty block.
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor a =
      put({1, 2, 3, 4, 5, 6, 0, 1, 0}, {3, 3}, layout_of({"x", "unsharded"}, mesh), rt);
  const DTensor b = put({1, 0, 0, 1, 1, 1}, {3, 2}, Layout::replicated(mesh, 2), rt);
  const DTensor c = matmul(a, b);
  EXPECT_EQ(c.layout(), layout_of({"x", "unsharded"}, mesh));
  EXPECT_EQ(values(c), (std::vector<double>{4, 5, 10, 11, 0, 1}));
}

TEST(MatmulValues, BatchedAndBroadcastBatch) {
  Runtime rt({.num_cpu_devices = 4});
  const DTensor a = put_replicated({1, 2, 3, 4}, {2, 1, 2}, rt);
  const DTensor b = put_replicated({1, 1, 2, 0}, {2, 2, 1}, rt);
  const DTensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 1, 1}));
  EXPECT_EQ(values(c), (std::vector<double>{3, 6}));
  // [2, 2, 3] x [3, 2]: the missing batch dim of b broadcasts.
  const DTensor x = put_replicated({1, 2, 3, 4, 5, 6, 0, 0, 1, 1, 0, 0}, {2, 2, 3}, rt);
  const DTensor w = put_replicated({1, 0, 0, 1, 1, 1}, {3, 2}, rt);
  EXPECT_EQ(matmul(x, w).shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(values(matmul(x, w)), (std::vector<double>{4, 5, 10, 11, 1, 1, 1, 0}));
  // [3, 2] x [2, 3, 2]^T...: b's batch broadcasts over a.
  EXPECT_EQ(values(matmul(w, x, true, true)), (std::vector<double>{4, 10, 5, 11, 1, 1, 1, 0}));
}

TEST(MatmulValues, LargerF32MatchesHostReference) {
  Runtime rt({.num_cpu_devices = 4});
  const Tensor ha = random_host({37, 29}, DType::kF32, 1);
  const Tensor hb = random_host({29, 23}, DType::kF32, 2);
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor c = matmul(copy_to_mesh(ha, layout_of({"x", "y"}, mesh), rt),
                           copy_to_mesh(hb, layout_of({"y", "unsharded"}, mesh), rt));
  const Tensor got = to_host(c);
  for (int64_t i = 0; i < 37; ++i) {
    for (int64_t j = 0; j < 23; ++j) {
      double want = 0;
      for (int64_t k = 0; k < 29; ++k) want += ha.at({i, k}) * hb.at({k, j});
      ASSERT_NEAR(got.at({i, j}), want, 1e-4) << i << "," << j;
    }
  }
}

TEST(EinsumValues, CommonEquations) {
  Runtime rt({.num_cpu_devices = 4});
  const DTensor a = put_replicated({1, 2, 3, 4}, {2, 2}, rt);
  const DTensor b = put_replicated({5, 6, 7, 8}, {2, 2}, rt);
  EXPECT_EQ(values(einsum("ij,jk->ik", a, b)), (std::vector<double>{19, 22, 43, 50}));
  EXPECT_EQ(values(einsum("ij,jk", a, b)), (std::vector<double>{19, 22, 43, 50}));  // implicit
  EXPECT_EQ(values(einsum("ba,ac", a, b)), (std::vector<double>{19, 22, 43, 50}));  // sorted
  EXPECT_EQ(values(einsum("ij,jk->ki", a, b)), (std::vector<double>{19, 43, 22, 50}));
  EXPECT_EQ(values(einsum("ij,kj->ik", a, b)), (std::vector<double>{17, 23, 39, 53}));
  EXPECT_EQ(values(einsum("ji,jk->ik", a, b)), (std::vector<double>{26, 30, 38, 44}));
  EXPECT_EQ(values(einsum("ij,ij->", a, b)), (std::vector<double>{70}));
  EXPECT_EQ(values(einsum("ij,jk->", a, b)), (std::vector<double>{134}));
  EXPECT_EQ(values(einsum(" i j , j k -> i k ", a, b)), (std::vector<double>{19, 22, 43, 50}));
  const DTensor u = put_replicated({1, 2}, {2}, rt);
  const DTensor v = put_replicated({3, 4, 5}, {3}, rt);
  EXPECT_EQ(values(einsum("i,j->ij", u, v)), (std::vector<double>{3, 4, 5, 6, 8, 10}));
  EXPECT_EQ(values(einsum("i,j->ji", u, v)), (std::vector<double>{3, 6, 4, 8, 5, 10}));
  // A letter of one operand only is summed out first: sum(a) * u.
  EXPECT_EQ(values(einsum("ij,k->k", a, u)), (std::vector<double>{10, 20}));
  const DTensor p = put_replicated({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}, rt);
  EXPECT_EQ(values(einsum("bij,bjk->bik", p, p)),
            (std::vector<double>{7, 10, 15, 22, 67, 78, 91, 106}));
  EXPECT_EQ(values(einsum("bij,bkj->bki", p, p)),  // output [b, n, m]: the transposed product
            (std::vector<double>{5, 11, 11, 25, 61, 83, 83, 113}));
  EXPECT_EQ(values(einsum("bij,bjk->ibk", p, p)),  // output interleaved: through a buffer
            (std::vector<double>{7, 10, 67, 78, 15, 22, 91, 106}));
}

// ---- sharding rules --------------------------------------------------------------------------

TensorSpec spec(const Shape& shape, const Layout& layout) { return {shape, DType::kF32, layout}; }

OpAttrs transposes(bool ta, bool tb) {
  OpAttrs a;
  a.transpose_a = ta;
  a.transpose_b = tb;
  return a;
}

void expect_decision(const ShardingDecision& d, const Layout& a, const Layout& b,
                     const Layout& out) {
  EXPECT_EQ(d.inputs[0], a) << d.inputs[0].to_string();
  EXPECT_EQ(d.inputs[1], b) << d.inputs[1].to_string();
  EXPECT_EQ(d.output, out) << d.output.to_string();
}

TEST(MatmulRule, RowsOfAShardedGiveRowsOfTheOutput) {
  const Mesh& m = mesh22();
  const Layout a = layout_of({"x", "unsharded"}, m), b = layout_of({"unsharded", "unsharded"}, m);
  expect_decision(plan_op("matmul", {spec({8, 4}, a), spec({4, 6}, b)}), a, b,
                  layout_of({"x", "unsharded"}, m));
}

TEST(MatmulRule, ColumnsOfBShardedGiveColumnsOfTheOutput) {
  const Mesh& m = mesh22();
  const Layout a = layout_of({"x", "unsharded"}, m), b = layout_of({"unsharded", "y"}, m);
  expect_decision(plan_op("matmul", {spec({8, 4}, a), spec({4, 6}, b)}), a, b,
                  layout_of({"x", "y"}, m));
}

TEST(MatmulRule, ContractedDimShardedTheSameWayGivesPartialSum) {
  const Mesh& m = mesh22();
  const Layout a = layout_of({"unsharded", "x"}, m), b = layout_of({"x", "y"}, m);
  expect_decision(plan_op("matmul", {spec({8, 4}, a), spec({4, 6}, b)}), a, b,
                  layout_of({"unsharded", "y"}, m, {{"x", ReduceOp::kSum}}));
  // Transposed operands: k is a's dim 0 and b's dim 1.
  const Layout at = layout_of({"x+y", "unsharded"}, m), bt = layout_of({"unsharded", "x+y"}, m);
  expect_decision(
      plan_op("matmul", {spec({4, 8}, at), spec({6, 4}, bt)}, transposes(true, true)), at, bt,
      layout_of({"unsharded", "unsharded"}, m, {{"x", ReduceOp::kSum}, {"y", ReduceOp::kSum}}));
}

TEST(MatmulRule, ContractedDimShardedOnOneSideSlicesTheReplicatedOperandLocally) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh& m = mesh22();
  const Layout a = layout_of({"unsharded", "x"}, m), b = layout_of({"unsharded", "unsharded"}, m);
  expect_decision(plan_op("matmul", {spec({8, 4}, a), spec({4, 6}, b)}), a,
                  layout_of({"x", "unsharded"}, m),
                  layout_of({"unsharded", "unsharded"}, m, {{"x", ReduceOp::kSum}}));
  // The slice runs no collective.
  const Tensor ha = random_host({5, 7}, DType::kF64, 1), hb = random_host({7, 3}, DType::kF64, 2);
  const DTensor da = copy_to_mesh(ha, a, rt), db = copy_to_mesh(hb, b, rt);
  const int64_t before = relayout_stats().collectives;
  const DTensor c = matmul(da, db);
  rt.synchronize();
  EXPECT_EQ(relayout_stats().collectives, before);
  const Mesh one = Mesh::create_on_devices({{"single", 1}}, {rt.device(0).name()});
  const Tensor want = to_host(matmul(copy_to_mesh(ha, Layout::replicated(one, 2), rt),
                                     copy_to_mesh(hb, Layout::replicated(one, 2), rt)));
  EXPECT_TRUE(allclose(to_host(c), want, 1e-12, 1e-12));
}

TEST(MatmulRule, ContractedDimShardedOnOneSideWithThatMeshDimBusyIsUnsharded) {
  const Mesh& m = mesh22();
  // b uses x for its columns: it cannot also take x on k, so k is gathered on a.
  const Layout a = layout_of({"unsharded", "x"}, m), b = layout_of({"unsharded", "x"}, m);
  expect_decision(plan_op("matmul", {spec({8, 4}, a), spec({4, 6}, b)}),
                  layout_of({"unsharded", "unsharded"}, m), b, layout_of({"unsharded", "x"}, m));
}

TEST(MatmulRule, RowsAndColumnsOverTheSameMeshDimUnshardTheSmallerOperand) {
  const Mesh& m = mesh22();
  const Layout a = layout_of({"x", "unsharded"}, m), b = layout_of({"unsharded", "x"}, m);
  // a (8x4) is smaller than b (4x16): a's rows are gathered.
  expect_decision(plan_op("matmul", {spec({8, 4}, a), spec({4, 16}, b)}),
                  layout_of({"unsharded", "unsharded"}, m), b, layout_of({"unsharded", "x"}, m));
  // b (4x2) smaller: b's columns are gathered.
  expect_decision(plan_op("matmul", {spec({8, 4}, a), spec({4, 2}, b)}), a,
                  layout_of({"unsharded", "unsharded"}, m), layout_of({"x", "unsharded"}, m));
}

TEST(MatmulRule, BatchDimsKeepTheirSharding) {
  const Mesh& m = mesh22();
  const Layout a = layout_of({"x", "unsharded", "unsharded"}, m);
  const Layout b = layout_of({"x", "unsharded", "y"}, m);
  expect_decision(plan_op("matmul", {spec({4, 8, 3}, a), spec({4, 3, 5}, b)}), a, b,
                  layout_of({"x", "unsharded", "y"}, m));
  // Sharded on one side only: the other side is sliced the same way.
  const Layout b_rep = layout_of({"unsharded", "unsharded", "y"}, m);
  expect_decision(plan_op("matmul", {spec({4, 8, 3}, a), spec({4, 3, 5}, b_rep)}), a, b,
                  layout_of({"x", "unsharded", "y"}, m));
  // A broadcast batch dim (missing in b) is an output row dim: a keeps it.
  const Layout w = layout_of({"unsharded", "y"}, m);
  expect_decision(plan_op("matmul", {spec({4, 8, 3}, a), spec({3, 5}, w)}), a, w,
                  layout_of({"x", "unsharded", "y"}, m));
}

TEST(MatmulRule, PartialInputWithReplicatedOtherStaysPartial) {
  const Mesh& m = mesh22();
  const Layout a = layout_of({"x", "unsharded"}, m, {{"y", ReduceOp::kSum}});
  const Layout b = layout_of({"unsharded", "unsharded"}, m);
  expect_decision(plan_op("matmul", {spec({8, 4}, a), spec({4, 6}, b)}), a, b,
                  layout_of({"x", "unsharded"}, m, {{"y", ReduceOp::kSum}}));
  // As the second operand its rows (k) are over x: the replicated first operand is sliced.
  expect_decision(
      plan_op("matmul", {spec({4, 6}, b), spec({6, 8}, a)}), layout_of({"unsharded", "x"}, m), a,
      layout_of({"unsharded", "unsharded"}, m, {{"x", ReduceOp::kSum}, {"y", ReduceOp::kSum}}));
}

TEST(MatmulRule, BothPartialReducesTheSmallerOne) {
  const Mesh& m = mesh22();
  const Layout a = layout_of({"unsharded", "unsharded"}, m, {{"x", ReduceOp::kSum}});
  const Layout b = layout_of({"unsharded", "unsharded"}, m, {{"y", ReduceOp::kSum}});
  expect_decision(plan_op("matmul", {spec({2, 3}, a), spec({3, 4}, b)}), a.without_partial(), b,
                  layout_of({"unsharded", "unsharded"}, m, {{"y", ReduceOp::kSum}}));
}

TEST(MatmulRule, PendingSumMeetingTheOthersShardingIsReducedThere) {
  const Mesh& m = mesh22();
  // b shards its columns over y: a's pending sum over y must be done first.
  const Layout a = layout_of({"unsharded", "unsharded"}, m, {{"y", ReduceOp::kSum}});
  const Layout b = layout_of({"unsharded", "y"}, m);
  expect_decision(plan_op("matmul", {spec({8, 4}, a), spec({4, 6}, b)}), a.without_partial(), b,
                  layout_of({"unsharded", "y"}, m));
  // b shards k over y: a takes y on k (a reduce-scatter of its own pending sum).
  const Layout bk = layout_of({"y", "unsharded"}, m);
  expect_decision(plan_op("matmul", {spec({8, 4}, a), spec({4, 6}, bk)}),
                  layout_of({"unsharded", "y"}, m), bk,
                  layout_of({"unsharded", "unsharded"}, m, {{"y", ReduceOp::kSum}}));
}

TEST(MatmulRule, PendingMaxIsReducedFirst) {
  const Mesh& m = mesh22();
  const Layout a = layout_of({"x", "unsharded"}, m, {{"y", ReduceOp::kMax}});
  const Layout b = layout_of({"unsharded", "unsharded"}, m);
  expect_decision(plan_op("matmul", {spec({8, 4}, a), spec({4, 6}, b)}), a.without_partial(), b,
                  layout_of({"x", "unsharded"}, m));
}

TEST(MatmulRule, MegatronColumnThenRowParallelRunsNoCollectiveBetween) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"batch", 2}, {"model", 2}});
  const Layout x_layout({"batch", "unsharded"}, mesh);
  const Layout w1_layout({"unsharded", "model"}, mesh);
  const Layout w2_layout({"model", "unsharded"}, mesh);
  const Tensor hx = random_host({6, 5}, DType::kF64, 1);
  const Tensor hw1 = random_host({5, 8}, DType::kF64, 2);
  const Tensor hw2 = random_host({8, 3}, DType::kF64, 3);
  const DTensor x = copy_to_mesh(hx, x_layout, rt);
  const DTensor w1 = copy_to_mesh(hw1, w1_layout, rt);
  const DTensor w2 = copy_to_mesh(hw2, w2_layout, rt);

  const int64_t before = relayout_stats().collectives;
  const DTensor h = matmul(x, w1);  // column-parallel
  EXPECT_EQ(h.layout(), Layout({"batch", "model"}, mesh));
  // The second matmul wants h exactly as it is: no relayout.
  const ShardingDecision d = plan_op(
      "matmul", {{h.shape(), h.dtype(), h.layout()}, {w2.shape(), w2.dtype(), w2.layout()}});
  EXPECT_EQ(d.inputs[0], h.layout());
  EXPECT_EQ(d.inputs[1], w2.layout());
  const DTensor y = matmul(h, w2);  // row-parallel
  EXPECT_EQ(y.layout(), layout_of({"batch", "unsharded"}, mesh, {{"model", ReduceOp::kSum}}));
  rt.synchronize();
  EXPECT_EQ(relayout_stats().collectives, before) << "a collective ran between the matmuls";

  const Mesh one = Mesh::create_on_devices({{"single", 1}}, {rt.device(0).name()});
  const auto on_one = [&](const Tensor& t) {
    return copy_to_mesh(t, Layout::replicated(one, 2), rt);
  };
  const Tensor want = to_host(matmul(matmul(on_one(hx), on_one(hw1)), on_one(hw2)));
  EXPECT_TRUE(allclose(to_host(y), want, 1e-12, 1e-12));
}

TEST(EinsumRule, SummedLetterShardedGivesPartialAndKeepsOtherSharding) {
  const Mesh& m = mesh22();
  OpAttrs attrs;
  attrs.equation = "ij,k->k";
  const Layout a = layout_of({"x", "unsharded"}, m), b = layout_of({"y"}, m);
  expect_decision(plan_op("einsum", {spec({4, 3}, a), spec({5}, b)}, attrs), a, b,
                  layout_of({"y"}, m, {{"x", ReduceOp::kSum}}));
}

// ---- random layouts against a single device --------------------------------------------------

TEST(MatmulRandomLayouts, MatchesSingleDevice) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(5);
  int seed = 0;
  for (int c = 0; c < 10; ++c) {
    for (const Mesh& mesh : meshes()) {
      const bool ta = rng() % 2 == 0, tb = rng() % 2 == 0;
      const int64_t m = 1 + rng() % 6, k = 1 + rng() % 6, n = 1 + rng() % 6;
      const int batch_a = static_cast<int>(rng() % 2), batch_b = static_cast<int>(rng() % 2);
      std::vector<int64_t> da, db;
      const int64_t bsize = 1 + rng() % 4;
      if (batch_a) da.push_back(bsize);
      if (batch_b) db.push_back(bsize);
      for (int64_t v : ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k})
        da.push_back(v);
      for (int64_t v : tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n})
        db.push_back(v);
      const Shape sa(da), sb(db);
      const std::vector<Layout> layouts{random_op_layout(mesh, sa.rank(), rng, true),
                                        random_op_layout(mesh, sb.rank(), rng, true)};
      const OpFn fn = [&](const std::vector<DTensor>& in) { return matmul(in[0], in[1], ta, tb); };
      SCOPED_TRACE(
          fmt::format("matmul {} x {} ta={} tb={}", sa.to_string(), sb.to_string(), ta, tb));
      expect_matches_single_device(
          fn, {random_host(sa, DType::kF64, ++seed), random_host(sb, DType::kF64, ++seed)}, layouts,
          rt, rng);
    }
  }
}

TEST(EinsumRandomLayouts, MatchesSingleDevice) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(9);
  const std::vector<std::string> equations = {
      "ij,jk->ik",    "ij,kj->ki",   "bij,bjk->bik", "ij,ij->",     "i,j->ij",  "ij,k->k",
      "bij,bkj->bki", "ijk,jl->ilk", "ij,jk->",      "abc,cd->dba", "ij,ji->i", "ik,jk"};
  int seed = 0;
  for (int c = 0; c < 8; ++c) {
    for (const Mesh& mesh : meshes()) {
      const std::string& eq = equations[rng() % equations.size()];
      std::vector<int64_t> size(128);
      for (char l = 'a'; l <= 'z'; ++l) size[static_cast<size_t>(l)] = 1 + rng() % 5;
      const std::string lhs = eq.substr(0, eq.find("->"));
      const std::string la = lhs.substr(0, lhs.find(','));
      const std::string lb = lhs.substr(lhs.find(',') + 1);
      std::vector<int64_t> da, db;
      for (char l : la) da.push_back(size[static_cast<size_t>(l)]);
      for (char l : lb) db.push_back(size[static_cast<size_t>(l)]);
      const Shape sa(da), sb(db);
      const std::vector<Layout> layouts{random_op_layout(mesh, sa.rank(), rng, true),
                                        random_op_layout(mesh, sb.rank(), rng, true)};
      const OpFn fn = [&](const std::vector<DTensor>& in) { return einsum(eq, in[0], in[1]); };
      SCOPED_TRACE(fmt::format("einsum {} {} x {}", eq, sa.to_string(), sb.to_string()));
      expect_matches_single_device(
          fn, {random_host(sa, DType::kF64, ++seed), random_host(sb, DType::kF64, ++seed)}, layouts,
          rt, rng);
    }
  }
}

TEST(MatmulRandomLayouts, ChainOfMatmulsWithPartialIntermediatesMatchesSingleDevice) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(17);
  for (int c = 0; c < 8; ++c) {
    for (const Mesh& mesh : meshes()) {
      const std::vector<Layout> layouts{random_op_layout(mesh, 2, rng, true),
                                        random_op_layout(mesh, 2, rng, true),
                                        random_op_layout(mesh, 2, rng, true)};
      const OpFn fn = [](const std::vector<DTensor>& in) {
        return matmul(matmul(in[0], in[1]), in[2], false, true);
      };
      expect_matches_single_device(
          fn,
          {random_host({5, 4}, DType::kF64, 3 * c), random_host({4, 7}, DType::kF64, 3 * c + 1),
           random_host({3, 7}, DType::kF64, 3 * c + 2)},
          layouts, rt, rng);
    }
  }
}

// ---- gradients -------------------------------------------------------------------------------

TEST(MatmulVjp, MatchesFiniteDifferencesWithTransposesAndBatch) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(21);
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  const std::vector<Case> cases = {
      {{3, 4}, {4, 2}, false, false},      {{4, 3}, {4, 2}, true, false},
      {{3, 4}, {2, 4}, false, true},       {{4, 3}, {2, 4}, true, true},
      {{2, 3, 2}, {2, 3}, false, false},   {{3, 2}, {2, 3, 2}, true, false},
      {{2, 2, 3}, {2, 3, 2}, false, false}};
  int seed = 50;
  for (const Case& c : cases) {
    for (const Mesh& mesh : meshes()) {
      const std::vector<Layout> layouts{random_op_layout(mesh, c.a.rank(), rng, true),
                                        random_op_layout(mesh, c.b.rank(), rng, true)};
      const OpFn fn = [&](const std::vector<DTensor>& in) {
        return matmul(in[0], in[1], c.ta, c.tb);
      };
      SCOPED_TRACE(
          fmt::format("{} x {} ta={} tb={}", c.a.to_string(), c.b.to_string(), c.ta, c.tb));
      expect_vjp_matches_finite_differences(
          fn, {random_host(c.a, DType::kF64, ++seed), random_host(c.b, DType::kF64, ++seed)},
          layouts, rt, rng);
    }
  }
}

TEST(EinsumVjp, MatchesFiniteDifferencesIncludingSummedLetters) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(23);
  struct Case {
    std::string eq;
    Shape a, b;
  };
  const std::vector<Case> cases = {{"ij,jk->ki", {2, 3}, {3, 2}},
                                   {"ij,k->k", {2, 3}, {3}},
                                   {"bij,bjk->bik", {2, 2, 3}, {2, 3, 2}},
                                   {"i,j->ij", {3}, {2}},
                                   {"ij,ij->", {2, 3}, {2, 3}},
                                   {"abc,cd->dba", {2, 1, 3}, {3, 2}}};
  int seed = 80;
  for (const Case& c : cases) {
    for (const Mesh& mesh : meshes()) {
      const std::vector<Layout> layouts{random_op_layout(mesh, c.a.rank(), rng, true),
                                        random_op_layout(mesh, c.b.rank(), rng, true)};
      const OpFn fn = [&](const std::vector<DTensor>& in) { return einsum(c.eq, in[0], in[1]); };
      SCOPED_TRACE(c.eq);
      expect_vjp_matches_finite_differences(
          fn, {random_host(c.a, DType::kF64, ++seed), random_host(c.b, DType::kF64, ++seed)},
          layouts, rt, rng);
    }
  }
}

TEST(MatmulVjp, MegatronGradientsKeepTheWeightLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"batch", 2}, {"model", 2}});
  const DTensor x =
      copy_to_mesh(random_host({4, 3}, DType::kF64, 1), Layout({"batch", "unsharded"}, mesh), rt);
  const DTensor w1 =
      copy_to_mesh(random_host({3, 4}, DType::kF64, 2), Layout({"unsharded", "model"}, mesh), rt);
  const DTensor w2 =
      copy_to_mesh(random_host({4, 2}, DType::kF64, 3), Layout({"model", "unsharded"}, mesh), rt);
  const auto [loss, grads] = value_and_grad(
      [](const std::vector<DTensor>& p) { return reduce_sum(matmul(matmul(p[0], p[1]), p[2])); },
      {x, w1, w2});
  EXPECT_EQ(grads[1].layout(), w1.layout());
  EXPECT_EQ(grads[2].layout(), w2.layout());
  // d/dw1 sum(x w1 w2) = x^T 1 w2^T; d/dw2 = (x w1)^T 1.
  const Tensor hx = to_host(x), hw1 = to_host(w1), hw2 = to_host(w2);
  const Tensor g1 = to_host(grads[1]);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      double xs = 0, ws = 0;
      for (int64_t r = 0; r < 4; ++r) xs += hx.at({r, i});
      for (int64_t c = 0; c < 2; ++c) ws += hw2.at({j, c});
      EXPECT_NEAR(g1.at({i, j}), xs * ws, 1e-12);
    }
  }
}

// ---- errors ----------------------------------------------------------------------------------

TEST(MatmulErrors, ShapesAndDtypes) {
  Runtime rt({.num_cpu_devices = 4});
  const DTensor v = put_replicated({1, 2}, {2}, rt);
  const DTensor a = put_replicated({1, 2, 3, 4, 5, 6}, {2, 3}, rt);
  const DTensor b = put_replicated({1, 2, 3, 4}, {2, 2}, rt);
  EXPECT_TESSEL_ERROR(matmul(v, b), ErrorCode::kInvalidArgument, "rank >= 2");
  EXPECT_TESSEL_ERROR(matmul(a, b), ErrorCode::kInvalidArgument, "inner dimensions do not match");
  EXPECT_TESSEL_ERROR(matmul(a, b), ErrorCode::kInvalidArgument, "[2,3]");
  const DTensor p = put_replicated(std::vector<double>(12, 1), {2, 2, 3}, rt);
  const DTensor q = put_replicated(std::vector<double>(18, 1), {3, 3, 2}, rt);
  EXPECT_TESSEL_ERROR(matmul(p, q), ErrorCode::kInvalidArgument, "batch dimensions");
  const DTensor q1 = put_replicated(std::vector<double>(6, 1), {1, 3, 2}, rt);
  EXPECT_TESSEL_ERROR(matmul(p, q1), ErrorCode::kInvalidArgument, "size 1 does not");
  EXPECT_TESSEL_ERROR(matmul(b, put_replicated({1, 2, 3, 4}, {2, 2}, rt, DType::kF32)),
                      ErrorCode::kInvalidArgument, "different dtypes");
  const DTensor i = copy_to_mesh(Tensor::zeros({2, 2}, DType::kI32), b.layout(), rt);
  EXPECT_TESSEL_ERROR(matmul(i, i), ErrorCode::kUnimplemented, "i32");
}

TEST(EinsumErrors, LettersAndEquations) {
  Runtime rt({.num_cpu_devices = 4});
  const DTensor a = put_replicated({1, 2, 3, 4, 5, 6}, {2, 3}, rt);
  const DTensor b = put_replicated({1, 2, 3, 4}, {2, 2}, rt);
  const DTensor c = put_replicated({1, 2, 3, 4, 5, 6}, {3, 2}, rt);
  EXPECT_TESSEL_ERROR(einsum("ij,jk->iz", a, c), ErrorCode::kInvalidArgument,
                      "output letter 'z' of 'ij,jk->iz' appears in neither operand");
  EXPECT_TESSEL_ERROR(einsum("ij,jk->ik", a, b), ErrorCode::kInvalidArgument,
                      "letter 'j' of 'ij,jk->ik' is 3 in operand 0");
  EXPECT_TESSEL_ERROR(einsum("ijk,jk->i", a, b), ErrorCode::kInvalidArgument,
                      "operand 0 of 'ijk,jk->i' has 3 letters");
  EXPECT_TESSEL_ERROR(einsum("ii,jk->i", b, b), ErrorCode::kInvalidArgument,
                      "letter 'i' repeats in operand 0");
  EXPECT_TESSEL_ERROR(einsum("...j,jk->k", a, b), ErrorCode::kInvalidArgument, "ellipsis");
  EXPECT_TESSEL_ERROR(einsum("ij,jk,kl->il", a, b), ErrorCode::kInvalidArgument,
                      "exactly two operands");
  EXPECT_TESSEL_ERROR(einsum("ij", a, b), ErrorCode::kInvalidArgument, "exactly two operands");
  EXPECT_TESSEL_ERROR(einsum("i1,jk->i", a, b), ErrorCode::kInvalidArgument,
                      "invalid character '1'");
  EXPECT_TESSEL_ERROR(einsum("ij,jk->ii", b, b), ErrorCode::kInvalidArgument,
                      "output letter 'i' repeats");
  EXPECT_TESSEL_ERROR(einsum("ij,jk->i->k", b, b), ErrorCode::kInvalidArgument,
                      "more than one '->'");
}

}  // namespace
}  // namespace tessel
