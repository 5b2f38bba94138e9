// The ops' CUDA kernels (src/dtensor/ops/cuda/gpu_elementwise.cu, gpu_rows.cu, gpu_move.cu,
// gpu_xent.cu) against their CPU kernels: each op on a 1-device mesh of the GPU and on a 1-device
// CPU mesh, same inputs,
// f32 (relative 1e-5, absolute 1e-5 below magnitude 1; bit-exact for the ops whose math is exact)
// and f64 (1e-12), over shapes with odd sizes (1, 7, 1000, 4097) and broadcasting; and
// host_staged_kernel_calls() unchanged for the op, so the GPU kernel ran rather than the CPU
// kernel on host copies. The cases a GPU kernel leaves to the host (too many broadcast
// dimensions, reduced axes that are not adjacent) are checked to run host-staged and match too.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "tessel/core/error.h"
#include "tessel/dtensor/dtensor_api.h"
#include "tessel/dtensor/op_registry.h"

namespace tessel {
namespace {

using testing::GpuTest;

enum class Match { kExact, kClose };

constexpr DType kDtypes[] = {DType::kF32, DType::kF64};

Tensor uniform(const Shape& shape, DType dtype, uint64_t seed, double low = -2.0,
               double high = 2.0) {
  return Tensor::random_uniform(shape, dtype, seed, low, high);
}

class GpuOpKernels : public GpuTest {
 protected:
  Mesh cpu_mesh() { return Mesh::create_on_devices({{"x", 1}}, {runtime().device(0).name()}); }
  Mesh gpu_mesh() { return Mesh::create_on_devices({{"x", 1}}, {gpu().name()}); }

  static std::vector<DTensor> place(const std::vector<Tensor>& inputs, const Mesh& mesh,
                                    Runtime& rt) {
    std::vector<DTensor> out;
    for (const Tensor& t : inputs)
      out.push_back(copy_to_mesh(t, Layout::replicated(mesh, t.rank()), rt));
    return out;
  }

  // Runs `op` on both meshes and compares; `staged` is whether the GPU block should run
  // host-staged (a case the GPU kernel does not cover).
  void expect_matches_cpu(const std::string& op, const std::vector<Tensor>& inputs,
                          const OpAttrs& attrs, Match match, bool staged = false) {
    expect_matches_cpu_on_meshes(
        op, inputs, [&](const Mesh&) { return attrs; }, match, staged);
  }

  // Op `op` on `inputs` on the CPU mesh, on the host (an input computed by another op).
  Tensor cpu_value(const std::string& op, const std::vector<Tensor>& inputs, const OpAttrs& attrs) {
    return to_host(call_op(op, place(inputs, cpu_mesh(), runtime()), attrs));
  }

  // The layer norm's ops (norm "layer_norm") and RMS norm's (norm "rms_norm": the same kernels, the
  // mean taken as 0).
  void expect_norm_ops_match_the_cpu_kernels(const std::string& norm) {
    const std::vector<Shape> shapes = {Shape({1}),       Shape({4, 1}),    Shape({7, 1000}),
                                       Shape({3, 4097}), Shape({2, 3, 7}), Shape({0, 5})};
    for (DType dtype : kDtypes) {
      for (const Shape& shape : shapes) {
        const Shape channels({shape[shape.rank() - 1]});
        OpAttrs attrs;
        attrs.epsilon = 1e-5;
        const Tensor x = uniform(shape, dtype, 17, -3, 3);
        const Tensor w = uniform(channels, dtype, 18, 0.5, 1.5);
        const Tensor b = uniform(channels, dtype, 19);
        const Tensor g = uniform(shape, dtype, 20);
        expect_matches_cpu(norm, {x, w}, attrs, Match::kClose);
        if (norm == "layer_norm") {
          expect_matches_cpu("layer_norm_with_bias", {x, w, b}, attrs, Match::kClose);
        }
        // f32 rows: the GPU's statistics are doubles, the CPU's float32 ones (as each forward
        // kernel uses them); the gradients below read the same given statistics.
        if (dtype == DType::kF64) expect_matches_cpu(norm + "_stats", {x}, attrs, Match::kClose);
        const Tensor stats = cpu_value(norm + "_stats", {x}, attrs);
        expect_matches_cpu(norm + "_grad", {x, w, g, stats}, attrs, Match::kClose);
        expect_matches_cpu(norm + "_weight_grad", {x, g, stats}, attrs, Match::kClose);
      }
    }
  }

  // The same for ops whose attrs name a layout of the mesh they run on (creation ops,
  // embedding_lookup_grad): `attrs_for(mesh)`.
  void expect_matches_cpu_on_meshes(const std::string& op, const std::vector<Tensor>& inputs,
                                    const std::function<OpAttrs(const Mesh&)>& attrs_for,
                                    Match match, bool staged = false) {
    SCOPED_TRACE(op + " on " + describe(inputs));
    const Mesh cpu = cpu_mesh(), gpu = gpu_mesh();
    const Tensor want = to_host(call_op(op, place(inputs, cpu, runtime()), attrs_for(cpu)));
    const int64_t staged_before = host_staged_kernel_calls()[op];
    const Tensor got = to_host(call_op(op, place(inputs, gpu, runtime()), attrs_for(gpu)));
    EXPECT_EQ(host_staged_kernel_calls()[op] - staged_before, staged ? 1 : 0)
        << (staged ? "expected the host-staged fallback" : "the GPU kernel did not run");
    ASSERT_EQ(got.shape(), want.shape());
    ASSERT_EQ(got.dtype(), want.dtype());
    const Tensor g = got.astype(DType::kF64), w = want.astype(DType::kF64);
    const std::vector<double> gv = g.to_vector<double>(), wv = w.to_vector<double>();
    // 16-bit outputs: the GPU sums in f32 and rounds once; the CPU's bf16 kernel too (one
    // rounding apart at most, 2^-8), its f16 one (MKL's hgemm) sums in f16.
    const double rtol = want.dtype() == DType::kF64   ? 1e-12
                        : want.dtype() == DType::kF32 ? 1e-5
                                                      : 3e-2;
    int reported = 0;
    for (size_t i = 0; i < wv.size() && reported < 5; ++i) {
      const bool both_nan = std::isnan(gv[i]) && std::isnan(wv[i]);
      const bool ok =
          both_nan || (match == Match::kExact
                           ? gv[i] == wv[i]
                           : std::abs(gv[i] - wv[i]) <= rtol * std::max(1.0, std::abs(wv[i])));
      if (!ok) {
        ++reported;
        ADD_FAILURE() << "element " << i << ": GPU " << gv[i] << ", CPU " << wv[i];
      }
    }
  }

