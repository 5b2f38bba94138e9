// Convolution and pooling (ops_conv.cpp, ops_pool.cpp): values against a direct reference
// written here (TF's padding arithmetic spelled out), the sharding rules (plan_op), random
// layouts on meshes of 1, 2 and 2x2 devices against a single-device run (sharded spatial dims
// through the sharding fallback), VJPs against finite differences, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/dtensor/ops.h"
#include "tessel/dtensor/sharding_fallback.h"
#include "testing/expect_error.h"
#include "testing/op_check.h"

namespace tessel {
namespace {

using testing::expect_matches_single_device;
using testing::expect_vjp_matches_finite_differences;
using testing::OpFn;
using testing::random_host;
using testing::random_op_layout;
using testing::small_meshes;
using testing::values;

using Inputs = std::vector<DTensor>;

// One window configuration: (height, width) strides and dilations, the padding and, for
// "EXPLICIT", (top, bottom, left, right).
struct Config {
  explicit Config(std::string padding_ = "VALID", int64_t sh = 1, int64_t sw = 1, int64_t dh = 1,
                  int64_t dw = 1, std::vector<int64_t> pads_ = {})
      : stride_h(sh),
        stride_w(sw),
        dilation_h(dh),
        dilation_w(dw),
        padding(std::move(padding_)),
        pads(std::move(pads_)) {}

  int64_t stride_h, stride_w, dilation_h, dilation_w;
  std::string padding;
  std::vector<int64_t> pads;  // top, bottom, left, right

  std::vector<int64_t> strides() const { return {stride_h, stride_w}; }
  std::vector<int64_t> dilations() const { return {dilation_h, dilation_w}; }
  std::vector<int64_t> explicit_paddings() const {
    if (padding != "EXPLICIT") return {};
    return {0, 0, pads[0], pads[1], pads[2], pads[3], 0, 0};
  }
};

// ---- the reference ----------------------------------------------------------------------------

// TF's output size and padding before, along one dim.
void tf_extent(const Config& c, int64_t in, int64_t taps, int64_t stride, int64_t dilation,
               int64_t before, int64_t after, int64_t& out, int64_t& pad) {
  const int64_t span = (taps - 1) * dilation + 1;
  if (c.padding == "SAME") {
    out = (in + stride - 1) / stride;
    pad = std::max<int64_t>((out - 1) * stride + span - in, 0) / 2;
  } else if (c.padding == "VALID") {
    out = (in - span) / stride + 1;
    pad = 0;
  } else {
    out = (in + before + after - span) / stride + 1;
    pad = before;
  }
}

struct RefWindow {
  int64_t out_h, out_w, pad_h, pad_w;
};

RefWindow ref_window(const Config& c, int64_t in_h, int64_t in_w, int64_t k_h, int64_t k_w) {
  RefWindow r{};
  const bool ex = c.padding == "EXPLICIT";
  tf_extent(c, in_h, k_h, c.stride_h, c.dilation_h, ex ? c.pads[0] : 0, ex ? c.pads[1] : 0, r.out_h,
            r.pad_h);
  tf_extent(c, in_w, k_w, c.stride_w, c.dilation_w, ex ? c.pads[2] : 0, ex ? c.pads[3] : 0, r.out_w,
            r.pad_w);
  return r;
}

// The direct sum: y[n, oh, ow, o] = sum over taps (i, j) and channels c of x[n, ih, iw, c] *
// w[i, j, c, o] at ih = oh * stride - pad + i * dilation (zero outside the input).
std::vector<double> reference_conv(const Tensor& x_t, const Tensor& w_t, const Config& c) {
  const std::vector<double> x = x_t.to_doubles(), w = w_t.to_doubles();
  const int64_t n = x_t.shape()[0], h = x_t.shape()[1], wd = x_t.shape()[2], ch = x_t.shape()[3];
  const int64_t kh = w_t.shape()[0], kw = w_t.shape()[1], o = w_t.shape()[3];
  const RefWindow r = ref_window(c, h, wd, kh, kw);
  std::vector<double> y(static_cast<size_t>(n * r.out_h * r.out_w * o), 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oh = 0; oh < r.out_h; ++oh)
      for (int64_t ow = 0; ow < r.out_w; ++ow)
        for (int64_t f = 0; f < o; ++f) {
          double sum = 0;
          for (int64_t i = 0; i < kh; ++i)
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t ih = oh * c.stride_h - r.pad_h + i * c.dilation_h;
              const int64_t iw = ow * c.stride_w - r.pad_w + j * c.dilation_w;
              if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
              for (int64_t k = 0; k < ch; ++k) {
                sum += x[static_cast<size_t>(((b * h + ih) * wd + iw) * ch + k)] *
                       w[static_cast<size_t>(((i * kw + j) * ch + k) * o + f)];
              }
            }
          y[static_cast<size_t>(((b * r.out_h + oh) * r.out_w + ow) * o + f)] = sum;
        }
  return y;
}

// Max or mean over each window's cells inside the input.
std::vector<double> reference_pool(const Tensor& x_t, int64_t k_h, int64_t k_w, const Config& c,
                                   bool max) {
  const std::vector<double> x = x_t.to_doubles();
  const int64_t n = x_t.shape()[0], h = x_t.shape()[1], wd = x_t.shape()[2], ch = x_t.shape()[3];
  const RefWindow r = ref_window(c, h, wd, k_h, k_w);
  std::vector<double> y;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oh = 0; oh < r.out_h; ++oh)
      for (int64_t ow = 0; ow < r.out_w; ++ow)
        for (int64_t k = 0; k < ch; ++k) {
          double acc = max ? -std::numeric_limits<double>::infinity() : 0.0;
          int cells = 0;
          for (int64_t i = 0; i < k_h; ++i)
            for (int64_t j = 0; j < k_w; ++j) {
              const int64_t ih = oh * c.stride_h - r.pad_h + i, iw = ow * c.stride_w - r.pad_w + j;
              if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
              const double v = x[static_cast<size_t>(((b * h + ih) * wd + iw) * ch + k)];
              acc = max ? std::max(acc, v) : acc + v;
              ++cells;
            }
          y.push_back(max ? acc : acc / cells);
        }
  return y;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want,
                     double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tolerance) << what << " element " << i;
  }
}

