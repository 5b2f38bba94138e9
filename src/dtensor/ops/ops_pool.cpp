// The pooling op family (registered by register_pool_ops): max_pool2d and avg_pool2d (TF's
// tf.nn names over NHWC images: ksize, strides, padding; conv_window.h's window without
// dilation) and their gradient ops max_pool2d_grad(input, grad) and avg_pool2d_grad(grad) (the
// input's shape in attrs.shape).
//
// Sharding rules: the batch and channel dims keep their sharding and need no communication (each
// window lies within one image and one channel); a sharded height or width has no rule
// (kUnimplemented: the sharding fallback gathers it).
//   max_pool2d: a Partial input is reduced first (a max is not linear); the output has the
//     input's layout.
//   avg_pool2d, avg_pool2d_grad: linear, so a Partial(sum) input stays Partial (other pending
//     reductions are done first); the output has the input's layout.
//   max_pool2d_grad(input, grad): the input's batch and channel sharding (its Partial reduced);
//     the gradient is demanded in it, a pending sum of the gradient kept pending where that
//     sharding does not use its mesh dim (the op is linear in the gradient).
//
// Semantics: max_pool2d takes each window's largest cell per channel among the cells inside the
// input (NaN wins: a window holding NaN gives NaN); its gradient goes to that cell, the first in
// row-major window order on ties, summed where windows overlap. avg_pool2d divides each window's
// sum by its number of cells inside the input (TF's "SAME" average), and its gradient spreads
// evenly over those cells. Pools take explicit padding too (each pad smaller than the window, so
// every window holds a cell of the input).
//
// CPU kernels: direct loops, channels innermost; the forward ops split output rows over the
// intra-op threads, the gradients whole images (each image's cells are summed into by one
// thread, in a fixed order: the result does not depend on the thread count).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/errors.h"
#include "dtensor/framework/op_util.h"
#include "dtensor/ops/conv_window.h"
#include "dtensor/ops/op_families.h"
#include "tessel/core/parallel.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

constexpr std::string_view kMaxPool = "max_pool2d";
constexpr std::string_view kMaxPoolGrad = "max_pool2d_grad";
constexpr std::string_view kAvgPool = "avg_pool2d";
constexpr std::string_view kAvgPoolGrad = "avg_pool2d_grad";

// ---- shapes ------------------------------------------------------------------------------------

Window2D pool_window(std::string_view op, const Shape& input, const OpAttrs& attrs) {
  require_rank4(op, "the input", input, "NHWC");
  const std::array<int64_t, 2> k = spatial_pair(op, "ksize", attrs.ksize);
  return make_window(op, attrs, input[1], input[2], k[0], k[1], false);
}

Shape pool_output(std::string_view op, const Shape& input, const OpAttrs& attrs) {
  const Window2D g = pool_window(op, input, attrs);
  return Shape({input[0], g.out_h, g.out_w, input[3]});
}

void require_grad_shape(std::string_view op, const Shape& grad, const Shape& input,
                        const OpAttrs& attrs) {
  const Shape want = pool_output(op, input, attrs);
  if (grad != want) {
    throw_invalid(op, "the output gradient has shape {} but pooling an input {} gives {}",
                  grad.to_string(), input.to_string(), want.to_string());
  }
}

TensorSpec infer_pool(std::string_view op, const std::vector<TensorSpec>& in,
                      const OpAttrs& attrs) {
  require_float(in[0].dtype, op, "the input");
  return {pool_output(op, in[0].shape, attrs), in[0].dtype, {}};
}

TensorSpec infer_max_pool_grad(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  require_float(in[0].dtype, kMaxPoolGrad, "the input");
  if (in[1].dtype != in[0].dtype) {
    throw_invalid(kMaxPoolGrad,
                  "the input and the output gradient have different dtypes: {} and {}",
                  dtype_name(in[0].dtype), dtype_name(in[1].dtype));
  }
  require_grad_shape(kMaxPoolGrad, in[1].shape, in[0].shape, attrs);
  return {in[0].shape, in[0].dtype, {}};
}

TensorSpec infer_avg_pool_grad(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  require_float(in[0].dtype, kAvgPoolGrad, "the output gradient");
  const Shape input(attrs.shape);
  require_grad_shape(kAvgPoolGrad, in[0].shape, input, attrs);
  return {input, in[0].dtype, {}};
}