  // Runs `op` on the GPU with a bad label among `inputs` and expects the CPU kernels' error for
  // `first_bad`, the first row's bad label, raised by the GPU kernel (nothing host-staged).
  void expect_bad_label_reported(const std::string& op, const std::vector<Tensor>& inputs,
                                 const OpAttrs& attrs, int64_t first_bad, int64_t classes) {
    SCOPED_TRACE(op + " on " + describe(inputs));
    const std::vector<DTensor> on_gpu = place(inputs, gpu_mesh(), runtime());
    const int64_t staged_before = host_staged_kernel_calls()[op];
    try {
      to_host(call_op(op, on_gpu, attrs));
      ADD_FAILURE() << "label " << first_bad << " was not reported";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      const std::string what = e.what();
      EXPECT_NE(what.find(op), std::string::npos) << what;
      EXPECT_NE(
          what.find("Received a label value of " + std::to_string(first_bad) +
                    " which is outside the valid range of [0, " + std::to_string(classes) + ")"),
          std::string::npos)
          << what;
    }
    EXPECT_EQ(host_staged_kernel_calls()[op], staged_before) << "the GPU kernel did not run";
  }

  static std::string describe(const std::vector<Tensor>& inputs) {
    std::string s;
    for (const Tensor& t : inputs)
      s += t.shape().to_string() + " " + std::string(dtype_name(t.dtype())) + " ";
    return s;
  }
};

const std::vector<Shape> kUnaryShapes = {Shape({1}),    Shape({7}),       Shape({1000}),
                                         Shape({4097}), Shape({3, 5, 7}), Shape()};

TEST_F(GpuOpKernels, UnaryOpsMatchTheCpuKernels) {
  struct Case {
    const char* op;
    Match match;
    double low, high;  // the inputs' range (positive for log, sqrt, rsqrt)
  };
  const Case cases[] = {{"negative", Match::kExact, -2, 2}, {"relu", Match::kExact, -2, 2},
                        {"sqrt", Match::kExact, 0.01, 4},   {"rsqrt", Match::kExact, 0.01, 4},
                        {"exp", Match::kClose, -5, 5},      {"log", Match::kClose, 0.01, 10},
                        {"tanh", Match::kClose, -4, 4},     {"gelu", Match::kClose, -4, 4},
                        {"gelu_erf", Match::kClose, -4, 4}, {"sigmoid", Match::kClose, -6, 6},
                        {"square", Match::kExact, -2, 2},   {"abs", Match::kExact, -2, 2},
                        {"sin", Match::kClose, -4, 4},      {"cos", Match::kClose, -4, 4},
                        {"silu", Match::kClose, -6, 6}};
  for (DType dtype : kDtypes) {
    for (const Case& c : cases) {
      for (const Shape& shape : kUnaryShapes) {
        expect_matches_cpu(c.op, {uniform(shape, dtype, 1, c.low, c.high)}, {}, c.match);
      }
    }
  }
}

TEST_F(GpuOpKernels, ScalarOpsMatchTheCpuKernels) {
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kUnaryShapes) {
      OpAttrs attrs;
      attrs.operand = -0.37;
      expect_matches_cpu("add_scalar", {uniform(shape, dtype, 2)}, attrs, Match::kExact);
      expect_matches_cpu("multiply_scalar", {uniform(shape, dtype, 3)}, attrs, Match::kExact);
      // A positive base: the power is real.
      expect_matches_cpu("pow_scalar", {uniform(shape, dtype, 3, 0.1, 4)}, attrs, Match::kClose);
    }
  }
}

// Pairs of input shapes: equal, scalar-like, trailing and leading broadcasts, both sides
// broadcasting, rank 0, and the most dimensions the GPU kernel takes after merging (6).
const std::vector<std::pair<Shape, Shape>> kBroadcasts = {
    {Shape({4097}), Shape({4097})},       {Shape({1}), Shape({1})},
    {Shape({7, 1000}), Shape({1000})},    {Shape({7, 1000}), Shape({7, 1})},
    {Shape({1}), Shape({4097})},          {Shape(), Shape({3, 7})},
    {Shape({7, 1, 5}), Shape({1, 3, 1})}, {Shape({2, 1, 3, 1, 4, 1}), Shape({1, 5, 1, 2, 1, 3})},
    {Shape({0, 7}), Shape({7})},
};

TEST_F(GpuOpKernels, BinaryOpsMatchTheCpuKernelsWithBroadcasting) {
  const std::pair<const char*, Match> ops[] = {
      {"add", Match::kExact},          {"subtract", Match::kExact},
      {"multiply", Match::kExact},     {"divide", Match::kExact},
      {"maximum", Match::kExact},      {"minimum", Match::kExact},
      {"mask_greater", Match::kExact}, {"mask_greater_equal", Match::kExact},
      {"relu_grad", Match::kExact},    {"tanh_grad", Match::kClose},
      {"gelu_grad", Match::kClose},    {"gelu_erf_grad", Match::kClose},
      {"sigmoid_grad", Match::kClose}, {"abs_grad", Match::kExact},
      {"silu_grad", Match::kClose}};
  for (DType dtype : kDtypes) {
    for (const auto& [op, match] : ops) {
      for (const auto& [a, b] : kBroadcasts) {
        expect_matches_cpu(op, {uniform(a, dtype, 4), uniform(b, dtype, 5)}, {}, match);
        expect_matches_cpu(op, {uniform(b, dtype, 6), uniform(a, dtype, 7)}, {}, match);
      }
    }
    // pow with a positive base: the power is real.
    for (const auto& [a, b] : kBroadcasts) {
      expect_matches_cpu("pow", {uniform(a, dtype, 4, 0.1, 4), uniform(b, dtype, 5)}, {},
                         Match::kClose);
    }
  }
}