// The window configurations the value tests run (odd sizes, strides over 1, dilation, padding
// of each kind).
std::vector<Config> configs() {
  std::vector<Config> out;
  out.emplace_back("VALID");
  out.emplace_back("SAME");
  out.emplace_back("SAME", 2, 2);
  out.emplace_back("VALID", 2, 1);
  out.emplace_back("SAME", 1, 3);
  out.emplace_back("SAME", 1, 1, 2, 1);  // dilated
  out.emplace_back("VALID", 2, 2, 2, 2);
  out.emplace_back("EXPLICIT", 1, 1, 1, 1, std::vector<int64_t>{1, 0, 2, 1});
  out.emplace_back("EXPLICIT", 2, 1, 1, 1, std::vector<int64_t>{0, 1, 1, 1});
  return out;
}

std::string describe(const Config& c) {
  return c.padding + " strides " + std::to_string(c.stride_h) + "," + std::to_string(c.stride_w) +
         " dilations " + std::to_string(c.dilation_h) + "," + std::to_string(c.dilation_w);
}

DTensor conv(const Inputs& in, const Config& c) {
  return conv2d(in[0], in[1], c.strides(), c.padding, c.dilations(), c.explicit_paddings());
}

// A pool's configuration: no dilation, pads smaller than the 3x2 windows of the tests.
Config pool_config(const Config& c) {
  Config p = c;
  p.dilation_h = p.dilation_w = 1;
  for (int64_t& pad : p.pads) pad = std::min<int64_t>(pad, 1);
  return p;
}

DTensor max_pool(const DTensor& x, const Config& c, int64_t k_h = 3, int64_t k_w = 2) {
  return max_pool2d(x, {k_h, k_w}, c.strides(), c.padding, c.explicit_paddings());
}

DTensor avg_pool(const DTensor& x, const Config& c, int64_t k_h = 3, int64_t k_w = 2) {
  return avg_pool2d(x, {k_h, k_w}, c.strides(), c.padding, c.explicit_paddings());
}

// conv2d and its gradient ops, with attrs.shape for the gradient ops.
OpFn conv_op(const char* name, const Config& c, const std::vector<int64_t>& target = {}) {
  return [name, c, target](const Inputs& in) {
    OpAttrs a;
    a.strides = c.strides();
    a.dilations = c.dilations();
    a.padding = c.padding;
    a.explicit_paddings = c.explicit_paddings();
    a.shape = target;
    return call_op(name, in, a);
  };
}

// ---- exact and reference values --------------------------------------------------------------

