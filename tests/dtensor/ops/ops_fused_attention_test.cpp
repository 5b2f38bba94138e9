// The fused causal-attention op (causal_attention, ops.h): against a single device on random
// layouts of several meshes, its three gradients against finite differences (with and without
// dropout: the mask is a function of the seed), against the composed ops it replaces in float32
// at 1e-5 (values and gradients), what a gradient tape keeps (no [B, H, T, T] map) and its
// errors.
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "tessel/core/error.h"
#include "tessel/dtensor/autodiff.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/tape_memory.h"
#include "testing/op_check.h"

namespace tessel {
namespace {

using testing::expect_matches_single_device;
using testing::expect_vjp_matches_finite_differences;
using testing::random_host;
using testing::random_op_layout;
using testing::values;

// The same on [B, H, T, D] transposes of the [B, T, H, D] operands, transposed back.
DTensor composed_attention(const std::vector<DTensor>& in, double scale, double rate,
                           uint64_t seed) {
  const auto swap = [](const DTensor& x) { return transpose(x, {0, 2, 1, 3}); };
  DTensor p = causal_softmax(matmul(swap(in[0]), swap(in[1]), false, true), scale);
  if (rate > 0) p = dropout(p, rate, seed);
  return swap(matmul(p, swap(in[2])));
}

TEST(FusedAttention, MatchesSingleDeviceAndFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(71);
  const std::vector<Mesh> meshes = {Mesh::create({{"x", 4}}), Mesh::create({{"x", 2}, {"y", 2}}),
                                    Mesh::create({{"x", 3}})};
  for (int t = 0; t < 6; ++t) {
    const double rate = t % 2 ? 0.3 : 0.0;
    const auto fn = [rate](const std::vector<DTensor>& in) {
      return causal_attention(in[0], in[1], in[2], 0.6, rate, 19);
    };
    const Mesh& mesh = meshes[static_cast<size_t>(t) % meshes.size()];
    const Shape shape = t % 3 == 2 ? Shape{3, 7, 2, 4} : Shape{2, 5, 3, 4};  // [B, T, H, D]
    std::vector<Tensor> hosts;
    std::vector<Layout> layouts;
    for (int i = 0; i < 3; ++i) {
      hosts.push_back(random_host(shape, DType::kF64, 700 + 10 * t + i));
      layouts.push_back(random_op_layout(mesh, 4, rng, true));
    }
    expect_matches_single_device(fn, hosts, layouts, rt, rng, 1e-13);
    if (t < 4) expect_vjp_matches_finite_differences(fn, hosts, layouts, rt, rng);
  }
}

// Float32, 130 queries (two whole tiles of 64 and a part), dropout on: the fused op against
// matmul, causal_softmax, dropout, matmul, values and the gradients of q, k and v.
TEST(FusedAttention, EqualsTheComposedOpsInFloat32) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout layout({"x", "unsharded", "y", "unsharded"}, mesh);
  const Shape shape{2, 130, 2, 8};
  std::vector<DTensor> in;
  for (int i = 0; i < 3; ++i) {
    in.push_back(copy_to_mesh(random_host(shape, DType::kF32, 800 + i), layout, rt));
  }
  const DTensor weights = copy_to_mesh(random_host(shape, DType::kF32, 803), layout, rt);
  const double scale = 1 / std::sqrt(8.0);
  const auto loss_of = [&](bool fused) {
    return value_and_grad(
        [&](const std::vector<DTensor>& p) {
          const DTensor out = fused ? causal_attention(p[0], p[1], p[2], scale, 0.2, 29)
                                    : composed_attention(p, scale, 0.2, 29);
          return reduce_sum(multiply(out, weights));
        },
        in);
  };
  const auto [fused_loss, fused_grads] = loss_of(true);
  const auto [composed_loss, composed_grads] = loss_of(false);
  EXPECT_NEAR(values(fused_loss)[0], values(composed_loss)[0],
              1e-5 * std::abs(values(composed_loss)[0]));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(fused_grads[i].layout(), in[i].layout());
    const std::vector<double> got = values(fused_grads[i]), want = values(composed_grads[i]);
    for (size_t j = 0; j < got.size(); ++j) {
      ASSERT_NEAR(got[j], want[j], 1e-5 * (1 + std::abs(want[j]))) << "input " << i << " at " << j;
    }
  }
}

// The tape keeps q, k, v and the output; the composed ops keep two [B, H, T, T] maps (the
// probabilities and their dropped-out copy).
TEST(FusedAttention, TheTapeKeepsNoScoreMap) {
  Runtime rt({.num_cpu_devices = 1});
  const Mesh mesh = Mesh::create({{"x", 1}});
  const Layout layout = Layout::replicated(mesh, 4);
  const int64_t b = 2, h = 2, t = 128, d = 8;
  std::vector<DTensor> in;
  for (int i = 0; i < 3; ++i) {
    in.push_back(copy_to_mesh(random_host(Shape{b, t, h, d}, DType::kF32, 900 + i), layout, rt));
  }
  const auto kept = [&](bool fused) {
    reset_tape_memory_peak();
    const int64_t before = tape_memory_stats().empty() ? 0 : tape_memory_stats()[0].peak_bytes;
    value_and_grad(
        [&](const std::vector<DTensor>& p) {
          return reduce_sum(fused ? causal_attention(p[0], p[1], p[2], 0.5, 0.1, 3)
                                  : composed_attention(p, 0.5, 0.1, 3));
        },
        in);
    return tape_memory_stats().at(0).peak_bytes - before;
  };
  const int64_t map = b * h * t * t * 4, operand = b * h * t * d * 4;
  EXPECT_LE(kept(true), operand);   // the output (q, k, v are the watched sources here)
  EXPECT_GE(kept(false), 2 * map);  // softmax's output and dropout's
}

TEST(FusedAttention, BadOperandsAreRefusedNamingThem) {
  Runtime rt({.num_cpu_devices = 2});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const DTensor q =
      copy_to_mesh(random_host(Shape{2, 2, 4, 4}, DType::kF32, 1), Layout::replicated(mesh, 4), rt);
  const DTensor k =
      copy_to_mesh(random_host(Shape{2, 2, 5, 4}, DType::kF32, 2), Layout::replicated(mesh, 4), rt);
  const DTensor ints =
      copy_to_mesh(Tensor::zeros(Shape{2, 2, 4, 4}, DType::kI32), Layout::replicated(mesh, 4), rt);
  const auto code_and_message = [](const std::function<void()>& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::pair<std::optional<ErrorCode>, std::string>(e.code(), e.what());
    }
    return std::pair<std::optional<ErrorCode>, std::string>(std::nullopt, "no error");
  };
  auto [code, message] = code_and_message([&] { causal_attention(q, k, q); });
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("causal_attention"), std::string::npos) << message;
  EXPECT_NE(message.find("[2,2,5,4]"), std::string::npos) << message;
  std::tie(code, message) = code_and_message([&] { causal_attention(q, q, q, 1.0, 1.0, 1); });
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("got 1"), std::string::npos) << message;
  std::tie(code, message) = code_and_message([&] { causal_attention(ints, ints, ints); });
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("i32"), std::string::npos) << message;
  // The gradient op names its five operands.
  std::tie(code, message) = code_and_message(
      [&] { call_op("causal_attention_grad", {q, q, q, q, k}, OpAttrs{}); });
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("q, k, v, the output and its gradient must be one shape"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace tessel