TEST_F(GpuOpKernels, MaximumAndMinimumKeepTheCpuRulesForTiesAndNan) {
  const double nan = std::nan("");
  const Tensor a =
      Tensor::from_vector<float>({1, -0.0f, static_cast<float>(nan), 2, 0}, Shape({5}));
  const Tensor b =
      Tensor::from_vector<float>({1, 0.0f, 3, static_cast<float>(nan), -0.0f}, Shape({5}));
  for (const char* op : {"maximum", "minimum", "mask_greater", "mask_greater_equal", "relu_grad"}) {
    expect_matches_cpu(op, {a, b}, {}, Match::kExact);
  }
}

TEST_F(GpuOpKernels, BroadcastsBeyondSixMergedDimensionsRunHostStaged) {
  // Alternating broadcast dims never merge: 8 dims.
  const Shape a({2, 1, 2, 1, 2, 1, 2, 1});
  const Shape b({1, 3, 1, 3, 1, 3, 1, 3});
  expect_matches_cpu("add", {uniform(a, DType::kF32, 8), uniform(b, DType::kF32, 9)}, {},
                     Match::kExact, /*staged=*/true);
}

struct ReduceCase {
  Shape shape;
  std::vector<int64_t> axes;
  bool keepdims;
};

// Reduced axes adjacent once size-1 axes are dropped: the GPU kernel's cases.
const std::vector<ReduceCase> kReductions = {
    {Shape({4097}), {}, false},
    {Shape({1}), {0}, true},
    {Shape({7, 1000}), {1}, false},
    {Shape({7, 1000}), {0}, true},
    {Shape({7, 1000}), {}, false},
    {Shape({3, 5, 7}), {1}, true},
    {Shape({3, 5, 7}), {-1}, false},
    {Shape({1000, 1, 7}), {0, 1}, false},
    {Shape({5, 1, 7}), {0, 2}, true},  // adjacent once the 1 is dropped
    {Shape({4097, 3}), {0}, false},
    {Shape({2, 0, 3}), {1}, false},
    {Shape(), {}, false},
    {Shape({3, 1, 4}), {1}, false},
    // Few long rows, reduced in pieces by whole blocks (gpu_rows.cu): a full reduction of the
    // baby GPT's largest weight, odd lengths, the shortest such row, and more pieces than one
    // row may have (kMaxPieces).
    {Shape({384, 1536}), {}, false},
    {Shape({3, 100003}), {1}, false},
    {Shape({2, 32768}), {-1}, true},
    {Shape({1 << 23}), {0}, false},
};

TEST_F(GpuOpKernels, ReductionsMatchTheCpuKernels) {
  for (DType dtype : kDtypes) {
    for (const ReduceCase& c : kReductions) {
      OpAttrs attrs;
      attrs.axes = c.axes;
      attrs.keepdims = c.keepdims;
      // Positive inputs: a sum's rounding is then relative to its value whatever the order.
      expect_matches_cpu("reduce_sum", {uniform(c.shape, dtype, 10, 0.5, 1.5)}, attrs,
                         Match::kClose);
      expect_matches_cpu("reduce_mean", {uniform(c.shape, dtype, 11, 0.5, 1.5)}, attrs,
                         Match::kClose);
      expect_matches_cpu("reduce_max", {uniform(c.shape, dtype, 12)}, attrs, Match::kExact);
    }
  }
}

TEST_F(GpuOpKernels, ReduceMaxSkipsNanAsTheCpuKernelDoes) {
  const float nan = std::nanf("");
  OpAttrs attrs;
  attrs.axes = {1};
  const Tensor x = Tensor::from_vector<float>({nan, 1, 2, 3, nan, 5, nan, nan, nan}, Shape({3, 3}));
  expect_matches_cpu("reduce_max", {x}, attrs, Match::kExact);
  attrs.axes = {0};
  expect_matches_cpu("reduce_max", {x}, attrs, Match::kExact);
  // A long row, reduced in pieces: NaN skipped in every piece, an all-NaN row gives -inf.
  std::vector<float> values(2 * 70000, nan);
  for (size_t i = 0; i < 70000; i += 7) values[i] = static_cast<float>(i % 1001);
  attrs.axes = {1};
  expect_matches_cpu("reduce_max", {Tensor::from_vector<float>(values, Shape({2, 70000}))}, attrs,
                     Match::kExact);
}

TEST_F(GpuOpKernels, ReductionsOverAxesThatAreNotAdjacentRunHostStaged) {
  OpAttrs attrs;
  attrs.axes = {0, 2};
  expect_matches_cpu("reduce_sum", {uniform(Shape({3, 5, 7}), DType::kF32, 13, 0.5, 1.5)}, attrs,
                     Match::kClose, /*staged=*/true);
}

const std::vector<Shape> kRowShapes = {Shape({1, 1}),    Shape({7}),       Shape({7, 1000}),
                                       Shape({3, 4097}), Shape({2, 3, 5}), Shape({0, 7})};

TEST_F(GpuOpKernels, SoftmaxAndLogSoftmaxMatchTheCpuKernels) {
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kRowShapes) {
      expect_matches_cpu("softmax", {uniform(shape, dtype, 14, -8, 8)}, {}, Match::kClose);
      expect_matches_cpu("log_softmax", {uniform(shape, dtype, 15, -8, 8)}, {}, Match::kClose);
    }
  }
}

TEST_F(GpuOpKernels, CausalSoftmaxMatchesTheCpuKernel) {
  // [..., queries, keys]: square, fewer queries than keys (the last sees every key), more
  // queries than keys (the first rows see none: zeros), long rows.
  const std::vector<Shape> shapes = {Shape({1, 1}),       Shape({2, 7, 7}),   Shape({1, 5, 9}),
                                     Shape({2, 9, 5}),    Shape({3, 64, 64}), Shape({2, 1000}),
                                     Shape({1, 3, 4097}), Shape({2, 2, 0, 7})};
  for (DType dtype : kDtypes) {
    for (const Shape& shape : shapes) {
      for (double scale : {1.0, 0.125}) {
        OpAttrs attrs;
        if (scale != 1.0) attrs.scale = scale;
        expect_matches_cpu("causal_softmax", {uniform(shape, dtype, 16, -8, 8)}, attrs,
                           Match::kClose);
      }
    }
  }
}