TEST(ConvValues, HandComputedSmallCases) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh one = Mesh::create({{"x", 1}});
  std::vector<double> v(9);
  for (int i = 0; i < 9; ++i) v[static_cast<size_t>(i)] = i + 1;  // 1 .. 9 in a 3x3 image
  const DTensor x =
      copy_to_mesh(Tensor::from_vector<double>(v, {1, 3, 3, 1}), Layout::replicated(one, 4), rt);
  const DTensor ones =
      copy_to_mesh(Tensor::full({2, 2, 1, 1}, DType::kF64, 1.0), Layout::replicated(one, 4), rt);
  EXPECT_EQ(values(conv2d(x, ones, {1}, "VALID")), (std::vector<double>{12, 16, 24, 28}));
  // SAME with a 2x2 filter pads one cell after (bottom, right): TF's split.
  EXPECT_EQ(values(conv2d(x, ones, {1}, "SAME")),
            (std::vector<double>{12, 16, 9, 24, 28, 15, 15, 17, 9}));
  EXPECT_EQ(conv2d(x, ones, {2}, "SAME").shape(), Shape({1, 2, 2, 1}));
  EXPECT_EQ(values(max_pool2d(x, {2}, {1}, "VALID")), (std::vector<double>{5, 6, 8, 9}));
  EXPECT_EQ(values(avg_pool2d(x, {2}, {2}, "SAME")), (std::vector<double>{3, 4.5, 7.5, 9}));
  EXPECT_EQ(values(max_pool2d(x, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME")),
            (std::vector<double>{5, 6, 8, 9}));
}

TEST(ConvValues, MatchTheDirectSumForEveryWindowKind) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh one = Mesh::create({{"x", 1}});
  uint64_t seed = 1;
  for (const Config& c : configs()) {
    const Tensor x = random_host({2, 7, 6, 3}, DType::kF64, seed++);
    const Tensor w = random_host({3, 2, 3, 4}, DType::kF64, seed++);
    const DTensor y = conv({copy_to_mesh(x, Layout::replicated(one, 4), rt),
                            copy_to_mesh(w, Layout::replicated(one, 4), rt)},
                           c);
    const RefWindow r = ref_window(c, 7, 6, 3, 2);
    EXPECT_EQ(y.shape(), Shape({2, r.out_h, r.out_w, 4})) << describe(c);
    expect_near_all(values(y), reference_conv(x, w, c), 1e-12, describe(c));
    const Config p = pool_config(c);
    const DTensor xd = copy_to_mesh(x, Layout::replicated(one, 4), rt);
    expect_near_all(values(max_pool(xd, p)), reference_pool(x, 3, 2, p, true), 0,
                    "max " + describe(p));
    expect_near_all(values(avg_pool(xd, p)), reference_pool(x, 3, 2, p, false), 1e-14,
                    "avg " + describe(p));
  }
}

TEST(ConvValues, PointwiseAndF32AndEmpty) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const Layout rows = Layout({"x", "unsharded", "unsharded", "unsharded"}, mesh);
  const Layout whole = Layout::replicated(mesh, 4);
  const Tensor x = random_host({4, 5, 3, 6}, DType::kF64, 11);
  const Tensor w = random_host({1, 1, 6, 2}, DType::kF64, 12);
  // A 1x1 stride-1 convolution is one GEMM on the input itself.
  expect_near_all(
      values(conv2d(copy_to_mesh(x, rows, rt), copy_to_mesh(w, whole, rt), {1}, "SAME")),
      reference_conv(x, w, Config("SAME")), 1e-12, "1x1");
  // f32.
  const Tensor w3 = random_host({3, 3, 6, 2}, DType::kF64, 13);
  const DTensor y32 = conv2d(copy_to_mesh(x.astype(DType::kF32), rows, rt),
                             copy_to_mesh(w3.astype(DType::kF32), whole, rt), {2}, "SAME");
  EXPECT_EQ(y32.dtype(), DType::kF32);
  expect_near_all(values(y32), reference_conv(x, w3, Config("SAME", 2, 2)), 1e-4, "f32");
  // No images, and no output channels: empty outputs.
  const DTensor none = copy_to_mesh(Tensor::zeros({0, 5, 3, 6}, DType::kF64), whole, rt);
  EXPECT_EQ(conv2d(none, copy_to_mesh(w3, whole, rt), {1}, "SAME").shape(), Shape({0, 5, 3, 2}));
  EXPECT_EQ(max_pool2d(none, {2}, {2}, "VALID").shape(), Shape({0, 2, 1, 6}));
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// Images large enough that the kernels unfold their output rows in several blocks (a block
// boundary inside an image): values against the direct sum, and the gradient ops against it by
// the adjoint identities <conv(x, w), dy> = <x, d input> = <w, d filters>.
TEST(ConvValues, LargeImagesUnfoldInSeveralBlocks) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const Layout whole = Layout::replicated(mesh, 4);
  const Config c("SAME", 1, 1);
  const Tensor x = random_host({2, 130, 130, 32}, DType::kF64, 51);
  const Tensor w = random_host({3, 3, 32, 4}, DType::kF64, 52);
  const Tensor dy = random_host({2, 130, 130, 4}, DType::kF64, 53);
  const DTensor dx_ = copy_to_mesh(x, whole, rt), dw_ = copy_to_mesh(w, whole, rt);
  const DTensor ddy = copy_to_mesh(dy, whole, rt);
  const std::vector<double> y = reference_conv(x, w, c);
  expect_near_all(values(conv({dx_, dw_}, c)), y, 1e-10, "forward");
  const double want = dot(y, dy.to_doubles());
  const double got_input = dot(
      x.to_doubles(), values(conv_op("conv2d_backprop_input", c, x.shape().dims())({ddy, dw_})));
  const double got_filter = dot(
      w.to_doubles(), values(conv_op("conv2d_backprop_filter", c, w.shape().dims())({dx_, ddy})));
  EXPECT_NEAR(got_input, want, 1e-9 * std::abs(want));
  EXPECT_NEAR(got_filter, want, 1e-9 * std::abs(want));
}

