// The nn ops (ops.h): softmax, log_softmax and sparse_softmax_cross_entropy_with_logits over the
// last axis — exact values, the sharding rule (class axis gathered, batch axes kept, Partial
// reduced, labels in the logits' batch sharding) against single-device runs over random layouts,
// VJPs against finite differences, and every error (label out of range at the next sync).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include <fmt/format.h>

#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "testing/expect_error.h"
#include "testing/op_check.h"

namespace tessel {
namespace {

using testing::distribute;
using testing::expect_matches_single_device;
using testing::expect_vjp_matches_finite_differences;
using testing::random_host;
using testing::random_op_layout;

std::vector<Mesh> test_meshes() {
  return {Mesh::create({{"x", 4}}), Mesh::create({{"x", 2}, {"y", 2}}), Mesh::create({{"x", 3}})};
}

Layout layout_of(const Mesh& mesh, const std::vector<std::string>& specs) {
  return Layout(specs, mesh);
}

TEST(NnOps, SoftmaxExactValuesOnSmallInput) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor x = Tensor::from_vector<double>({1, 2, 3, 0, 0, 0}, Shape{2, 3});
  const Tensor got = to_host(softmax(copy_to_mesh(x, layout_of(mesh, {"x", "unsharded"}), rt)));
  const double z = std::exp(-2.0) + std::exp(-1.0) + 1.0;
  const std::vector<double> want = {
      std::exp(-2.0) / z, std::exp(-1.0) / z, 1.0 / z, 1.0 / 3, 1.0 / 3, 1.0 / 3};
  ASSERT_EQ(got.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(got.data<double>()[i], want[static_cast<size_t>(i)], 1e-15);
}

TEST(NnOps, SoftmaxF32AndLargeLogitsStayFinite) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  // exp(1000) overflows without subtracting the row max.
  const Tensor x = Tensor::from_vector<float>({1000, 1001, -1000, -1001}, Shape{2, 2});
  const Tensor s = to_host(softmax(copy_to_mesh(x, layout_of(mesh, {"x", "unsharded"}), rt)));
  const Tensor l = to_host(log_softmax(copy_to_mesh(x, layout_of(mesh, {"x", "unsharded"}), rt)));
  const float a = 1.0f / (1.0f + std::exp(1.0f));
  const std::vector<float> want_s = {a, 1 - a, 1 - a, a};
  const float lse = std::log(1.0f + std::exp(-1.0f));
  const std::vector<float> want_l = {-1 - lse, -lse, -lse, -1 - lse};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(s.data<float>()[i], want_s[static_cast<size_t>(i)], 1e-6);
    EXPECT_NEAR(l.data<float>()[i], want_l[static_cast<size_t>(i)], 1e-5);
  }
  const Tensor labels = Tensor::from_vector<int32_t>({0, 1}, Shape{2});
  const Tensor loss = to_host(sparse_softmax_cross_entropy_with_logits(
      copy_to_mesh(labels, layout_of(mesh, {"x"}), rt),
      copy_to_mesh(x, layout_of(mesh, {"unsharded", "x"}), rt)));
  EXPECT_NEAR(loss.data<float>()[0], 1 + lse, 1e-5);
  EXPECT_NEAR(loss.data<float>()[1], 1 + lse, 1e-5);
}

TEST(NnOps, LogSoftmaxExactValuesOnSmallInput) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const Tensor x = Tensor::from_vector<double>({1, 2, 3, -1, 0.5, 4}, Shape{3, 2});
  const Tensor got = to_host(log_softmax(copy_to_mesh(x, layout_of(mesh, {"x", "unsharded"}), rt)));
  for (int r = 0; r < 3; ++r) {
    const double a = x.data<double>()[2 * r];
    const double b = x.data<double>()[2 * r + 1];
    const double lse = std::log(std::exp(a) + std::exp(b));
    EXPECT_NEAR(got.data<double>()[2 * r], a - lse, 1e-14);
    EXPECT_NEAR(got.data<double>()[2 * r + 1], b - lse, 1e-14);
  }
}