TEST_F(GpuOpKernels, LayerNormAndItsGradientMatchTheCpuKernels) {
  expect_norm_ops_match_the_cpu_kernels("layer_norm");
}

TEST_F(GpuOpKernels, RmsNormAndItsGradientMatchTheCpuKernels) {
  expect_norm_ops_match_the_cpu_kernels("rms_norm");
}

TEST_F(GpuOpKernels, ReshapeStopGradientAndTransposeMatchTheCpuKernels) {
  const DType dtypes[] = {DType::kF32, DType::kF64, DType::kI32, DType::kI64};
  for (DType dtype : dtypes) {
    const Tensor x = uniform(Shape({3, 5, 7}), DType::kF64, 21, -100, 100).astype(dtype);
    OpAttrs reshape;
    reshape.shape = {7, -1};
    expect_matches_cpu("reshape", {x}, reshape, Match::kExact);
    expect_matches_cpu("stop_gradient", {x}, {}, Match::kExact);
    for (const std::vector<int64_t>& perm :
         {std::vector<int64_t>{}, {0, 2, 1}, {2, 0, 1}, {1, 0, 2}, {0, 1, 2}, {-1, 0, 1}}) {
      OpAttrs attrs;
      attrs.perm = perm;
      expect_matches_cpu("transpose", {x}, attrs, Match::kExact);
    }
  }
  // Attention's [batch, time, heads, dim] -> [batch, heads, time, dim], odd sizes, rank 0 and
  // empty blocks.
  OpAttrs heads;
  heads.perm = {0, 2, 1, 3};
  expect_matches_cpu("transpose", {uniform(Shape({2, 17, 3, 5}), DType::kF32, 22)}, heads,
                     Match::kExact);
  expect_matches_cpu("transpose", {uniform(Shape({1000, 7}), DType::kF32, 23)}, {}, Match::kExact);
  expect_matches_cpu("transpose", {uniform(Shape(), DType::kF32, 24)}, {}, Match::kExact);
  expect_matches_cpu("transpose", {uniform(Shape({0, 7}), DType::kF32, 25)}, {}, Match::kExact);
  expect_matches_cpu("stop_gradient", {uniform(Shape({4097}), DType::kF32, 26)}, {}, Match::kExact);
}

TEST_F(GpuOpKernels, TransposesBeyondSixMergedDimensionsRunHostStaged) {
  OpAttrs attrs;
  attrs.perm = {1, 0, 3, 2, 5, 4, 7, 6};  // no two dims stay adjacent: 8 dims
  expect_matches_cpu("transpose", {uniform(Shape({2, 3, 2, 3, 2, 3, 2, 3}), DType::kF32, 27)},
                     attrs, Match::kExact, /*staged=*/true);
}

TEST_F(GpuOpKernels, ZerosOnesAndFillMatchTheCpuKernels) {
  const DType dtypes[] = {DType::kF32, DType::kF64, DType::kI32, DType::kI64, DType::kBool};
  for (DType dtype : dtypes) {
    for (const Shape& shape : kUnaryShapes) {
      for (const auto& [op, value] : std::vector<std::pair<std::string, double>>{
               {"zeros", 0.0}, {"ones", 1.0}, {"fill", -3.0}, {"fill", -0.0}, {"fill", 0.0}}) {
        const auto attrs_for = [&, value = value](const Mesh& mesh) {
          OpAttrs attrs;
          attrs.shape = shape.dims();
          attrs.layout = Layout::replicated(mesh, shape.rank());
          attrs.dtype = dtype;
          attrs.runtime = &runtime();
          attrs.value = value;
          return attrs;
        };
        expect_matches_cpu_on_meshes(op, {}, attrs_for, Match::kExact);
      }
    }
  }
}

TEST_F(GpuOpKernels, FillKeepsTheSignOfNegativeZero) {
  OpAttrs attrs;
  attrs.shape = {5};
  attrs.layout = Layout::replicated(gpu_mesh(), 1);
  attrs.dtype = DType::kF32;
  attrs.runtime = &runtime();
  attrs.value = -0.0;
  for (float v : to_host(call_op("fill", {}, attrs)).to_vector<float>()) {
    EXPECT_TRUE(std::signbit(v)) << v;
  }
}

TEST_F(GpuOpKernels, OptimizerUpdatesMatchTheCpuKernels) {
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kUnaryShapes) {
      const Tensor p = uniform(shape, dtype, 28);
      const Tensor m = uniform(shape, dtype, 29, -0.1, 0.1);
      const Tensor v = uniform(shape, dtype, 30, 0.0, 0.01);  // a second moment: >= 0
      const Tensor g = uniform(shape, dtype, 31);
      OpAttrs ema;
      ema.beta = 0.9;
      expect_matches_cpu("ema", {m, g}, ema, Match::kClose);
      ema.beta = 0.999;
      expect_matches_cpu("ema_square", {v, g}, ema, Match::kClose);
      OpAttrs adam;
      adam.learning_rate = 3e-4;
      adam.epsilon = 1e-8;
      expect_matches_cpu("adam_apply", {p, m, v}, adam, Match::kClose);
    }
  }
}

TEST_F(GpuOpKernels, ReduceSumGradMatchesTheCpuKernel) {
  for (DType dtype : kDtypes) {
    for (const ReduceCase& c : kReductions) {
      const std::vector<bool> mask = [&] {
        std::vector<bool> m(static_cast<size_t>(c.shape.rank()), c.axes.empty());
        for (int64_t a : c.axes) m[static_cast<size_t>(a < 0 ? a + c.shape.rank() : a)] = true;
        return m;
      }();
      std::vector<int64_t> g_dims;
      for (int d = 0; d < c.shape.rank(); ++d) {
        if (!mask[static_cast<size_t>(d)])
          g_dims.push_back(c.shape[d]);
        else if (c.keepdims)
          g_dims.push_back(1);
      }
      OpAttrs attrs;
      attrs.axes = c.axes;
      attrs.keepdims = c.keepdims;
      attrs.shape = c.shape.dims();
      attrs.scale = 0.25;
      expect_matches_cpu("reduce_sum_grad", {uniform(Shape(g_dims), dtype, 32)}, attrs,
                         Match::kExact);
    }
  }
}