TEST(PoolValues, MaxTakesNaNAndTheGradientGoesToTheFirstOfTies) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh one = Mesh::create({{"x", 1}});
  const Layout l = Layout::replicated(one, 4);
  // A 2x2 window of 7s: the gradient goes to the first cell (row-major).
  const DTensor ties = copy_to_mesh(Tensor::full({1, 2, 2, 1}, DType::kF64, 7.0), l, rt);
  const auto [value, grads] = value_and_grad(
      [](const Inputs& p) { return reduce_sum(max_pool2d(p[0], {2}, {2}, "VALID")); }, {ties});
  EXPECT_EQ(values(value), (std::vector<double>{7}));
  EXPECT_EQ(values(grads[0]), (std::vector<double>{1, 0, 0, 0}));
  // Overlapping windows (stride 1) send each its gradient: the middle 9 wins all four.
  const DTensor peak =
      copy_to_mesh(Tensor::from_vector<double>({0, 1, 0, 1, 9, 1, 0, 1, 0}, {1, 3, 3, 1}), l, rt);
  const auto [v2, g2] = value_and_grad(
      [](const Inputs& p) { return reduce_sum(max_pool2d(p[0], {2}, {1}, "VALID")); }, {peak});
  EXPECT_EQ(values(g2[0]), (std::vector<double>{0, 0, 0, 0, 4, 0, 0, 0, 0}));
  const DTensor nan =
      copy_to_mesh(Tensor::from_vector<double>({1, NAN, 3, 4}, {1, 2, 2, 1}), l, rt);
  EXPECT_TRUE(std::isnan(values(max_pool2d(nan, {2}, {2}, "VALID"))[0]));
  // Padded cells never win, even over negative values.
  const DTensor neg = copy_to_mesh(Tensor::full({1, 1, 1, 1}, DType::kF64, -5.0), l, rt);
  EXPECT_EQ(values(max_pool2d(neg, {3}, {1}, "SAME")), (std::vector<double>{-5}));
  EXPECT_EQ(values(avg_pool2d(neg, {3}, {1}, "SAME")), (std::vector<double>{-5}));
}

// ---- sharding rules (plan_op) -----------------------------------------------------------------

TensorSpec spec(const Shape& shape, const Layout& layout) {
  return TensorSpec{shape, DType::kF32, layout};
}

OpAttrs conv_attrs() {
  OpAttrs a;
  a.strides = {1};
  a.padding = "SAME";
  return a;
}

// 2x2 windows, stride 2, "VALID".
OpAttrs pool_attrs() {
  OpAttrs a;
  a.ksize = {2};
  a.strides = {2};
  a.padding = "VALID";
  return a;
}

TEST(ConvRule, BatchSharding) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout batch({"x", "unsharded", "unsharded", "unsharded"}, mesh);
  const Layout whole = Layout::replicated(mesh, 4);
  const ShardingDecision d =
      plan_op("conv2d", {spec({8, 6, 6, 3}, batch), spec({3, 3, 3, 16}, whole)}, conv_attrs());
  EXPECT_EQ(d.inputs[0], batch);
  EXPECT_EQ(d.inputs[1], whole);
  EXPECT_EQ(d.output, batch);
  // The filter gradient: Partial(sum) over the batch's mesh dim, no gather.
  OpAttrs filter = conv_attrs();
  filter.shape = {3, 3, 3, 16};
  const ShardingDecision f = plan_op(
      "conv2d_backprop_filter", {spec({8, 6, 6, 3}, batch), spec({8, 6, 6, 16}, batch)}, filter);
  EXPECT_EQ(f.inputs[0], batch);
  EXPECT_EQ(f.inputs[1], batch);
  EXPECT_EQ(f.output, whole.with_partial({{"x", ReduceOp::kSum}}));
  OpAttrs input = conv_attrs();
  input.shape = {8, 6, 6, 3};
  const ShardingDecision i = plan_op(
      "conv2d_backprop_input", {spec({8, 6, 6, 16}, batch), spec({3, 3, 3, 16}, whole)}, input);
  EXPECT_EQ(i.output, batch);
  // The pools keep the batch sharding too.
  const OpAttrs pool = pool_attrs();
  EXPECT_EQ(plan_op("max_pool2d", {spec({8, 6, 6, 3}, batch)}, pool).output, batch);
  EXPECT_EQ(plan_op("avg_pool2d", {spec({8, 6, 6, 3}, batch)}, pool).output, batch);
}