// ---- sharding rules ----------------------------------------------------------------------------

std::vector<PartialDim> pending_sums(const Layout& layout) {
  std::vector<PartialDim> sums;
  for (const PartialDim& p : layout.partial()) {
    if (p.op == ReduceOp::kSum) sums.push_back(p);
  }
  return sums;
}

// One NHWC input, output in its layout; `linear`: its pending sums stay pending.
ShardingDecision rule_one_image(std::string_view op, const TensorSpec& in, bool linear) {
  require_spatial_whole(op, "the input's", in.layout);
  const Layout kept =
      in.layout.with_partial(linear ? pending_sums(in.layout) : std::vector<PartialDim>{});
  return {{kept}, kept};
}

ShardingDecision rule_max_pool_grad(const std::vector<TensorSpec>& in) {
  require_spatial_whole(kMaxPoolGrad, "the input's", in[0].layout);
  require_spatial_whole(kMaxPoolGrad, "the output gradient's", in[1].layout);
  const Layout input = in[0].layout.without_partial();
  std::vector<PartialDim> keep;
  for (const PartialDim& p : pending_sums(in[1].layout)) {
    if (!shards_over(input, p.mesh_dim)) keep.push_back(p);
  }
  return {{input, input.with_partial(keep)}, input.with_partial(keep)};
}

// ---- CPU kernels -------------------------------------------------------------------------------

// A pool's local block: the window and the images' size (n images of channels c).
struct PoolBlock {
  Window2D g;
  int64_t n = 0, c = 0;
  int64_t image() const { return g.in_h * g.in_w * c; }
  int64_t out_image() const { return g.out_h * g.out_w * c; }
  // The input rows [first_h, end_h) and columns [first_w, end_w) of window (oh, ow).
  struct Span {
    int64_t first_h, end_h, first_w, end_w;
    int64_t cells() const { return (end_h - first_h) * (end_w - first_w); }
  };
  Span span(int64_t oh, int64_t ow) const {
    const int64_t h0 = oh * g.stride_h - g.pad_top, w0 = ow * g.stride_w - g.pad_left;
    return {std::max<int64_t>(h0, 0), std::min(h0 + g.k_h, g.in_h), std::max<int64_t>(w0, 0),
            std::min(w0 + g.k_w, g.in_w)};
  }
  // Output rows (image, oh) per thread: about 64 K window cells each.
  int64_t row_grain() const {
    return std::max<int64_t>(
        1, (int64_t{1} << 16) / std::max<int64_t>(1, g.out_w * g.k_h * g.k_w * c));
  }
  // fn(image, oh, row) for every output row (row = image * out_h + oh), split over the intra-op
  // threads by rows (the forward ops: each writes its own output row).
  template <typename Fn>
  void for_each_output_row(const Fn& fn) const {
    parallel_for(n * g.out_h, row_grain(), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) fn(r / g.out_h, r % g.out_h, r);
    });
  }
  // fn(first, end) over ranges of whole images, split over the intra-op threads (the gradients:
  // windows overlap, so one thread adds into all the cells of an image, in a fixed order).
  template <typename Fn>
  void for_each_image_range(const Fn& fn) const {
    parallel_for(n, std::max<int64_t>(1, row_grain() / std::max<int64_t>(1, g.out_h)), fn);
  }
};

PoolBlock pool_block(std::string_view op, const Shape& input, const OpAttrs& attrs) {
  return {pool_window(op, input, attrs), input[0], input[3]};
}

// The largest cell of window s per channel of one image x [H, W, C] (NaN wins; the first on
// ties); kAt: also its cell index (h * W + w) in at.
template <typename T, bool kAt>
void window_max(const T* x, const PoolBlock& b, const PoolBlock::Span& s, T* best, int64_t* at) {
  const int64_t c = b.c;
  bool first = true;
  for (int64_t h = s.first_h; h < s.end_h; ++h) {
    for (int64_t w = s.first_w; w < s.end_w; ++w) {
      const int64_t cell = h * b.g.in_w + w;
      const T* v = x + cell * c;
      if (first) {
        std::copy(v, v + c, best);
        if constexpr (kAt) std::fill(at, at + c, cell);
        first = false;
        continue;
      }
      if constexpr (kAt) {
        for (int64_t k = 0; k < c; ++k) {
          if (v[k] > best[k] || (std::isnan(v[k]) && !std::isnan(best[k]))) {
            best[k] = v[k];
            at[k] = cell;
          }
        }
      } else {
        // A select the compiler vectorises: a NaN replaces anything, and only a NaN replaces it.
        for (int64_t k = 0; k < c; ++k) best[k] = (v[k] > best[k] || v[k] != v[k]) ? v[k] : best[k];
      }
    }
  }
}