TEST(NnOps, CrossEntropyExactValuesOnSmallInput) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor logits = Tensor::from_vector<double>({1, 2, 3, 1, 1, 1}, Shape{2, 3});
  for (DType ldt : {DType::kI32, DType::kI64}) {
    const Tensor labels = Tensor::from_vector<int64_t>({2, 0}, Shape{2}).astype(ldt);
    const Tensor got = to_host(sparse_softmax_cross_entropy_with_logits(
        copy_to_mesh(labels, layout_of(mesh, {"x"}), rt),
        copy_to_mesh(logits, layout_of(mesh, {"x", "y"}), rt)));
    ASSERT_EQ(got.shape(), (Shape{2}));
    const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    EXPECT_NEAR(got.data<double>()[0], std::log(z) - 3, 1e-14);
    EXPECT_NEAR(got.data<double>()[1], std::log(3.0), 1e-14);
  }
}

TEST(NnOps, SoftmaxRuleGathersTheClassAxisKeepsBatchAndReducesPartial) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout in = Layout::create(
      LayoutType::kStatic, {ShardingSpec::sharded({"x"}), ShardingSpec::sharded({"y"})}, mesh);
  for (const char* op : {"softmax", "log_softmax"}) {
    const ShardingDecision d = plan_op(op, {{Shape{4, 6}, DType::kF32, in}});
    EXPECT_EQ(d.inputs[0], layout_of(mesh, {"x", "unsharded"})) << op;
    EXPECT_EQ(d.output, layout_of(mesh, {"x", "unsharded"})) << op;
    const Layout partial =
        layout_of(mesh, {"x", "unsharded"}).with_partial({{"y", ReduceOp::kSum}});
    const ShardingDecision p = plan_op(op, {{Shape{4, 6}, DType::kF32, partial}});
    EXPECT_FALSE(p.inputs[0].is_partial()) << op;
    EXPECT_EQ(p.output, layout_of(mesh, {"x", "unsharded"})) << op;
  }
}

TEST(NnOps, CrossEntropyRuleDemandsLabelsInTheLogitsBatchSharding) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const ShardingDecision d =
      plan_op("sparse_softmax_cross_entropy_with_logits",
              {{Shape{4, 3}, DType::kI64, layout_of(mesh, {"y", "unsharded"})},
               {Shape{4, 3, 5}, DType::kF32, layout_of(mesh, {"x", "unsharded", "y"})}});
  EXPECT_EQ(d.inputs[0], layout_of(mesh, {"x", "unsharded"}));
  EXPECT_EQ(d.inputs[1], layout_of(mesh, {"x", "unsharded", "unsharded"}));
  EXPECT_EQ(d.output, layout_of(mesh, {"x", "unsharded"}));
}

TEST(NnOps, CrossEntropyGradRuleKeepsPartialSumOfTheIncomingGradient) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout batch = layout_of(mesh, {"x"});
  const ShardingDecision d =
      plan_op("sparse_softmax_cross_entropy_grad",
              {{Shape{4}, DType::kI64, batch},
               {Shape{4, 5}, DType::kF64, layout_of(mesh, {"x", "unsharded"})},
               {Shape{4}, DType::kF64, batch.with_partial({{"y", ReduceOp::kSum}})}});
  EXPECT_EQ(d.inputs[2], batch.with_partial({{"y", ReduceOp::kSum}}));
  EXPECT_EQ(d.output, layout_of(mesh, {"x", "unsharded"}).with_partial({{"y", ReduceOp::kSum}}));
  // A pending max is not linear: reduced first.
  const ShardingDecision m =
      plan_op("sparse_softmax_cross_entropy_grad",
              {{Shape{4}, DType::kI64, batch},
               {Shape{4, 5}, DType::kF64, layout_of(mesh, {"x", "unsharded"})},
               {Shape{4}, DType::kF64, batch.with_partial({{"y", ReduceOp::kMax}})}});
  EXPECT_FALSE(m.inputs[2].is_partial());
  EXPECT_FALSE(m.output.is_partial());
}

TEST(NnOps, SoftmaxMatchesSingleDeviceOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(11);
  const std::vector<Mesh> meshes = test_meshes();
  const std::vector<Shape> shapes = {Shape{5, 7}, Shape{3, 2, 5}, Shape{2, 1}, Shape{7},
                                     Shape{0, 3}};
  for (int t = 0; t < 24; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Shape& shape = shapes[static_cast<size_t>(t) % shapes.size()];
    const Tensor x = random_host(shape, t % 2 ? DType::kF64 : DType::kF32, 100 + t, -4, 4);
    const Layout layout = random_op_layout(mesh, shape.rank(), rng, /*allow_partial=*/true);
    const double tol = x.dtype() == DType::kF64 ? 1e-12 : 1e-5;
    expect_matches_single_device([](const std::vector<DTensor>& in) { return softmax(in[0]); }, {x},
                                 {layout}, rt, rng, tol);
    expect_matches_single_device([](const std::vector<DTensor>& in) { return log_softmax(in[0]); },
                                 {x}, {layout}, rt, rng, tol);
  }
}

