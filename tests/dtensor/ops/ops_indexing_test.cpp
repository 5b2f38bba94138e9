// embedding_lookup (ops.h): exact values, the sharding rule (ids keep their sharding, a
// row-sharded table does a masked local lookup giving Partial(sum) over its row mesh dims, no
// gather of the table) against single-device runs over random layouts, the table's gradient (a
// scatter-add in the table's layout) against finite differences, and every error (out-of-range
// ids at the next sync).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "testing/expect_error.h"
#include "testing/op_check.h"

namespace tessel {
namespace {

using testing::expect_matches_single_device;
using testing::expect_vjp_matches_finite_differences;
using testing::random_host;
using testing::random_op_layout;

constexpr ErrorCode kInvalid = ErrorCode::kInvalidArgument;

std::vector<Mesh> test_meshes() {
  return {Mesh::create({{"x", 4}}), Mesh::create({{"x", 2}, {"y", 2}}), Mesh::create({{"x", 3}})};
}

Layout layout_of(const Mesh& mesh, const std::vector<std::string>& specs) {
  return Layout(specs, mesh);
}

// table[v][d] = 10 v + d
Tensor table_host(int64_t vocab, int64_t dim) {
  std::vector<double> v;
  for (int64_t r = 0; r < vocab; ++r) {
    for (int64_t c = 0; c < dim; ++c) v.push_back(static_cast<double>(10 * r + c));
  }
  return Tensor::from_vector<double>(v, Shape{vocab, dim});
}

TEST(IndexingOps, EmbeddingLookupExactValuesReplicatedAndRowShardedTable) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor table = table_host(5, 2);
  const std::vector<double> want = {0, 1, 40, 41, 10, 11, 10, 11};
  for (const auto& specs : std::vector<std::vector<std::string>>{{"unsharded", "unsharded"},
                                                                 {"x", "unsharded"},
                                                                 {"x", "y"},
                                                                 {"unsharded", "y"},
                                                                 {"x+y", "unsharded"}}) {
    for (DType idt : {DType::kI32, DType::kI64}) {
      const Tensor ids = Tensor::from_vector<int64_t>({0, 4, 1, 1}, Shape{2, 2}).astype(idt);
      const DTensor out =
          embedding_lookup(copy_to_mesh(table, layout_of(mesh, specs), rt),
                           copy_to_mesh(ids, layout_of(mesh, {"y", "unsharded"}), rt));
      EXPECT_EQ(out.shape(), (Shape{2, 2, 2}));
      EXPECT_EQ(to_host(out).to_vector<double>(), want) << specs[0] << "," << specs[1];
    }
  }
}

TEST(IndexingOps, RowShardedTableGivesPartialSumOverItsRowMeshDimsWithoutGatheringIt) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout table = layout_of(mesh, {"x", "unsharded"});
  const ShardingDecision d = plan_op(
      "embedding_lookup", {{Shape{10, 4}, DType::kF32, table},
                           {Shape{8, 3}, DType::kI64, layout_of(mesh, {"y", "unsharded"})}});
  EXPECT_EQ(d.inputs[0], table);
  EXPECT_EQ(d.inputs[1], layout_of(mesh, {"y", "unsharded"}));
  EXPECT_EQ(d.output,
            layout_of(mesh, {"y", "unsharded", "unsharded"}).with_partial({{"x", ReduceOp::kSum}}));
  // Column-sharded table, batch-sharded ids: no communication, no Partial.
  const ShardingDecision c =
      plan_op("embedding_lookup", {{Shape{10, 4}, DType::kF32, layout_of(mesh, {"unsharded", "y"})},
                                   {Shape{8}, DType::kI64, layout_of(mesh, {"x"})}});
  EXPECT_EQ(c.inputs[0], layout_of(mesh, {"unsharded", "y"}));
  EXPECT_EQ(c.inputs[1], layout_of(mesh, {"x"}));
  EXPECT_EQ(c.output, layout_of(mesh, {"x", "y"}));
  // ids sharded over the table's row mesh dim: the ids (not the table) are replicated over it.
  const ShardingDecision r = plan_op(
      "embedding_lookup",
      {{Shape{10, 4}, DType::kF32, table}, {Shape{8}, DType::kI64, layout_of(mesh, {"x+y"})}});
  EXPECT_EQ(r.inputs[0], table);
  EXPECT_EQ(r.inputs[1], layout_of(mesh, {"y"}));
  EXPECT_EQ(r.output, layout_of(mesh, {"y", "unsharded"}).with_partial({{"x", ReduceOp::kSum}}));
  // A Partial(sum) table stays Partial; a Partial(max) row-sharded table is reduced first.
  const Layout psum = layout_of(mesh, {"x", "unsharded"}).with_partial({{"y", ReduceOp::kSum}});
  const ShardingDecision ps =
      plan_op("embedding_lookup",
              {{Shape{10, 4}, DType::kF32, psum}, {Shape{8}, DType::kI64, layout_of(mesh, {"y"})}});
  EXPECT_EQ(ps.inputs[0], psum);
  EXPECT_EQ(ps.inputs[1], layout_of(mesh, {"unsharded"}));
  EXPECT_EQ(ps.output, layout_of(mesh, {"unsharded", "unsharded"})
                           .with_partial({{"x", ReduceOp::kSum}, {"y", ReduceOp::kSum}}));
  const Layout pmax = layout_of(mesh, {"x", "unsharded"}).with_partial({{"y", ReduceOp::kMax}});
  const ShardingDecision pm =
      plan_op("embedding_lookup",
              {{Shape{10, 4}, DType::kF32, pmax}, {Shape{8}, DType::kI64, layout_of(mesh, {"y"})}});
  EXPECT_EQ(pm.inputs[0], layout_of(mesh, {"x", "unsharded"}));
  EXPECT_EQ(pm.output, layout_of(mesh, {"y", "unsharded"}).with_partial({{"x", ReduceOp::kSum}}));
}

