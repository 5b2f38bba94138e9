// The ops a transformer needs beyond the basic families: layer_norm, causal_softmax, exact GELU,
// dropout, stop_gradient (ops.h), and the training pieces AdamW, clip_by_global_norm and
// WarmupCosineDecay (optimizers.h). Each op against a single-device run over random layouts and
// its VJP against finite differences; exact values against formulas written here.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "testing/op_check.h"
#include "tessel/core/error.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/optimizers.h"
#include "tessel/dtensor/relayout.h"

namespace tessel {
namespace {

using testing::expect_matches_single_device;
using testing::expect_vjp_matches_finite_differences;
using testing::random_host;
using testing::random_op_layout;
using testing::values;

std::vector<Mesh> test_meshes() {
  return {Mesh::create({{"x", 4}}), Mesh::create({{"x", 2}, {"y", 2}}), Mesh::create({{"x", 3}})};
}

TEST(TransformerOps, LayerNormExactValues) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, -1, 0, 0, 1}, Shape{2, 4});
  const DTensor w = copy_to_mesh(Tensor::from_vector<double>({1, 2, 1, 1}, Shape{4}),
                                 Layout::replicated(mesh, 1), rt);
  const DTensor b = copy_to_mesh(Tensor::from_vector<double>({0, 0, 1, 0}, Shape{4}),
                                 Layout::replicated(mesh, 1), rt);
  const std::vector<double> got =
      values(layer_norm(copy_to_mesh(x, Layout({"x", "y"}, mesh), rt), w, b, 1e-5));
  for (int r = 0; r < 2; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 4; ++c) mean += x.data<double>()[r * 4 + c] / 4;
    for (int c = 0; c < 4; ++c) var += std::pow(x.data<double>()[r * 4 + c] - mean, 2) / 4;
    const double wv[] = {1, 2, 1, 1}, bv[] = {0, 0, 1, 0};
    for (int c = 0; c < 4; ++c) {
      const double want = (x.data<double>()[r * 4 + c] - mean) / std::sqrt(var + 1e-5) * wv[c] + bv[c];
      EXPECT_NEAR(got[static_cast<size_t>(r * 4 + c)], want, 1e-12);
    }
  }
}

TEST(TransformerOps, LayerNormMatchesSingleDeviceAndFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(31);
  const std::vector<Mesh> meshes = test_meshes();
  const auto with_bias = [](const std::vector<DTensor>& in) {
    return layer_norm(in[0], in[1], in[2], 1e-5);
  };
  const auto without_bias = [](const std::vector<DTensor>& in) {
    return layer_norm(in[0], in[1], DTensor(), 1e-5);
  };
  for (int t = 0; t < 9; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Tensor x = random_host(Shape{3, 2, 5}, DType::kF64, 100 + t);
    const Tensor w = random_host(Shape{5}, DType::kF64, 200 + t);
    const Tensor b = random_host(Shape{5}, DType::kF64, 300 + t);
    const std::vector<Layout> layouts = {random_op_layout(mesh, 3, rng, true),
                                         random_op_layout(mesh, 1, rng, true),
                                         random_op_layout(mesh, 1, rng)};
    expect_matches_single_device(with_bias, {x, w, b}, layouts, rt, rng, 1e-12);
    expect_matches_single_device(without_bias, {x, w}, {layouts[0], layouts[1]}, rt, rng, 1e-12);
    if (t < 3) expect_vjp_matches_finite_differences(with_bias, {x, w, b}, layouts, rt, rng);
  }
}

TEST(TransformerOps, LayerNormWeightGradientIsPartialOverTheRowDims) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"batch", 2}, {"seq", 2}});
  const ShardingDecision d =
      plan_op("layer_norm_weight_grad",
              {{Shape{4, 6, 8}, DType::kF32, Layout({"batch", "seq", "unsharded"}, mesh)},
               {Shape{4, 6, 8}, DType::kF32, Layout({"batch", "seq", "unsharded"}, mesh)},
               {Shape{4, 6, 2}, DType::kF64, Layout({"batch", "seq", "unsharded"}, mesh)}});
  EXPECT_EQ(d.output.partial().size(), 2u);
  EXPECT_EQ(d.output.sharding_spec_strings(), std::vector<std::string>{"unsharded"});
}