TEST(NnOps, CrossEntropyMatchesSingleDeviceOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(12);
  const std::vector<Mesh> meshes = test_meshes();
  const std::vector<Shape> shapes = {Shape{5, 7}, Shape{3, 2, 5}, Shape{6, 1}, Shape{9},
                                     Shape{0, 4}};
  for (int t = 0; t < 24; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Shape& shape = shapes[static_cast<size_t>(t) % shapes.size()];
    const std::vector<int64_t>& dims = shape.dims();
    const Shape batch(std::vector<int64_t>(dims.begin(), dims.end() - 1));
    const Tensor logits = random_host(shape, DType::kF64, 200 + t, -4, 4);
    const Tensor labels = Tensor::random_uniform(batch, t % 2 ? DType::kI32 : DType::kI64, 300 + t,
                                                 0, static_cast<double>(dims.back()));
    expect_matches_single_device(
        [](const std::vector<DTensor>& in) {
          return sparse_softmax_cross_entropy_with_logits(in[0], in[1]);
        },
        {labels, logits},
        {random_op_layout(mesh, batch.rank(), rng),
         random_op_layout(mesh, shape.rank(), rng, true)},
        rt, rng, 1e-12);
  }
}

TEST(NnOps, SoftmaxVjpMatchesFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(13);
  const std::vector<Mesh> meshes = test_meshes();
  for (int t = 0; t < 6; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Tensor x = random_host(Shape{3, 4}, DType::kF64, 400 + t);
    const Layout layout = random_op_layout(mesh, 2, rng, true);
    expect_vjp_matches_finite_differences(
        [](const std::vector<DTensor>& in) { return softmax(in[0]); }, {x}, {layout}, rt, rng);
  }
}

TEST(NnOps, LogSoftmaxVjpMatchesFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(14);
  const std::vector<Mesh> meshes = test_meshes();
  for (int t = 0; t < 6; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Tensor x = random_host(Shape{3, 4}, DType::kF64, 500 + t);
    const Layout layout = random_op_layout(mesh, 2, rng, true);
    expect_vjp_matches_finite_differences(
        [](const std::vector<DTensor>& in) { return log_softmax(in[0]); }, {x}, {layout}, rt, rng);
  }
}

TEST(NnOps, CrossEntropyVjpWithRespectToLogitsMatchesFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(15);
  const std::vector<Mesh> meshes = test_meshes();
  for (int t = 0; t < 6; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Tensor logits = random_host(Shape{5, 3}, DType::kF64, 600 + t);
    const Tensor labels = Tensor::random_uniform(Shape{5}, DType::kI64, 700 + t, 0, 3);
    expect_vjp_matches_finite_differences(
        [](const std::vector<DTensor>& in) {
          return sparse_softmax_cross_entropy_with_logits(in[0], in[1]);
        },
        {labels, logits}, {random_op_layout(mesh, 1, rng), random_op_layout(mesh, 2, rng, true)},
        rt, rng);
  }
}

TEST(NnOps, CrossEntropyGradientOfLabelsIsNull) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor labels = copy_to_mesh(Tensor::from_vector<int64_t>({0, 1}, Shape{2}),
                                      layout_of(mesh, {"unsharded"}), rt);
  const DTensor logits = copy_to_mesh(Tensor::from_vector<double>({0, 0, 0, 0}, Shape{2, 2}),
                                      layout_of(mesh, {"unsharded", "unsharded"}), rt);
  const OpDef& def = OpRegistry::global().get("sparse_softmax_cross_entropy_with_logits");
  const DTensor out = sparse_softmax_cross_entropy_with_logits(labels, logits);
  const OpAttrs attrs;
  const std::vector<DTensor> grads =
      def.vjp(VjpArgs{{labels, logits}, out, ones_like(out), &attrs, {}, {}});
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_FALSE(grads[0].defined());
  // softmax = 1/2 each; minus the one-hot of the label.
  EXPECT_EQ(to_host(grads[1]).to_vector<double>(), (std::vector<double>{-0.5, 0.5, 0.5, -0.5}));
}