TEST(ConvRule, OutputAndInputChannelSharding) {
  const Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}});
  const Layout batch({"x", "unsharded", "unsharded", "unsharded"}, mesh);
  // Filters sharded over their output channels: the output's channels follow.
  ShardingDecision d =
      plan_op("conv2d",
              {spec({8, 6, 6, 3}, batch),
               spec({3, 3, 3, 16}, Layout({"unsharded", "unsharded", "unsharded", "y"}, mesh))},
              conv_attrs());
  EXPECT_EQ(d.output, Layout({"x", "unsharded", "unsharded", "y"}, mesh));
  // Input channels sharded like the filters' input channels: a Partial(sum) output.
  const Layout channels({"x", "unsharded", "unsharded", "y"}, mesh);
  const Layout filter_in({"unsharded", "unsharded", "y", "unsharded"}, mesh);
  d = plan_op("conv2d", {spec({8, 6, 6, 4}, channels), spec({3, 3, 4, 16}, filter_in)},
              conv_attrs());
  EXPECT_EQ(d.inputs[0], channels);
  EXPECT_EQ(d.inputs[1], filter_in);
  EXPECT_EQ(d.output, batch.with_partial({{"y", ReduceOp::kSum}}));
  // Only the input's channels sharded: the (smaller) filters are sliced to match.
  d = plan_op("conv2d",
              {spec({8, 6, 6, 4}, channels), spec({3, 3, 4, 16}, Layout::replicated(mesh, 4))},
              conv_attrs());
  EXPECT_EQ(d.inputs[1], filter_in);
  EXPECT_TRUE(d.output.is_partial());
  // A Partial(sum) input stays pending for conv2d and avg_pool2d, not max_pool2d.
  const Layout pending = batch.with_partial({{"y", ReduceOp::kSum}});
  d = plan_op("conv2d",
              {spec({8, 6, 6, 4}, pending), spec({3, 3, 4, 16}, Layout::replicated(mesh, 4))},
              conv_attrs());
  EXPECT_EQ(d.output, pending);
  const OpAttrs pool = pool_attrs();
  EXPECT_EQ(plan_op("avg_pool2d", {spec({8, 6, 6, 4}, pending)}, pool).output, pending);
  EXPECT_EQ(plan_op("max_pool2d", {spec({8, 6, 6, 4}, pending)}, pool).output, batch);
}

TEST(ConvRule, SpatialShardingFallsBackOrIsRefusedInStrictMode) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const Layout rows_h({"unsharded", "x", "unsharded", "unsharded"}, mesh);
  const Tensor x = random_host({2, 6, 5, 3}, DType::kF64, 21);
  const Tensor w = random_host({3, 3, 3, 2}, DType::kF64, 22);
  const DTensor dx = copy_to_mesh(x, rows_h, rt);
  const DTensor dw = copy_to_mesh(w, Layout::replicated(mesh, 4), rt);
  reset_sharding_fallbacks();
  const Config same("SAME");
  expect_near_all(values(conv({dx, dw}, same)), reference_conv(x, w, same), 1e-12, "fallback");
  const std::vector<FallbackRecord> records = sharding_fallbacks();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].op, "conv2d");
  expect_near_all(values(max_pool2d(dx, {2}, {2}, "SAME")),
                  reference_pool(x, 2, 2, Config("SAME", 2, 2), true), 0, "pool fallback");
  set_sharding_fallback_strict(true);
  EXPECT_TESSEL_ERROR(conv({dx, dw}, same), ErrorCode::kUnimplemented, "height and width");
  EXPECT_TESSEL_ERROR(avg_pool2d(dx, {2}, {2}, "SAME"), ErrorCode::kUnimplemented, "avg_pool2d");
  set_sharding_fallback_strict(false);
  reset_sharding_fallbacks();
}

// ---- random layouts against a single device ---------------------------------------------------