TEST(TransformerOps, CausalSoftmaxMasksFutureKeys) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}});
  // 3 queries over 3 keys: row i sees keys 0..i.
  const Tensor s = Tensor::from_vector<double>({1, 5, 5, 1, 2, 9, 0, 0, 0}, Shape{3, 3});
  const std::vector<double> got =
      values(causal_softmax(copy_to_mesh(s, Layout({"x", "unsharded"}, mesh), rt)));
  const double e = std::exp(1.0);
  const std::vector<double> want = {1, 0, 0, 1 / (1 + e), e / (1 + e), 0, 1.0 / 3, 1.0 / 3, 1.0 / 3};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-15) << i;
  // 2 queries over 4 keys: the last query sees every key, the first all but the last.
  const Tensor r = Tensor::from_vector<double>({0, 0, 0, 7, 0, 0, 0, 0}, Shape{2, 4});
  const std::vector<double> got2 =
      values(causal_softmax(copy_to_mesh(r, Layout::replicated(mesh, 2), rt)));
  const std::vector<double> want2 = {1.0 / 3, 1.0 / 3, 1.0 / 3, 0, 0.25, 0.25, 0.25, 0.25};
  for (size_t i = 0; i < want2.size(); ++i) EXPECT_NEAR(got2[i], want2[i], 1e-15) << i;
}

TEST(TransformerOps, CausalSoftmaxMatchesSingleDeviceAndFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(32);
  const std::vector<Mesh> meshes = test_meshes();
  const auto fn = [](const std::vector<DTensor>& in) { return causal_softmax(in[0], 0.7); };
  for (int t = 0; t < 9; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Tensor x = random_host(t % 2 ? Shape{2, 5, 5} : Shape{3, 4, 6}, DType::kF64, 400 + t);
    const Layout layout = random_op_layout(mesh, 3, rng, true);
    expect_matches_single_device(fn, {x}, {layout}, rt, rng, 1e-13);
    if (t < 3) expect_vjp_matches_finite_differences(fn, {x}, {layout}, rt, rng);
  }
}

TEST(TransformerOps, ExactGeluMatchesErfAndFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(33);
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor x = random_host(Shape{4, 3}, DType::kF64, 500, -4, 4);
  const std::vector<double> got =
      values(gelu(copy_to_mesh(x, Layout({"x", "y"}, mesh), rt), /*approximate=*/false));
  for (int64_t i = 0; i < 12; ++i) {
    const double v = x.data<double>()[i];
    EXPECT_NEAR(got[static_cast<size_t>(i)], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-14);
  }
  expect_vjp_matches_finite_differences(
      [](const std::vector<DTensor>& in) { return gelu(in[0], false); }, {x},
      {random_op_layout(mesh, 2, rng, true)}, rt, rng);
}

TEST(TransformerOps, DropoutMaskIsTheSameOnEveryLayout) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor x = Tensor::full(Shape{7, 9}, DType::kF64, 1.0);
  const std::vector<double> one = values(dropout(copy_to_mesh(x, Layout::replicated(mesh, 2), rt), 0.25, 7));
  const std::vector<double> two = values(dropout(copy_to_mesh(x, Layout({"y", "x"}, mesh), rt), 0.25, 7));
  EXPECT_EQ(one, two);
  int dropped = 0;
  for (double v : one) {
    EXPECT_TRUE(v == 0.0 || std::abs(v - 1 / 0.75) < 1e-15) << v;
    dropped += v == 0.0;
  }
  EXPECT_GT(dropped, 5);
  EXPECT_LT(dropped, 30);
  const std::vector<double> other = values(dropout(copy_to_mesh(x, Layout::replicated(mesh, 2), rt), 0.25, 8));
  EXPECT_NE(one, other);
  // The gradient is the same mask applied to g.
  const DTensor p = copy_to_mesh(x, Layout({"x", "unsharded"}, mesh), rt);
  const auto [value, grads] = value_and_grad(
      [](const std::vector<DTensor>& in) { return reduce_sum(dropout(in[0], 0.25, 7)); }, {p});
  EXPECT_EQ(values(grads[0]), one);
  EXPECT_THROW(dropout(p, 1.0, 1), Error);
  EXPECT_THROW(dropout(p, -0.1, 1), Error);
}