TEST(NnOps, ErrorsAtDispatch) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const auto put = [&](const Tensor& t) {
    return copy_to_mesh(t, Layout::replicated(mesh, t.rank()), rt);
  };
  const DTensor scalar = put(Tensor::full(Shape{}, DType::kF32, 1));
  EXPECT_TESSEL_ERROR(softmax(scalar), ErrorCode::kInvalidArgument,
                      "softmax: logits must have rank >= 1");
  EXPECT_TESSEL_ERROR(log_softmax(scalar), ErrorCode::kInvalidArgument,
                      "log_softmax: logits must have rank >= 1");
  const DTensor ints = put(Tensor::zeros(Shape{2, 3}, DType::kI32));
  EXPECT_TESSEL_ERROR(softmax(ints), ErrorCode::kInvalidArgument, "must be a floating dtype");
  const DTensor logits = put(Tensor::zeros(Shape{2, 3}, DType::kF32));
  const DTensor labels = put(Tensor::zeros(Shape{2}, DType::kI64));
  EXPECT_TESSEL_ERROR(
      sparse_softmax_cross_entropy_with_logits(put(Tensor::zeros(Shape{2}, DType::kF32)), logits),
      ErrorCode::kInvalidArgument, "labels must be i32 or i64, got f32");
  EXPECT_TESSEL_ERROR(sparse_softmax_cross_entropy_with_logits(labels, ints),
                      ErrorCode::kInvalidArgument, "logits must be a floating dtype");
  EXPECT_TESSEL_ERROR(
      sparse_softmax_cross_entropy_with_logits(put(Tensor::zeros(Shape{3}, DType::kI64)), logits),
      ErrorCode::kInvalidArgument, "labels shape [3] must equal the logits shape [2,3]");
  EXPECT_TESSEL_ERROR(
      sparse_softmax_cross_entropy_with_logits(put(Tensor::zeros(Shape{}, DType::kI64)), scalar),
      ErrorCode::kInvalidArgument, "logits must have rank >= 1");
  EXPECT_TESSEL_ERROR(sparse_softmax_cross_entropy_with_logits(
                          labels, put(Tensor::zeros(Shape{2, 0}, DType::kF32))),
                      ErrorCode::kInvalidArgument, "Must have at least one class");
  EXPECT_TESSEL_ERROR(softmax(put(Tensor::zeros(Shape{2, 3}, DType::kBF16))),
                      ErrorCode::kUnimplemented, "softmax: no kernel for logits bf16");
}

TEST(NnOps, CrossEntropyGradRejectsAGradientOfTheWrongShape) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const auto put = [&](const Tensor& t) {
    return copy_to_mesh(t, Layout::replicated(mesh, t.rank()), rt);
  };
  EXPECT_TESSEL_ERROR(
      call_op("sparse_softmax_cross_entropy_grad", {put(Tensor::zeros(Shape{2}, DType::kI64)),
                                                    put(Tensor::zeros(Shape{2, 3}, DType::kF64)),
                                                    put(Tensor::zeros(Shape{3}, DType::kF64))}),
      ErrorCode::kInvalidArgument,
      "sparse_softmax_cross_entropy_grad: the gradient is [3] f64, the loss is [2] f64");
}

// Kernels run asynchronously: a label outside [0, classes) is found by the kernel and reported
// at the next sync point (here to_host), naming the op, with TF's message.
TEST(NnOps, LabelOutOfRangeFailsAtTheNextSyncNamingTheOp) {
  for (int64_t bad : {3, -1}) {
    Runtime rt({.num_cpu_devices = 4});
    const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
    const DTensor labels = copy_to_mesh(Tensor::from_vector<int64_t>({0, 2, bad, 1}, Shape{4}),
                                        layout_of(mesh, {"x"}), rt);
    const DTensor logits =
        copy_to_mesh(Tensor::zeros(Shape{4, 3}, DType::kF32), layout_of(mesh, {"x", "y"}), rt);
    DTensor loss;
    ASSERT_NO_THROW(loss = sparse_softmax_cross_entropy_with_logits(labels, logits));
    try {
      to_host(loss);
      ADD_FAILURE() << "label " << bad << " was not reported";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      const std::string what = e.what();
      // ("op 'sparse_softmax_cross_entropy_with_logits.vocab_parallel'": the class axis is
      // sharded, the last stage of the vocabulary-parallel path checks the labels.)
      EXPECT_NE(what.find("op 'sparse_softmax_cross_entropy_with_logits"), std::string::npos)
          << what;
      EXPECT_NE(what.find(fmt::format("Received a label value of {} which is outside the valid "
                                      "range of [0, 3)",
                                      bad)),
                std::string::npos)
          << what;
    }
  }
}

}  // namespace
}  // namespace tessel