template <typename T>
void max_pool(const T* x, T* y, const PoolBlock& b) {
  const Window2D& g = b.g;
  b.for_each_output_row([&](int64_t image, int64_t oh, int64_t r) {
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      window_max<T, false>(x + image * b.image(), b, b.span(oh, ow), y + (r * g.out_w + ow) * b.c,
                           nullptr);
    }
  });
}

template <typename T>
void max_pool_grad(const T* x, const T* dy, T* dx, const PoolBlock& b) {
  const Window2D& g = b.g;
  std::fill(dx, dx + b.n * b.image(), T(0));
  b.for_each_image_range([&](int64_t begin, int64_t end) {
    std::vector<T> best(static_cast<size_t>(b.c));
    std::vector<int64_t> at(static_cast<size_t>(b.c));
    for (int64_t image = begin; image < end; ++image) {
      const T* xi = x + image * b.image();
      T* dxi = dx + image * b.image();
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          window_max<T, true>(xi, b, b.span(oh, ow), best.data(), at.data());
          const T* g_row = dy + image * b.out_image() + (oh * g.out_w + ow) * b.c;
          for (int64_t k = 0; k < b.c; ++k) dxi[at[static_cast<size_t>(k)] * b.c + k] += g_row[k];
        }
      }
    }
  });
}

template <typename T>
void avg_pool(const T* x, T* y, const PoolBlock& b) {
  const Window2D& g = b.g;
  b.for_each_output_row([&](int64_t image, int64_t oh, int64_t r) {
    const T* xi = x + image * b.image();
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      const PoolBlock::Span s = b.span(oh, ow);
      T* out = y + (r * g.out_w + ow) * b.c;
      std::fill(out, out + b.c, T(0));
      for (int64_t h = s.first_h; h < s.end_h; ++h) {
        for (int64_t w = s.first_w; w < s.end_w; ++w) {
          const T* v = xi + (h * g.in_w + w) * b.c;
          for (int64_t k = 0; k < b.c; ++k) out[k] += v[k];
        }
      }
      const T scale = T(1) / static_cast<T>(s.cells());
      for (int64_t k = 0; k < b.c; ++k) out[k] *= scale;
    }
  });
}

template <typename T>
void avg_pool_grad(const T* dy, T* dx, const PoolBlock& b) {
  const Window2D& g = b.g;
  std::fill(dx, dx + b.n * b.image(), T(0));
  b.for_each_image_range([&](int64_t begin, int64_t end) {
    std::vector<T> share(static_cast<size_t>(b.c));
    for (int64_t image = begin; image < end; ++image) {
      T* dxi = dx + image * b.image();
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          const PoolBlock::Span s = b.span(oh, ow);
          const T* g_row = dy + image * b.out_image() + (oh * g.out_w + ow) * b.c;
          const T scale = T(1) / static_cast<T>(s.cells());
          for (int64_t k = 0; k < b.c; ++k) share[static_cast<size_t>(k)] = g_row[k] * scale;
          for (int64_t h = s.first_h; h < s.end_h; ++h) {
            for (int64_t w = s.first_w; w < s.end_w; ++w) {
              T* d = dxi + (h * g.in_w + w) * b.c;
              for (int64_t k = 0; k < b.c; ++k) d[k] += share[static_cast<size_t>(k)];
            }
          }
        }
      }
    }
  });
}

// ---- registration ------------------------------------------------------------------------------

TensorSpec infer_max_pool(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  return infer_pool(kMaxPool, in, attrs);
}

TensorSpec infer_avg_pool(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  return infer_pool(kAvgPool, in, attrs);
}

ShardingDecision rule_max_pool(const std::vector<TensorSpec>& in) {
  return rule_one_image(kMaxPool, in[0], false);
}

ShardingDecision rule_avg_pool(const std::vector<TensorSpec>& in) {
  return rule_one_image(kAvgPool, in[0], true);
}