TEST(TransformerOps, StopGradientPassesValuesAndNoGradient) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 4}});
  const DTensor p = copy_to_mesh(Tensor::full(Shape{4}, DType::kF64, 3.0), Layout({"x"}, mesh), rt);
  const auto [value, grads] = value_and_grad(
      [](const std::vector<DTensor>& in) {
        return reduce_sum(add(multiply(in[0], stop_gradient(in[0])), in[0]));
      },
      {p});
  EXPECT_EQ(values(value), std::vector<double>{48.0});  // 4 * (3 * 3 + 3)
  EXPECT_EQ(values(grads[0]), (std::vector<double>{4, 4, 4, 4}));  // x + 1, not 2x + 1
}

TEST(TransformerOps, VocabParallelCrossEntropyNeverGathersTheLogits) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"batch", 2}, {"model", 2}});
  const Tensor logits = random_host(Shape{8, 65}, DType::kF64, 600, -3, 3);  // 33/32 classes
  const Tensor labels = Tensor::random_uniform(Shape{8}, DType::kI32, 601, 0, 65);
  const DTensor dl = copy_to_mesh(logits, Layout({"batch", "model"}, mesh), rt);
  const DTensor dy = copy_to_mesh(labels, Layout({"batch"}, mesh), rt);
  const RelayoutStats before = relayout_stats();
  const std::vector<double> got = values(sparse_softmax_cross_entropy_with_logits(dy, dl));
  const RelayoutStats after = relayout_stats();
  // Two all-reduces over model of 4 rows' max and 4 rows' (sum, pick) pairs; a gather of the
  // logits would move half of them, 8 * 65 / 2 values.
  EXPECT_EQ(after.collectives - before.collectives, 2);
  EXPECT_LT(after.bytes - before.bytes, 8 * 65 * 8 / 2);
  for (int r = 0; r < 8; ++r) {
    double most = -1e300, total = 0;
    for (int c = 0; c < 65; ++c) most = std::max(most, logits.data<double>()[r * 65 + c]);
    for (int c = 0; c < 65; ++c) total += std::exp(logits.data<double>()[r * 65 + c] - most);
    const int label = labels.data<int32_t>()[r];
    EXPECT_NEAR(got[static_cast<size_t>(r)],
                std::log(total) + most - logits.data<double>()[r * 65 + label], 1e-12);
  }
}

TEST(TransformerOps, AdamWMatchesTorchArithmetic) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const Tensor w0 = Tensor::from_vector<double>({0.5, -1.0, 2.0, 0.25}, Shape{2, 2});
  const Tensor b0 = Tensor::from_vector<double>({1.0, -2.0}, Shape{2});
  std::vector<DTensor> params = {copy_to_mesh(w0, Layout({"x", "unsharded"}, mesh), rt),
                                 copy_to_mesh(b0, Layout::replicated(mesh, 1), rt)};
  AdamW opt(0.1, 0.9, 0.99, 1e-8, 0.5);
  const std::vector<double> g = {0.3, -0.2, 0.1, 0.4};
  std::vector<double> w(w0.data<double>(), w0.data<double>() + 4), m(4, 0), v(4, 0);
  std::vector<double> b = {1.0, -2.0}, mb(2, 0), vb(2, 0);
  for (int t = 1; t <= 3; ++t) {
    const double lr = 0.1 / t;
    opt.set_learning_rate(lr);
    std::vector<DTensor> grads = {
        copy_to_mesh(Tensor::from_vector<double>(g, Shape{2, 2}), params[0].layout(), rt),
        copy_to_mesh(Tensor::from_vector<double>({0.5, 0.5}, Shape{2}), params[1].layout(), rt)};
    opt.apply(params, grads);
    const auto step = [&](std::vector<double>& p, std::vector<double>& mm, std::vector<double>& vv,
                          const std::vector<double>& gg, bool decays) {
      for (size_t i = 0; i < p.size(); ++i) {
        if (decays) p[i] *= 1 - lr * 0.5;
        mm[i] = 0.9 * mm[i] + 0.1 * gg[i];
        vv[i] = 0.99 * vv[i] + 0.01 * gg[i] * gg[i];
        const double mhat = mm[i] / (1 - std::pow(0.9, t)), vhat = vv[i] / (1 - std::pow(0.99, t));
        p[i] -= lr * mhat / (std::sqrt(vhat) + 1e-8);
      }
    };
    step(w, m, v, g, true);   // rank 2: decays
    step(b, mb, vb, {0.5, 0.5}, false);
  }
  const std::vector<double> got_w = values(params[0]), got_b = values(params[1]);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got_w[i], w[i], 1e-12);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(got_b[i], b[i], 1e-12);
  EXPECT_THROW(opt.set_learning_rate(-1), Error);
  EXPECT_THROW(AdamW(0.1, 0.9, 0.99, 1e-8, -1), Error);
}