TEST(ConvMatchesSingleDevice, ConvAndItsGradientOpsOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(31);
  const std::vector<Config> cs = configs();
  for (const Mesh& mesh : small_meshes()) {
    for (size_t t = 0; t < cs.size(); ++t) {
      const Config& c = cs[t];
      SCOPED_TRACE(describe(c) + " on " + mesh.to_string());
      const Shape xs{5, 7, 6, 4}, ws{3, 2, 4, 6};
      const RefWindow r = ref_window(c, 7, 6, 3, 2);
      const Shape ys{5, r.out_h, r.out_w, 6};
      const auto layout = [&](const Shape& s) {
        return random_op_layout(mesh, s.rank(), rng, true);
      };
      expect_matches_single_device(
          conv_op("conv2d", c),
          {random_host(xs, DType::kF64, rng()), random_host(ws, DType::kF64, rng())},
          {layout(xs), layout(ws)}, rt, rng, 1e-11);
      expect_matches_single_device(
          conv_op("conv2d_backprop_input", c, xs.dims()),
          {random_host(ys, DType::kF64, rng()), random_host(ws, DType::kF64, rng())},
          {layout(ys), layout(ws)}, rt, rng, 1e-11);
      expect_matches_single_device(
          conv_op("conv2d_backprop_filter", c, ws.dims()),
          {random_host(xs, DType::kF64, rng()), random_host(ys, DType::kF64, rng())},
          {layout(xs), layout(ys)}, rt, rng, 1e-11);
    }
  }
}

TEST(ConvMatchesSingleDevice, PoolsAndTheirGradientsOverRandomLayouts) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(32);
  const Shape xs{5, 7, 6, 4};
  for (const Mesh& mesh : small_meshes()) {
    for (const Config& c : configs()) {
      const Config p = pool_config(c);
      SCOPED_TRACE(describe(p) + " on " + mesh.to_string());
      const RefWindow r = ref_window(p, 7, 6, 3, 2);
      const Shape ys{5, r.out_h, r.out_w, 4};
      // Continuous random values: no ties, so a reduced Partial moves no argmax.
      expect_matches_single_device([p](const Inputs& in) { return max_pool(in[0], p); },
                                   {random_host(xs, DType::kF64, rng())},
                                   {random_op_layout(mesh, 4, rng, true)}, rt, rng, 1e-12);
      expect_matches_single_device([p](const Inputs& in) { return avg_pool(in[0], p); },
                                   {random_host(xs, DType::kF64, rng())},
                                   {random_op_layout(mesh, 4, rng, true)}, rt, rng, 1e-12);
      OpAttrs a;
      a.ksize = {3, 2};
      a.strides = p.strides();
      a.padding = p.padding;
      a.explicit_paddings = p.explicit_paddings();
      expect_matches_single_device(
          [a](const Inputs& in) { return call_op("max_pool2d_grad", in, a); },
          {random_host(xs, DType::kF64, rng()), random_host(ys, DType::kF64, rng())},
          {random_op_layout(mesh, 4, rng, true), random_op_layout(mesh, 4, rng, true)}, rt, rng,
          1e-12);
      OpAttrs avg = a;
      avg.shape = xs.dims();
      expect_matches_single_device(
          [avg](const Inputs& in) { return call_op("avg_pool2d_grad", in, avg); },
          {random_host(ys, DType::kF64, rng())}, {random_op_layout(mesh, 4, rng, true)}, rt, rng,
          1e-12);
    }
  }
}

// ---- VJPs -------------------------------------------------------------------------------------

TEST(ConvVjp, ConvIntoInputAndFiltersMatchesFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(41);
  const std::vector<Config> cs = configs();
  for (size_t t = 0; t < cs.size(); ++t) {
    const Mesh mesh = small_meshes()[t % 3];
    SCOPED_TRACE(describe(cs[t]) + " on " + mesh.to_string());
    const Shape xs{2, 5, 6, 2}, ws{2, 3, 2, 3};
    expect_vjp_matches_finite_differences(
        conv_op("conv2d", cs[t]),
        {random_host(xs, DType::kF64, rng()), random_host(ws, DType::kF64, rng())},
        {random_op_layout(mesh, 4, rng, true), random_op_layout(mesh, 4, rng, true)}, rt, rng,
        1e-6);
  }
}

TEST(ConvVjp, DataParallelFilterGradientIsReducedToTheFiltersLayout) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(42);
  const Mesh mesh = Mesh::create({{"batch", 4}});
  const Layout batch({"batch", "unsharded", "unsharded", "unsharded"}, mesh);
  expect_vjp_matches_finite_differences(
      conv_op("conv2d", Config("SAME")),
      {random_host({4, 4, 4, 2}, DType::kF64, 1), random_host({3, 3, 2, 2}, DType::kF64, 2)},
      {batch, Layout::replicated(mesh, 4)}, rt, rng, 1e-6);
}

