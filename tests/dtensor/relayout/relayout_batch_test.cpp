// relayout_batch's fused all-gathers and reduce-scatters (fused_gather_scatter.h): several
// tensors whose plans are one all_gather (or one reduce_scatter) over the same mesh dimensions
// move in one collective, with the values relayout() gives each of them alone (its block
// transfers and reduce_scatter_boxes, another code path), uneven shards included; on a tape the
// batch is differentiable and the gathers' gradients are reduce-scattered together.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/relayout.h"
#include "testing/op_check.h"

namespace tessel {
namespace {

Layout partial_over(const std::vector<std::string>& specs, const Mesh& mesh,
                    const std::string& dim) {
  const Layout base(specs, mesh);
  return Layout::create(base.type(), base.sharding_specs(), mesh,
                        std::vector<PartialDim>{PartialDim{dim, ReduceOp::kSum}});
}

struct Case {
  Shape shape;
  Layout from, to;
};

// Runs `cases` through relayout_batch and one by one: the same layouts and values, and the batch
// in `collectives` collectives.
void expect_batch_equals_one_by_one(const std::vector<Case>& cases, Runtime& rt,
                                    int64_t collectives) {
  std::mt19937 rng(7);
  std::vector<DTensor> inputs;
  std::vector<Layout> layouts;
  std::vector<Tensor> hosts;
  for (size_t i = 0; i < cases.size(); ++i) {
    hosts.push_back(testing::random_host(cases[i].shape, DType::kF32, 10 + i));
    inputs.push_back(testing::distribute(hosts.back(), cases[i].from, rt, rng));
    layouts.push_back(cases[i].to);
  }
  const RelayoutStats before = relayout_stats();
  const std::vector<DTensor> batch = relayout_batch(inputs, layouts);
  const RelayoutStats after = relayout_stats();
  EXPECT_EQ(after.collectives - before.collectives, collectives);
  int64_t bytes = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].from.to_string() + " -> " + cases[i].to.to_string());
    bytes += plan_relayout(cases[i].shape, cases[i].from, cases[i].to, DType::kF32).bytes_total();
    const DTensor alone = relayout(inputs[i], cases[i].to);
    EXPECT_EQ(batch[i].layout(), cases[i].to);
    EXPECT_EQ(batch[i].layout(), alone.layout());
    // A reduction's sums may round differently in another order: compare to the host value.
    const std::vector<double> want = hosts[i].to_doubles();
    const std::vector<double> got = testing::values(batch[i]);
    const std::vector<double> one = testing::values(alone);
    ASSERT_EQ(got.size(), want.size());
    for (size_t e = 0; e < want.size(); ++e) {
      EXPECT_NEAR(got[e], want[e], 1e-5) << "element " << e;
      EXPECT_NEAR(got[e], one[e], 1e-5) << "element " << e;
    }
  }
  EXPECT_EQ(after.bytes - before.bytes, bytes);
}

TEST(RelayoutBatch, AllGathersOverOneDimensionAreOneCollective) {
  Runtime rt({.num_cpu_devices = 4});
  for (const Mesh& mesh : {Mesh::create({{"x", 2}, {"y", 2}}), Mesh::create({{"x", 4}, {"y", 1}})}) {
    SCOPED_TRACE(mesh.to_string());
    // Uneven shards (5, 7 and 9 over 2 or 4), sharded on either axis, and y's sharding kept.
    expect_batch_equals_one_by_one(
        {{Shape{5, 3}, Layout({"x", "unsharded"}, mesh), Layout({"unsharded", "unsharded"}, mesh)},
         {Shape{7}, Layout({"x"}, mesh), Layout({"unsharded"}, mesh)},
         {Shape{2, 9}, Layout({"unsharded", "x"}, mesh), Layout({"unsharded", "unsharded"}, mesh)},
         {Shape{6, 5}, Layout({"x", "y"}, mesh), Layout({"unsharded", "y"}, mesh)}},
        rt, 1);
  }
}

TEST(RelayoutBatch, ReduceScattersOverOneDimensionAreOneCollective) {
  Runtime rt({.num_cpu_devices = 4});
  for (const Mesh& mesh : {Mesh::create({{"x", 2}, {"y", 2}}), Mesh::create({{"x", 4}, {"y", 1}})}) {
    SCOPED_TRACE(mesh.to_string());
    expect_batch_equals_one_by_one(
        {{Shape{5, 3}, partial_over({"unsharded", "unsharded"}, mesh, "x"),
          Layout({"x", "unsharded"}, mesh)},
         {Shape{7}, partial_over({"unsharded"}, mesh, "x"), Layout({"x"}, mesh)},
         {Shape{3, 9}, partial_over({"unsharded", "unsharded"}, mesh, "x"),
          Layout({"unsharded", "x"}, mesh)},
         {Shape{6, 5}, partial_over({"unsharded", "y"}, mesh, "x"), Layout({"x", "y"}, mesh)}},
        rt, 1);
  }
}