TEST(TransformerOps, ClipByGlobalNormScalesEveryGradient) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const DTensor a = copy_to_mesh(Tensor::from_vector<double>({3, 0, 0, 0}, Shape{2, 2}),
                                 Layout({"x", "y"}, mesh), rt);
  const DTensor b = copy_to_mesh(Tensor::from_vector<double>({0, 4, 0}, Shape{3}),
                                 Layout({"y"}, mesh), rt);
  const auto [clipped, norm] = clip_by_global_norm({a, b, DTensor()}, 1.0);
  EXPECT_EQ(values(norm), std::vector<double>{5.0});
  EXPECT_NEAR(values(clipped[0])[0], 0.6, 1e-15);
  EXPECT_NEAR(values(clipped[1])[1], 0.8, 1e-15);
  EXPECT_FALSE(clipped[2].defined());
  EXPECT_EQ(clipped[0].layout(), a.layout());
  const auto [same, norm2] = clip_by_global_norm({a, b}, 10.0);  // within the bound: unchanged
  EXPECT_EQ(values(same[0]), values(a));
  EXPECT_THROW(clip_by_global_norm({a}, 0.0), Error);
  EXPECT_THROW(clip_by_global_norm({DTensor()}, 1.0), Error);
}

TEST(TransformerOps, ArgmaxGathersTheAxisAndTakesTheFirstLargest) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor x = Tensor::from_vector<double>({1, 7, 7, 2, 9, 0, 3, 3, NAN, 1, 5, 5}, Shape{3, 4});
  const DTensor d = copy_to_mesh(x, Layout({"x", "y"}, mesh), rt);  // 2/1 rows, 2/2 columns
  EXPECT_EQ(values(argmax(d)), (std::vector<double>{1, 0, 0}));      // first of ties; NaN wins
  EXPECT_EQ(values(argmax(d, 0)), (std::vector<double>{2, 0, 0, 2}));
  EXPECT_EQ(argmax(d).dtype(), DType::kI64);
  EXPECT_THROW(argmax(d, 2), Error);
}

TEST(TransformerOps, SampleCategoricalIsTheSameOnEveryLayout) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Tensor logits = random_host(Shape{64, 65}, DType::kF64, 700, -2, 2);
  const DTensor a = copy_to_mesh(logits, Layout({"x", "y"}, mesh), rt);
  const DTensor b = copy_to_mesh(logits, Layout::replicated(mesh, 2), rt);
  const std::vector<double> sa = values(sample_categorical(a, 5)), sb = values(sample_categorical(b, 5));
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, values(sample_categorical(a, 6)));
  // top_k = 1 is the argmax; a tiny temperature too.
  EXPECT_EQ(values(sample_categorical(a, 5, 1.0, 1)), values(argmax(a)));
  EXPECT_EQ(values(sample_categorical(a, 5, 1e-4)), values(argmax(a)));
  // With top_k = 3 every draw is among the row's 3 largest.
  const std::vector<double> top3 = values(sample_categorical(a, 9, 1.0, 3));
  for (int r = 0; r < 64; ++r) {
    const double* row = logits.data<double>() + r * 65;
    int larger = 0;
    for (int c = 0; c < 65; ++c) larger += row[c] > row[static_cast<int>(top3[static_cast<size_t>(r)])];
    EXPECT_LT(larger, 3) << r;
  }
  EXPECT_THROW(sample_categorical(a, 1, 0.0), Error);
  EXPECT_THROW(sample_categorical(a, 1, 1.0, -1), Error);
}

TEST(TransformerOps, WarmupCosineDecayFollowsNanoGpt) {
  const WarmupCosineDecay s{1e-3, 1e-4, 100, 2000};
  EXPECT_DOUBLE_EQ(s(0), 1e-3 / 101);
  EXPECT_DOUBLE_EQ(s(99), 1e-3 * 100 / 101);
  EXPECT_DOUBLE_EQ(s(100), 1e-3);
  EXPECT_NEAR(s(1050), 1e-4 + 0.5 * (1e-3 - 1e-4), 1e-15);
  EXPECT_DOUBLE_EQ(s(2000), 1e-4);
  EXPECT_DOUBLE_EQ(s(5000), 1e-4);
}

}  // namespace
}  // namespace tessel