TEST_F(GpuOpKernels, EmbeddingLookupAndItsGradientMatchTheCpuKernels) {
  const int64_t vocab = 50;
  for (DType dtype : kDtypes) {
    for (DType index : {DType::kI32, DType::kI64}) {
      for (int64_t dim : {1, 7, 300}) {
        // Repeated ids: the gradient adds several rows into one.
        const Tensor ids =
            Tensor::from_vector<int64_t>({3, 0, 49, 3, 17, 3, 0, 8, 49, 12, 3}, Shape({11}))
                .astype(index)
                .reshape(Shape({1, 11}));
        const Tensor table = uniform(Shape({vocab, dim}), dtype, 33);
        const Tensor g = uniform(Shape({1, 11, dim}), dtype, 34);
        expect_matches_cpu("embedding_lookup", {table, ids}, {}, Match::kExact);
        const auto grad_attrs = [&](const Mesh& mesh) {
          OpAttrs attrs;
          attrs.vocab_size = vocab;
          attrs.layout = Layout::replicated(mesh, 2);
          return attrs;
        };
        // Atomic adds in another order than the CPU's: close, not exact.
        expect_matches_cpu_on_meshes("embedding_lookup_grad", {ids, g}, grad_attrs, Match::kClose);
      }
    }
  }
}

TEST_F(GpuOpKernels, EmbeddingIdsOutsideTheVocabularyAreReported) {
  const Tensor table = uniform(Shape({5, 3}), DType::kF32, 35);
  for (int64_t bad : {5, -2}) {
    const Tensor ids = Tensor::from_vector<int64_t>({1, bad, 2}, Shape({3}));
    const std::vector<DTensor> on_gpu = place({table, ids}, gpu_mesh(), runtime());
    try {
      to_host(call_op("embedding_lookup", on_gpu, {}));
      ADD_FAILURE() << "id " << bad << " was not reported";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      const std::string what = e.what();
      EXPECT_NE(what.find("embedding_lookup"), std::string::npos) << what;
      EXPECT_NE(what.find("id " + std::to_string(bad) + " is not in [0, 5)"), std::string::npos)
          << what;
    }
  }
}

// The batch shape of logits: their shape without the last (class) axis.
Shape batch_of(const Shape& logits) {
  std::vector<int64_t> dims = logits.dims();
  dims.pop_back();
  return Shape(dims);
}

// Labels of dtype `index` drawn from [low, high).
Tensor labels_in(const Shape& batch, DType index, uint64_t seed, double low, double high) {
  return Tensor::random_uniform(batch, DType::kI64, seed, low, high).astype(index);
}

// The vocabulary-parallel cross entropy's stages (ops_parallel_xent.cpp) on one device's block:
// its classes start at global class 0. Labels include ones outside [0, classes), which the
// parts skip.
TEST_F(GpuOpKernels, CrossEntropyStagesMatchTheCpuKernels) {
  const std::vector<Shape> logit_shapes = {Shape({1, 1}),    Shape({7, 1000}), Shape({3, 4097}),
                                           Shape({2, 3, 5}), Shape({0, 7}),    Shape({4, 0})};
  for (DType dtype : kDtypes) {
    for (DType index : {DType::kI32, DType::kI64}) {
      for (const Shape& shape : logit_shapes) {
        const int64_t classes = shape[shape.rank() - 1];
        const Shape batch = batch_of(shape);
        std::vector<int64_t> pair_dims = batch.dims();
        pair_dims.push_back(2);
        const Shape pairs(pair_dims);
        const Tensor x = uniform(shape, dtype, 36, -8, 8);
        const Tensor m = uniform(batch, dtype, 37, 0, 8);
        const Tensor any_labels = labels_in(batch, index, 38, -1, static_cast<double>(classes) + 1);
        expect_matches_cpu("xent_parts", {any_labels, x, m}, {}, Match::kClose);
        expect_matches_cpu("xent_parts_grad", {any_labels, x, m, uniform(pairs, dtype, 39)}, {},
                           Match::kClose);
        if (classes == 0) continue;  // the last stage needs a class for each label
        const Tensor labels = labels_in(batch, index, 40, 0, static_cast<double>(classes));
        const Tensor parts = uniform(pairs, dtype, 41, 0.5, 3);
        OpAttrs attrs;
        attrs.vocab_size = classes;
        expect_matches_cpu("sparse_softmax_cross_entropy_with_logits.vocab_parallel",
                           {parts, labels}, attrs, Match::kClose);
        expect_matches_cpu("xent_finish_grad", {parts, uniform(batch, dtype, 42)}, {},
                           Match::kExact);
      }
    }
  }
}

// Labels with a bad one in the first, second and fourth row, and the first row's bad label.
const std::vector<std::pair<std::vector<int64_t>, int64_t>> kBadLabels = {
    {{1, 7, -3, 2}, 7}, {{0, 4, -3, 5}, -3}, {{5, 0, 1, 2}, 5}};

// The last stage names the first row's bad label, as the CPU kernel (which stops there) does.
TEST_F(GpuOpKernels, CrossEntropyLabelsOutsideTheClassesAreReported) {
  const Tensor parts = uniform(Shape({4, 2}), DType::kF32, 43, 0.5, 3);
  OpAttrs attrs;
  attrs.vocab_size = 5;
  for (DType index : {DType::kI32, DType::kI64}) {
    for (const auto& [values, first_bad] : kBadLabels) {
      const Tensor labels = Tensor::from_vector<int64_t>(values, Shape({4})).astype(index);
      expect_bad_label_reported("sparse_softmax_cross_entropy_with_logits.vocab_parallel",
                                {parts, labels}, attrs, first_bad, 5);
    }
  }
}