TEST(RelayoutBatch, MixedKindsFuseByKindAndTheRestRunsAlone) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  // Two gathers over x (one collective), two over y (one), two reduce-scatters over x (one), an
  // all_to_all and a gather alone over (x, y) (one each), an unchanged tensor (none).
  expect_batch_equals_one_by_one(
      {{Shape{5, 3}, Layout({"x", "unsharded"}, mesh), Layout({"unsharded", "unsharded"}, mesh)},
       {Shape{4, 4}, Layout({"y", "unsharded"}, mesh), Layout({"unsharded", "unsharded"}, mesh)},
       {Shape{7}, Layout({"x"}, mesh), Layout({"unsharded"}, mesh)},
       {Shape{3}, Layout({"y"}, mesh), Layout({"unsharded"}, mesh)},
       {Shape{5}, partial_over({"unsharded"}, mesh, "x"), Layout({"x"}, mesh)},
       {Shape{6, 2}, partial_over({"unsharded", "unsharded"}, mesh, "x"),
        Layout({"x", "unsharded"}, mesh)},
       {Shape{4, 6}, Layout({"x", "unsharded"}, mesh), Layout({"unsharded", "x"}, mesh)},
       {Shape{4, 6}, Layout({"x", "y"}, mesh), Layout({"unsharded", "unsharded"}, mesh)},
       {Shape{3, 3}, Layout({"x", "unsharded"}, mesh), Layout({"x", "unsharded"}, mesh)}},
      rt, 5);
}

TEST(RelayoutBatch, IsDifferentiableAndTheGathersGradientsAreReduceScatteredTogether) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  // Parameters stored sharded over x (uneven: 5 rows as 2, 1, 1, 1; 2 columns as 1, 1, 0, 0),
  // gathered for use as fsdp gathers them.
  const std::vector<Shape> shapes{Shape{5, 3}, Shape{7, 2}, Shape{6, 2}};
  const std::vector<Layout> stored{Layout({"x", "unsharded"}, mesh),
                                   Layout({"x", "unsharded"}, mesh),
                                   Layout({"unsharded", "x"}, mesh)};
  std::vector<Layout> compute;
  std::vector<DTensor> params, inputs;
  std::vector<Tensor> input_hosts;
  for (size_t i = 0; i < shapes.size(); ++i) {
    compute.push_back(Layout::replicated(mesh, 2));
    params.push_back(
        copy_to_mesh(testing::random_host(shapes[i], DType::kF32, 20 + i), stored[i], rt));
    input_hosts.push_back(testing::random_host(Shape{8, shapes[i][0]}, DType::kF32, 30 + i));
    inputs.push_back(copy_to_mesh(input_hosts.back(), Layout({"x", "unsharded"}, mesh), rt));
  }
  // Data parallel: each device multiplies its rows of the inputs, so the gradients reaching the
  // gathered copies are Partial sums over x, reduce-scattered back to the shards.
  const auto loss_of = [&](const std::vector<DTensor>& gathered, size_t first = 0) {
    DTensor total;
    for (size_t i = 0; i < gathered.size(); ++i) {
      const DTensor term = reduce_sum(matmul(inputs[first + i], gathered[i]));
      total = total.defined() ? add(total, term) : term;
    }
    return total;
  };
  const auto backward = [&](bool batched, RelayoutStats& moved) {
    GradientTape tape;
    for (const DTensor& p : params) tape.watch(p);
    DTensor loss;
    if (batched) {
      loss = loss_of(relayout_batch(params, compute));
    } else {
      // Each gathered at its use: the tape meets their relayouts apart, one collective each.
      for (size_t i = 0; i < params.size(); ++i) {
        const DTensor term = loss_of({relayout(params[i], compute[i])}, i);
        loss = loss.defined() ? add(loss, term) : term;
      }
    }
    const RelayoutStats before = relayout_stats();
    std::vector<DTensor> grads = tape.gradient(loss, params);
    const RelayoutStats after = relayout_stats();
    moved = RelayoutStats{after.collectives - before.collectives, after.bytes - before.bytes, 0};
    return grads;
  };
  RelayoutStats alone_moved, batch_moved;
  const std::vector<DTensor> alone = backward(false, alone_moved);
  const std::vector<DTensor> batch = backward(true, batch_moved);
  for (size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(batch[i].layout(), stored[i]);
    // d sum(x w) / d w[k][j] = the sum of x's column k.
    const std::vector<double> x = input_hosts[i].to_doubles();
    const std::vector<double> got = testing::values(batch[i]);
    const std::vector<double> one = testing::values(alone[i]);
    const int64_t rows = shapes[i][0], cols = shapes[i][1];
    for (int64_t k = 0; k < rows; ++k) {
      double want = 0;
      for (int64_t r = 0; r < 8; ++r) want += x[static_cast<size_t>(r * rows + k)];
      for (int64_t j = 0; j < cols; ++j) {
        EXPECT_NEAR(got[static_cast<size_t>(k * cols + j)], want, 1e-5);
        EXPECT_NEAR(one[static_cast<size_t>(k * cols + j)], want, 1e-5);
      }
    }
  }
  // The same bytes in one collective instead of one per parameter.
  EXPECT_EQ(alone_moved.collectives, 3);
  EXPECT_EQ(batch_moved.collectives, 1);
  EXPECT_EQ(batch_moved.bytes, alone_moved.bytes);
}

}  // namespace
}  // namespace tessel