TEST(IndexingOps, LookupGradRuleGivesTheTablesShardingAndPartialSumOverTheIdsMeshDims) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  OpAttrs attrs;
  attrs.vocab_size = 10;
  attrs.layout = layout_of(mesh, {"x", "unsharded"});
  const ShardingDecision d =
      plan_op("embedding_lookup_grad",
              {{Shape{8}, DType::kI64, layout_of(mesh, {"y"})},
               {Shape{8, 4}, DType::kF32, layout_of(mesh, {"y", "unsharded"})}},
              attrs);
  EXPECT_EQ(d.inputs[0], layout_of(mesh, {"y"}));
  EXPECT_EQ(d.inputs[1], layout_of(mesh, {"y", "unsharded"}));
  EXPECT_EQ(d.output, layout_of(mesh, {"x", "unsharded"}).with_partial({{"y", ReduceOp::kSum}}));
}

TEST(IndexingOps, EmbeddingLookupMatchesSingleDeviceOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(31);
  const std::vector<Mesh> meshes = test_meshes();
  const std::vector<Shape> id_shapes = {Shape{6}, Shape{3, 5}, Shape{7}, Shape{0}, Shape{2, 1, 3}};
  const std::vector<std::pair<int64_t, int64_t>> tables = {{7, 3}, {10, 4}, {5, 1}, {3, 5}};
  for (int t = 0; t < 30; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Shape& ids_shape = id_shapes[static_cast<size_t>(t) % id_shapes.size()];
    const auto [vocab, dim] = tables[static_cast<size_t>(t) % tables.size()];
    const Tensor table = random_host(Shape{vocab, dim}, t % 2 ? DType::kF64 : DType::kF32, 100 + t);
    const Tensor ids = Tensor::random_uniform(ids_shape, t % 3 ? DType::kI64 : DType::kI32, 200 + t,
                                              0, static_cast<double>(vocab));
    expect_matches_single_device(
        [](const std::vector<DTensor>& in) { return embedding_lookup(in[0], in[1]); }, {table, ids},
        {random_op_layout(mesh, 2, rng, true), random_op_layout(mesh, ids_shape.rank(), rng)}, rt,
        rng, 1e-6);
  }
}

TEST(IndexingOps, EmbeddingVjpWithRespectToTableMatchesFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(32);
  const std::vector<Mesh> meshes = test_meshes();
  for (int t = 0; t < 9; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Tensor table = random_host(Shape{5, 3}, DType::kF64, 300 + t);
    // Repeated ids: the scatter adds their gradients.
    const Tensor ids = Tensor::from_vector<int64_t>({4, 0, 4, 2, 1, 4}, Shape{2, 3});
    expect_vjp_matches_finite_differences(
        [](const std::vector<DTensor>& in) { return embedding_lookup(in[0], in[1]); }, {table, ids},
        {random_op_layout(mesh, 2, rng, true), random_op_layout(mesh, 2, rng)}, rt, rng);
  }
}