ShardingDecision rule_avg_pool_grad(const std::vector<TensorSpec>& in) {
  return rule_one_image(kAvgPoolGrad, in[0], true);
}

void kernel_max_pool(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs) {
  const PoolBlock b = pool_block(kMaxPool, in[0].shape(), attrs);
  dispatch_float(out.dtype(), kMaxPool, [&]<typename T>() {
    max_pool<T>(in[0].contiguous().data<T>(), out.data<T>(), b);
  });
}

void kernel_max_pool_grad(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs) {
  const PoolBlock b = pool_block(kMaxPoolGrad, in[0].shape(), attrs);
  dispatch_float(out.dtype(), kMaxPoolGrad, [&]<typename T>() {
    max_pool_grad<T>(in[0].contiguous().data<T>(), in[1].contiguous().data<T>(), out.data<T>(), b);
  });
}

void kernel_avg_pool(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs) {
  const PoolBlock b = pool_block(kAvgPool, in[0].shape(), attrs);
  dispatch_float(out.dtype(), kAvgPool, [&]<typename T>() {
    avg_pool<T>(in[0].contiguous().data<T>(), out.data<T>(), b);
  });
}

void kernel_avg_pool_grad(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs) {
  const PoolBlock b = pool_block(kAvgPoolGrad, out.shape(), attrs);
  dispatch_float(out.dtype(), kAvgPoolGrad, [&]<typename T>() {
    avg_pool_grad<T>(in[0].contiguous().data<T>(), out.data<T>(), b);
  });
}

std::vector<DTensor> vjp_max_pool(const VjpArgs& a) {
  return {call_op(kMaxPoolGrad, {a.inputs[0], a.grad}, *a.attrs)};
}

std::vector<DTensor> vjp_avg_pool(const VjpArgs& a) {
  OpAttrs attrs = *a.attrs;
  attrs.shape = a.inputs[0].shape().dims();
  return {call_op(kAvgPoolGrad, {a.grad}, attrs)};
}

// avg_pool2d_grad is linear in the gradient: its VJP is the pool itself.
std::vector<DTensor> vjp_avg_pool_grad(const VjpArgs& a) {
  OpAttrs attrs = *a.attrs;
  attrs.shape.clear();
  return {call_op(kAvgPool, {a.grad}, attrs)};
}

OpAttrs pool_attrs(const std::vector<int64_t>& ksize, const std::vector<int64_t>& strides,
                   const std::string& padding, const std::vector<int64_t>& explicit_paddings) {
  OpAttrs attrs;
  attrs.ksize = ksize;
  attrs.strides = strides;
  attrs.padding = padding;
  attrs.explicit_paddings = explicit_paddings;
  return attrs;
}

}  // namespace

void register_pool_ops(OpRegistry& registry) {
  add_window_op(registry, kMaxPool, 1,
                {infer_max_pool, rule_max_pool, kernel_max_pool, vjp_max_pool});
  // Second-order gradients of max pooling are not provided.
  add_window_op(registry, kMaxPoolGrad, 2,
                {infer_max_pool_grad, rule_max_pool_grad, kernel_max_pool_grad, nullptr});
  add_window_op(registry, kAvgPool, 1,
                {infer_avg_pool, rule_avg_pool, kernel_avg_pool, vjp_avg_pool});
  add_window_op(registry, kAvgPoolGrad, 1,
                {infer_avg_pool_grad, rule_avg_pool_grad, kernel_avg_pool_grad, vjp_avg_pool_grad});
}

}  // namespace detail

DTensor max_pool2d(const DTensor& input, const std::vector<int64_t>& ksize,
                   const std::vector<int64_t>& strides, const std::string& padding,
                   const std::vector<int64_t>& explicit_paddings) {
  return call_op(detail::kMaxPool, {input},
                 detail::pool_attrs(ksize, strides, padding, explicit_paddings));
}

DTensor avg_pool2d(const DTensor& input, const std::vector<int64_t>& ksize,
                   const std::vector<int64_t>& strides, const std::string& padding,
                   const std::vector<int64_t>& explicit_paddings) {
  return call_op(detail::kAvgPool, {input},
                 detail::pool_attrs(ksize, strides, padding, explicit_paddings));
}

}  // namespace tessel