// The mask comes from the CPU's counter hash ported to the device: bit-equal outputs.
TEST_F(GpuOpKernels, DropoutMatchesTheCpuKernelBitForBit) {
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kUnaryShapes) {
      for (double rate : {0.1, 0.5, 0.9}) {
        for (uint64_t seed : {uint64_t{0}, uint64_t{0xDEADBEEFCAFEull}}) {
          OpAttrs attrs;
          attrs.rate = rate;
          attrs.seed = seed;
          expect_matches_cpu("dropout", {uniform(shape, dtype, 44)}, attrs, Match::kExact);
        }
      }
    }
  }
}

struct SliceCase {
  Shape shape;
  std::vector<int64_t> begin, size;  // size -1: to the end
};

// Slices along each axis alone, along every axis at once, the whole tensor, empty slices, rank 0,
// odd sizes and the -1 size.
const std::vector<SliceCase> kSlices = {
    {Shape({4097}), {1}, {4095}},
    {Shape({4097}), {7}, {-1}},
    {Shape({7, 1000}), {2, 0}, {3, -1}},
    {Shape({7, 1000}), {0, 13}, {7, 501}},
    {Shape({3, 5, 7}), {1, 0, 0}, {1, 5, 7}},
    {Shape({3, 5, 7}), {0, 2, 0}, {3, 3, 7}},
    {Shape({3, 5, 7}), {0, 0, 3}, {3, 5, 4}},
    {Shape({3, 5, 7}), {1, 1, 1}, {2, 3, 5}},
    {Shape({3, 5, 7}), {0, 0, 0}, {-1, -1, -1}},
    {Shape({2, 17, 3, 5}), {1, 4, 1, 0}, {1, 9, 1, 5}},
    {Shape({3, 5, 7}), {1, 5, 0}, {2, 0, 7}},
    {Shape(), {}, {}},
};

// slice_grad's gradient shape: the slice's, -1 sizes resolved.
Shape slice_shape(const SliceCase& c) {
  std::vector<int64_t> dims;
  for (int d = 0; d < c.shape.rank(); ++d) {
    const size_t k = static_cast<size_t>(d);
    dims.push_back(c.size[k] == -1 ? c.shape[d] - c.begin[k] : c.size[k]);
  }
  return Shape(dims);
}

OpAttrs slice_attrs(const SliceCase& c) {
  OpAttrs attrs;
  attrs.begin = c.begin;
  attrs.size = c.size;
  return attrs;
}

OpAttrs slice_grad_attrs(const SliceCase& c) {
  OpAttrs attrs;
  attrs.begin = c.begin;
  attrs.shape = c.shape.dims();
  return attrs;
}

const DType kCopyDtypes[] = {DType::kF32, DType::kF64, DType::kI32, DType::kI64, DType::kBool};

// Values of any dtype from a random f64 tensor (bool: mostly true, some false).
Tensor values_of(const Shape& shape, DType dtype, uint64_t seed) {
  return uniform(shape, DType::kF64, seed, -100, 100).astype(dtype);
}

TEST_F(GpuOpKernels, SliceAndSliceGradMatchTheCpuKernels) {
  for (DType dtype : kCopyDtypes) {
    for (const SliceCase& c : kSlices) {
      expect_matches_cpu("slice", {values_of(c.shape, dtype, 45)}, slice_attrs(c), Match::kExact);
      expect_matches_cpu("slice_grad", {values_of(slice_shape(c), dtype, 46)}, slice_grad_attrs(c),
                         Match::kExact);
    }
  }
}

TEST_F(GpuOpKernels, SlicesBeyondSixMergedDimensionsRunHostStaged) {
  // Every dim shortened: no two dims merge, 8 dims.
  const SliceCase c{Shape({3, 3, 3, 3, 3, 3, 3, 3}), std::vector<int64_t>(8, 1),
                    std::vector<int64_t>(8, 2)};
  expect_matches_cpu("slice", {uniform(c.shape, DType::kF32, 47)}, slice_attrs(c), Match::kExact,
                     /*staged=*/true);
  expect_matches_cpu("slice_grad", {uniform(slice_shape(c), DType::kF32, 48)}, slice_grad_attrs(c),
                     Match::kExact, /*staged=*/true);
}

// concat2 .. concat8 along every axis (given as positive and as negative), inputs of odd and
// unequal extents along it, one of them empty.
TEST_F(GpuOpKernels, ConcatMatchesTheCpuKernelOnEveryAxis) {
  const std::vector<int64_t> base = {3, 5, 7};
  const int64_t extents[] = {1, 4, 0, 2, 5, 3, 1, 6};  // along the axis, input by input
  for (DType dtype : kCopyDtypes) {
    for (int64_t axis = 0; axis < 3; ++axis) {
      for (size_t arity = 2; arity <= 8; ++arity) {
        std::vector<Tensor> inputs;
        for (size_t k = 0; k < arity; ++k) {
          std::vector<int64_t> dims = base;
          dims[static_cast<size_t>(axis)] = extents[k];
          inputs.push_back(values_of(Shape(dims), dtype, 49 + k));
        }
        for (int64_t given : {axis, axis - 3}) {
          OpAttrs attrs;
          attrs.axis = given;
          expect_matches_cpu("concat" + std::to_string(arity), inputs, attrs, Match::kExact);
        }
      }
    }
  }
  // Long rows and a rank-1 concat.
  OpAttrs last;
  last.axis = -1;
  expect_matches_cpu(
      "concat2",
      {uniform(Shape({3, 4097}), DType::kF32, 57), uniform(Shape({3, 1000}), DType::kF32, 58)},
      last, Match::kExact);
  expect_matches_cpu("concat3",
                     {uniform(Shape({7}), DType::kF64, 59), uniform(Shape({4097}), DType::kF64, 60),
                      uniform(Shape({1}), DType::kF64, 61)},
                     last, Match::kExact);
}