TEST(ConvVjp, GradientOpsHaveGradientsToo) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(43);
  const Config c("SAME", 2, 1);
  const Shape xs{2, 5, 4, 2}, ws{3, 2, 2, 3}, ys{2, 3, 4, 3};
  const Mesh mesh = Mesh::create({{"x", 2}});
  expect_vjp_matches_finite_differences(
      conv_op("conv2d_backprop_input", c, xs.dims()),
      {random_host(ys, DType::kF64, rng()), random_host(ws, DType::kF64, rng())},
      {random_op_layout(mesh, 4, rng, true), random_op_layout(mesh, 4, rng, true)}, rt, rng, 1e-6);
  expect_vjp_matches_finite_differences(
      conv_op("conv2d_backprop_filter", c, ws.dims()),
      {random_host(xs, DType::kF64, rng()), random_host(ys, DType::kF64, rng())},
      {random_op_layout(mesh, 4, rng, true), random_op_layout(mesh, 4, rng, true)}, rt, rng, 1e-6);
  OpAttrs avg;
  avg.ksize = {2};
  avg.strides = {1};
  avg.padding = "SAME";
  avg.shape = xs.dims();
  expect_vjp_matches_finite_differences(
      [avg](const Inputs& in) { return call_op("avg_pool2d_grad", in, avg); },
      {random_host({2, 5, 4, 2}, DType::kF64, rng())}, {random_op_layout(mesh, 4, rng, true)}, rt,
      rng, 1e-6);
}

TEST(PoolVjp, MaxAndAverageMatchFiniteDifferences) {
  Runtime rt({.num_cpu_devices = 4});
  std::mt19937 rng(44);
  const std::vector<Config> cs = configs();
  for (size_t t = 0; t < cs.size(); ++t) {
    const Mesh mesh = small_meshes()[t % 3];
    const Config p = pool_config(cs[t]);
    SCOPED_TRACE(describe(p) + " on " + mesh.to_string());
    // Distinct values (a permutation, spaced far beyond the finite-difference step): no ties.
    Tensor x = Tensor::zeros({2, 5, 4, 2}, DType::kF64);
    std::vector<double> perm(80);
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = 0.1 * static_cast<double>(i);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::copy(perm.begin(), perm.end(), x.data<double>());
    expect_vjp_matches_finite_differences([p](const Inputs& in) { return max_pool(in[0], p); }, {x},
                                          {random_op_layout(mesh, 4, rng, false)}, rt, rng, 1e-6);
    expect_vjp_matches_finite_differences([p](const Inputs& in) { return avg_pool(in[0], p); },
                                          {random_host({2, 5, 4, 2}, DType::kF64, rng())},
                                          {random_op_layout(mesh, 4, rng, true)}, rt, rng, 1e-6);
  }
}

// ---- errors -----------------------------------------------------------------------------------