TEST(IndexingOps, TableGradientIsAScatterAddInTheTablesLayout) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor table = copy_to_mesh(table_host(5, 2), layout_of(mesh, {"x", "unsharded"}), rt);
  const DTensor ids = copy_to_mesh(Tensor::from_vector<int32_t>({3, 0, 3, 3}, Shape{4}),
                                   layout_of(mesh, {"y"}), rt);
  const auto [value, grads] = value_and_grad(
      [&](const std::vector<DTensor>& p) { return reduce_sum(embedding_lookup(p[0], ids)); },
      {table});
  EXPECT_EQ(grads[0].layout(), table.layout());
  EXPECT_EQ(to_host(grads[0]).to_vector<double>(),
            (std::vector<double>{1, 1, 0, 0, 0, 0, 3, 3, 0, 0}));
  EXPECT_DOUBLE_EQ(to_host(value).to_vector<double>()[0], 3 * (30 + 31) + 0 + 1);
}

TEST(IndexingOps, ErrorsAtDispatch) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const auto put = [&](const Tensor& t) {
    return copy_to_mesh(t, Layout::replicated(mesh, t.rank()), rt);
  };
  const DTensor table = put(table_host(5, 2));
  const DTensor ids = put(Tensor::zeros(Shape{3}, DType::kI64));
  EXPECT_TESSEL_ERROR(embedding_lookup(table, put(Tensor::zeros(Shape{3}, DType::kF32))), kInvalid,
                      "embedding_lookup: ids must be i32 or i64, got f32");
  EXPECT_TESSEL_ERROR(embedding_lookup(put(Tensor::zeros(Shape{5}, DType::kF32)), ids), kInvalid,
                      "embedding_lookup: the table must have rank 2 ([vocab, dim]), got shape [5]");
  EXPECT_TESSEL_ERROR(embedding_lookup(put(Tensor::zeros(Shape{5, 2}, DType::kI32)), ids), kInvalid,
                      "the table must be f32 or f64, got i32");
}

TEST(IndexingOps, LookupGradRejectsMissingAttrsAndMismatchedShapes) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const auto put = [&](const Tensor& t) {
    return copy_to_mesh(t, Layout::replicated(mesh, t.rank()), rt);
  };
  const DTensor ids = put(Tensor::zeros(Shape{3}, DType::kI64));
  const DTensor g = put(Tensor::zeros(Shape{3, 2}, DType::kF64));
  EXPECT_TESSEL_ERROR(call_op("embedding_lookup_grad", {ids, g}), kInvalid,
                      "embedding_lookup_grad: needs the vocabulary size in attrs.vocab_size and "
                      "the table's layout");
  OpAttrs attrs;
  attrs.vocab_size = 5;
  attrs.layout = Layout::replicated(mesh, 2);
  EXPECT_TESSEL_ERROR(
      call_op("embedding_lookup_grad", {ids, put(Tensor::zeros(Shape{4, 2}, DType::kF64))}, attrs),
      kInvalid, "gradient shape [4,2] does not match ids shape [3] plus [dim]");
  EXPECT_TESSEL_ERROR(call_op("embedding_lookup_grad", {g, g}, attrs), kInvalid,
                      "ids must be i32 or i64, got f64");
  EXPECT_TESSEL_ERROR(
      call_op("embedding_lookup_grad", {ids, put(Tensor::zeros(Shape{3, 2}, DType::kI32))}, attrs),
      kInvalid, "the gradient must be f32 or f64, got i32");
}

// Kernels run asynchronously: an id outside [0, vocab) is found by the kernel and reported at the
// next sync point, naming the op — with a replicated and with a row-sharded table (where the id
// lies in no device's rows).
TEST(IndexingOps, OutOfRangeIdFailsAtTheNextSyncNamingTheOp) {
  for (const char* rows : {"unsharded", "x"}) {
    for (int64_t bad : {5, -2}) {
      Runtime rt({.num_cpu_devices = 4});
      const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
      const DTensor table =
          copy_to_mesh(table_host(5, 2), layout_of(mesh, {rows, "unsharded"}), rt);
      const DTensor ids = copy_to_mesh(Tensor::from_vector<int64_t>({1, bad}, Shape{2}),
                                       layout_of(mesh, {"y"}), rt);
      DTensor out;
      ASSERT_NO_THROW(out = embedding_lookup(table, ids));
      try {
        to_host(out);
        ADD_FAILURE() << "id " << bad << " was not reported";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), kInvalid) << e.what();
        const std::string what = e.what();
        EXPECT_NE(what.find("op 'embedding_lookup'"), std::string::npos) << what;
        EXPECT_NE(what.find("id " + std::to_string(bad) + " is not in [0, 5)"), std::string::npos)
            << what;
      }
    }
  }
}

}  // namespace
}  // namespace tessel