// The unsharded cross entropy (ops_nn.cpp) and its gradient: labels in [0, classes).
TEST_F(GpuOpKernels, UnshardedCrossEntropyAndItsGradientMatchTheCpuKernels) {
  const std::vector<Shape> logit_shapes = {Shape({1, 1}),    Shape({5}),       Shape({7, 1000}),
                                           Shape({3, 4097}), Shape({2, 3, 5}), Shape({0, 7}),
                                           Shape({33, 31})};
  for (DType dtype : kDtypes) {
    for (DType index : {DType::kI32, DType::kI64}) {
      for (const Shape& shape : logit_shapes) {
        const Shape batch = batch_of(shape);
        const Tensor labels =
            labels_in(batch, index, 62, 0, static_cast<double>(shape[shape.rank() - 1]));
        const Tensor x = uniform(shape, dtype, 63, -8, 8);
        expect_matches_cpu("sparse_softmax_cross_entropy_with_logits", {labels, x}, {},
                           Match::kClose);
        expect_matches_cpu("sparse_softmax_cross_entropy_grad",
                           {labels, x, uniform(batch, dtype, 64)}, {}, Match::kClose);
      }
    }
  }
}

// Both ops name the first row's bad label, as their CPU kernels (which stop there) do.
TEST_F(GpuOpKernels, UnshardedCrossEntropyLabelsOutsideTheClassesAreReported) {
  const Tensor logits = uniform(Shape({4, 5}), DType::kF32, 65);
  const Tensor g = uniform(Shape({4}), DType::kF32, 66);
  for (DType index : {DType::kI32, DType::kI64}) {
    for (const auto& [values, first_bad] : kBadLabels) {
      const Tensor labels = Tensor::from_vector<int64_t>(values, Shape({4})).astype(index);
      expect_bad_label_reported("sparse_softmax_cross_entropy_with_logits", {labels, logits}, {},
                                first_bad, 5);
      expect_bad_label_reported("sparse_softmax_cross_entropy_grad", {labels, logits, g}, {},
                                first_bad, 5);
    }
  }
}

// The fused causal attention's CUDA kernels (gpu_attention.cu) against its CPU kernels: the
// forward op and the gradient op (dq, dk, dv stacked), head widths 32, 64 and 128 (f64: 32, 64), a
// context that is not a multiple of the kernels' tiles (100), with and without dropout (the same
// elements dropped), f32 and f64; a head width the kernels are not compiled for runs host-staged.
TEST_F(GpuOpKernels, FusedCausalAttentionAndItsGradientMatchTheCpuKernels) {
  for (DType dtype : kDtypes) {
    for (int64_t d : {32, 64, 128}) {
      if (dtype == DType::kF64 && d == 128) continue;
      for (double rate : {0.0, 0.2}) {
        SCOPED_TRACE("head width " + std::to_string(d) + ", dropout " + std::to_string(rate));
        OpAttrs attrs;
        attrs.scale = 1.0 / std::sqrt(static_cast<double>(d));
        if (rate > 0) {
          attrs.rate = rate;
          attrs.seed = 99;
        }
        const Shape shape({2, 100, 3, d});
        const Tensor q = uniform(shape, dtype, 31), k = uniform(shape, dtype, 32),
                     v = uniform(shape, dtype, 33), g = uniform(shape, dtype, 34);
        expect_matches_cpu("causal_attention", {q, k, v}, attrs, Match::kClose);
        const Tensor out = cpu_value("causal_attention", {q, k, v}, attrs);
        expect_matches_cpu("causal_attention_grad", {q, k, v, out, g}, attrs, Match::kClose);
      }
    }
  }
  const Shape odd({1, 40, 2, 48});
  const Tensor q = uniform(odd, DType::kF32, 35), k = uniform(odd, DType::kF32, 36),
               v = uniform(odd, DType::kF32, 37);
  expect_matches_cpu("causal_attention", {q, k, v}, OpAttrs{}, Match::kClose, /*staged=*/true);
}

// f32 matmuls under MatmulPrecision::kHigh run on the TF32 tensor cores: within TF32's rounding
// of the CPU's f32 product (each operand rounded to 10 mantissa bits, at most 2^-10 relative if
// the hardware truncates, so 2^-9 for a product; positive terms, so a sum's relative error is at
// most its terms'), and on GPUs with TF32 (compute capability 8.0 and later) not the f32 result,
// so the tensor cores did run; kHighest gives the f32 result within 1e-5.
TEST_F(GpuOpKernels, Float32MatmulsRunOnTf32TensorCoresUnlessHighestIsAsked) {
  const Tensor a = uniform(Shape({96, 512}), DType::kF32, 11, 0.5, 1.5);
  const Tensor b = uniform(Shape({512, 80}), DType::kF32, 12, 0.5, 1.5);
  const std::vector<float> want = cpu_value("matmul", {a, b}, OpAttrs{}).to_vector<float>();
  const auto worst_relative_error = [&](MatmulPrecision precision) {
    set_matmul_precision(precision);
    const int64_t staged_before = host_staged_kernel_calls()["matmul"];
    const std::vector<float> got =
        to_host(call_op("matmul", place({a, b}, gpu_mesh(), runtime()), OpAttrs{}))
            .to_vector<float>();
    EXPECT_EQ(host_staged_kernel_calls()["matmul"], staged_before) << "cuBLAS did not run";
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::abs(double(got[i]) - want[i]) / std::abs(double(want[i])));
    }
    return worst;
  };
  const double tf32 = worst_relative_error(MatmulPrecision::kHigh);
  const double strict = worst_relative_error(MatmulPrecision::kHighest);
  EXPECT_LE(strict, 1e-5);
  EXPECT_LE(tf32, std::ldexp(1.0, -9));
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  if (major >= 8) {
    EXPECT_GT(tf32, 1e-5) << "the same bits as strict f32: TF32 did not run";
  }
}