TEST(ConvErrors, BadShapesAttributesAndDtypesNameTheOpAndTheValue) {
  Runtime rt({.num_cpu_devices = 4});
  const Mesh mesh = Mesh::create({{"x", 2}});
  const auto put = [&](const Shape& s, DType dtype = DType::kF64) {
    return copy_to_mesh(Tensor::zeros(s, dtype), Layout::replicated(mesh, s.rank()), rt);
  };
  const DTensor x = put({2, 5, 5, 3}), w = put({3, 3, 3, 4});
  EXPECT_TESSEL_ERROR(conv2d(put({5, 5, 3}), w, {1}, "SAME"), ErrorCode::kInvalidArgument,
                      "conv2d: the input must have rank 4 (NHWC), got shape [5,5,3]");
  EXPECT_TESSEL_ERROR(conv2d(x, put({3, 3, 3}), {1}, "SAME"), ErrorCode::kInvalidArgument,
                      "the filters must have rank 4 (HWIO");
  EXPECT_TESSEL_ERROR(conv2d(x, put({3, 3, 2, 4}), {1}, "SAME"), ErrorCode::kInvalidArgument,
                      "the input has 3 channels (shape [2,5,5,3], NHWC) but the filters take 2");
  EXPECT_TESSEL_ERROR(conv2d(x, w, {0}, "SAME"), ErrorCode::kInvalidArgument,
                      "conv2d: strides must be >= 1, got [0]");
  EXPECT_TESSEL_ERROR(conv2d(x, w, {1, 2, 3}, "SAME"), ErrorCode::kInvalidArgument,
                      "strides must have 1, 2 or 4 entries, got 3 ([1,2,3])");
  EXPECT_TESSEL_ERROR(conv2d(x, w, {2, 1, 1, 1}, "SAME"), ErrorCode::kInvalidArgument,
                      "strides [2,1,1,1] acts on the batch or channel dimension");
  EXPECT_TESSEL_ERROR(conv2d(x, w, {}, "SAME"), ErrorCode::kInvalidArgument, "strides is required");
  EXPECT_TESSEL_ERROR(conv2d(x, w, {1}, "same"), ErrorCode::kInvalidArgument,
                      "padding must be \"SAME\", \"VALID\" or \"EXPLICIT\", got \"same\"");
  EXPECT_TESSEL_ERROR(conv2d(x, w, {1}, "SAME", {1, -1}), ErrorCode::kInvalidArgument,
                      "dilations must be >= 1, got [1,-1]");
  EXPECT_TESSEL_ERROR(conv2d(x, w, {1}, "EXPLICIT", {1}, {0, 0, 1, 1}), ErrorCode::kInvalidArgument,
                      "explicit_paddings must have 8 entries");
  EXPECT_TESSEL_ERROR(conv2d(x, w, {1}, "EXPLICIT", {1}, {1, 0, 1, 1, 1, 1, 0, 0}),
                      ErrorCode::kInvalidArgument, "pads the batch or channel dimension");
  EXPECT_TESSEL_ERROR(conv2d(x, w, {1}, "EXPLICIT", {1}, {0, 0, -1, 1, 1, 1, 0, 0}),
                      ErrorCode::kInvalidArgument, "explicit_paddings must be >= 0");
  EXPECT_TESSEL_ERROR(conv2d(x, w, {1}, "SAME", {1}, {0, 0, 1, 1, 1, 1, 0, 0}),
                      ErrorCode::kInvalidArgument, "but padding is \"SAME\"");
  EXPECT_TESSEL_ERROR(conv2d(x, put({6, 3, 3, 4}), {1}, "VALID"), ErrorCode::kInvalidArgument,
                      "the window spans 6 cells in height (6 taps, dilation 1) but the input's "
                      "height is 5 (padding \"VALID\"), so no window fits");
  EXPECT_TESSEL_ERROR(conv2d(x, w, {1}, "VALID", {3}), ErrorCode::kInvalidArgument,
                      "the window spans 7 cells in height (3 taps, dilation 3)");
  EXPECT_TESSEL_ERROR(conv2d(x, put({3, 3, 3, 4}, DType::kF32), {1}, "SAME"),
                      ErrorCode::kInvalidArgument,
                      "the input and the filters have different dtypes: f64 and f32");
  EXPECT_TESSEL_ERROR(
      conv2d(put({2, 5, 5, 3}, DType::kI64), put({3, 3, 3, 4}, DType::kI64), {1}, "SAME"),
      ErrorCode::kUnimplemented, "conv2d");
  EXPECT_TESSEL_ERROR(max_pool2d(x, {}, {1}, "SAME"), ErrorCode::kInvalidArgument,
                      "max_pool2d: ksize is required");
  EXPECT_TESSEL_ERROR(avg_pool2d(x, {1, 2, 2, 2}, {1}, "SAME"), ErrorCode::kInvalidArgument,
                      "avg_pool2d: ksize [1,2,2,2] acts on the batch or channel dimension");
  EXPECT_TESSEL_ERROR(max_pool2d(x, {2}, {1}, "EXPLICIT", {0, 0, 2, 0, 0, 0, 0, 0}),
                      ErrorCode::kInvalidArgument, "must be smaller than the window (2x2)");
  EXPECT_TESSEL_ERROR(max_pool2d(put({2, 5}), {2}, {1}, "SAME"), ErrorCode::kInvalidArgument,
                      "max_pool2d: the input must have rank 4");
  // The gradient ops check their target shape and the gradient's.
  OpAttrs a;
  a.strides = {1};
  a.padding = "SAME";
  EXPECT_TESSEL_ERROR(call_op("conv2d_backprop_input", {put({2, 5, 5, 4}), w}, a),
                      ErrorCode::kInvalidArgument,
                      "the input must have rank 4 (NHWC), got shape []");
  a.shape = {2, 5, 5, 3};
  EXPECT_TESSEL_ERROR(call_op("conv2d_backprop_input", {put({2, 4, 5, 4}), w}, a),
                      ErrorCode::kInvalidArgument,
                      "the output gradient has shape [2,4,5,4] but conv2d of an input [2,5,5,3] "
                      "with filters [3,3,3,4] gives [2,5,5,4]");
}

}  // namespace
}  // namespace tessel