// The shapes the baby GPT trains at (batch 64 x context 256 = 16384 rows, width 384, MLP 1536,
// 6 heads, vocabulary 65) for the ops of its step, in f64 (so that a sum's order does not
// matter at these lengths): the cases above are small, with few rows.
// bf16 and f16 matmuls and einsums run on cuBLAS (tensor cores, f32 sums), not host-staged:
// plain, batched, transposed operands, and an einsum read in place.
TEST_F(GpuOpKernels, SixteenBitMatmulsRunOnCublas) {
  OpAttrs none, nt, tn, batched;
  nt.transpose_b = true;
  tn.transpose_a = true;
  batched.equation = "bij,bjk->bik";
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto u = [&](const Shape& shape, uint64_t seed) {
      return uniform(shape, DType::kF32, seed, 0.5, 1.5).astype(dtype);
    };
    expect_matches_cpu("matmul", {u(Shape({33, 17}), 1), u(Shape({17, 9}), 2)}, none,
                       Match::kClose);
    expect_matches_cpu("matmul", {u(Shape({4, 3, 64, 32}), 3), u(Shape({4, 3, 64, 32}), 4)}, nt,
                       Match::kClose);
    expect_matches_cpu("matmul", {u(Shape({128, 48}), 5), u(Shape({128, 40}), 6)}, tn,
                       Match::kClose);
    expect_matches_cpu("einsum", {u(Shape({3, 8, 5}), 7), u(Shape({3, 5, 7}), 8)}, batched,
                       Match::kClose);
  }
}

TEST_F(GpuOpKernels, TheGptsOpsMatchTheCpuKernelsAtTrainingSizes) {
  const DType f = DType::kF64;
  const Shape rows({16384, 384}), wide({16384, 1536}), scores({8, 6, 256, 256});
  OpAttrs none, ln, last, first, all, drop, attention;
  ln.epsilon = 1e-5;
  last.axes = {-1};
  last.keepdims = true;
  first.axes = {0};
  drop.rate = 0.2;
  drop.seed = 77;
  attention.scale = 0.125;
  const Tensor x = uniform(rows, f, 70, -3, 3), g = uniform(rows, f, 71);
  const Tensor w = uniform(Shape({384}), f, 72, 0.5, 1.5);
  expect_matches_cpu("layer_norm", {x, w}, ln, Match::kClose);
  expect_matches_cpu("layer_norm_stats", {x}, ln, Match::kClose);
  const Tensor stats = cpu_value("layer_norm_stats", {x}, ln);
  expect_matches_cpu("layer_norm_grad", {x, w, g, stats}, ln, Match::kClose);
  expect_matches_cpu("layer_norm_weight_grad", {x, g, stats}, ln, Match::kClose);
  expect_matches_cpu("reduce_sum", {uniform(rows, f, 73, 0.5, 1.5)}, first, Match::kClose);
  expect_matches_cpu("reduce_sum", {uniform(Shape({384, 1536}), f, 74, 0.5, 1.5)}, all,
                     Match::kClose);
  expect_matches_cpu("dropout", {uniform(wide, f, 75)}, drop, Match::kExact);
  expect_matches_cpu("dropout", {uniform(scores, f, 76)}, drop, Match::kExact);
  const Tensor s = uniform(scores, f, 77, -8, 8);
  expect_matches_cpu("causal_softmax", {s}, attention, Match::kClose);
  expect_matches_cpu("reduce_sum", {s}, last, Match::kClose);
  const Tensor column = uniform(Shape({8, 6, 256, 1}), f, 78);
  expect_matches_cpu("multiply", {s, column}, none, Match::kExact);
  expect_matches_cpu("subtract", {s, column}, none, Match::kExact);
  expect_matches_cpu("add",
                     {uniform(Shape({64, 256, 384}), f, 79), uniform(Shape({256, 384}), f, 80)},
                     none, Match::kExact);
  expect_matches_cpu("gelu_erf", {uniform(wide, f, 81)}, none, Match::kClose);
  // cuBLAS: the attention scores (batched, B^T), a projection and a weight's gradient (k =
  // 16384). Positive inputs, as for the sums: the rounding of a long dot product of mixed signs
  // is relative to its terms, not to its value.
  OpAttrs nt, tn;
  nt.transpose_b = true;
  tn.transpose_a = true;
  const Shape heads({64, 6, 256, 64});
  expect_matches_cpu("matmul", {uniform(heads, f, 88, 0.5, 1.5), uniform(heads, f, 89, 0.5, 1.5)},
                     nt, Match::kClose);
  expect_matches_cpu("matmul",
                     {uniform(Shape({64, 256, 384}), f, 90, 0.5, 1.5),
                      uniform(Shape({384, 1536}), f, 91, 0.5, 1.5)},
                     none, Match::kClose);
  expect_matches_cpu("matmul", {uniform(rows, f, 92, 0.5, 1.5), uniform(wide, f, 93, 0.5, 1.5)}, tn,
                     Match::kClose);
  // The fused attention at the baby's context and heads (8 rows of the batch), with dropout.
  OpAttrs fused;
  fused.scale = 0.125;
  fused.rate = 0.2;
  fused.seed = 94;
  const Shape qkv({8, 256, 6, 64});
  const Tensor q = uniform(qkv, f, 95), k = uniform(qkv, f, 96), v = uniform(qkv, f, 97);
  expect_matches_cpu("causal_attention", {q, k, v}, fused, Match::kClose);
  expect_matches_cpu("causal_attention_grad",
                     {q, k, v, cpu_value("causal_attention", {q, k, v}, fused), uniform(qkv, f, 98)},
                     fused, Match::kClose);
  const Tensor ids = labels_in(Shape({64, 256}), DType::kI32, 82, 0, 65);
  const auto grad_attrs = [&](const Mesh& mesh) {
    OpAttrs attrs;
    attrs.vocab_size = 65;
    attrs.layout = Layout::replicated(mesh, 2);
    return attrs;
  };
  expect_matches_cpu("embedding_lookup", {uniform(Shape({65, 384}), f, 83), ids}, none,
                     Match::kExact);
  expect_matches_cpu_on_meshes("embedding_lookup_grad",
                               {ids, uniform(Shape({64, 256, 384}), f, 84)}, grad_attrs,
                               Match::kClose);
  const Tensor logits = uniform(Shape({16384, 65}), f, 85, -8, 8);
  const Tensor labels = labels_in(Shape({16384}), DType::kI32, 86, 0, 65);
  expect_matches_cpu("sparse_softmax_cross_entropy_with_logits", {labels, logits}, none,
                     Match::kClose);
  expect_matches_cpu("sparse_softmax_cross_entropy_grad",
                     {labels, logits, uniform(Shape({16384}), f, 87)}, none, Match::kClose);
}

}  // namespace
}  // namespace tessel
