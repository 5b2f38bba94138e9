// The convolution op family (registered by register_conv_ops): conv2d (TF's tf.nn.conv2d over
// NHWC images with HWIO filters) and its two gradient ops, conv2d_backprop_input and
// conv2d_backprop_filter (TF's Conv2DBackpropInput / Conv2DBackpropFilter, the target shape in
// attrs.shape). The window (strides, dilations, padding) is conv_window.h's.
//
// Sharding rule: a convolution is bilinear and contracts the channels as an einsum does, so each
// op's rule is the einsum's (einsum_rule.h, ops_matmul.cpp) over its batch and channel dims, its
// spatial dims demanded whole:
//   conv2d                  input "nhwc", filters "ijco" -> "nhwo"
//   conv2d_backprop_input   grad  "nhwo", filters "ijco" -> "nhwc"
//   conv2d_backprop_filter  input "nhwc", grad    "nHWo" -> "ijco" (i, j: the taps, whole)
// which gives: a batch-sharded input -> a batch-sharded output with no communication (and the
// filter gradient Partial(sum) over the batch's mesh dims, reduced once at the end of a gradient
// like a data-parallel matmul's); filters sharded over their output channels -> the output's
// channels sharded the same way; input channels sharded like the filters' input channels -> a
// Partial(sum) output; a Partial(sum) operand stays pending where the other one is not sharded
// over that mesh dim (the op is linear in it; zero padding keeps it so). A sharded height, width
// or filter-tap dim has no rule (kUnimplemented): the sharding fallback gathers it.
//
// CPU kernels (im2col + the BLAS): the local block's output rows (image, oh), in blocks of at
// most kColsBudget patch elements (many small images at once, a large one in parts), are
// unfolded into patch rows [pixels, taps * channels] (zeros for padding) and multiplied with the
// filters as a [taps * channels, out_channels] matrix by one GEMM, which splits its rows over
// the intra-op threads (the unfolding splits the output rows). A 1x1 unpadded stride-1
// convolution is one GEMM on the input itself. The input gradient is the GEMM with the filters
// transposed, folded back (col2im, each image by one thread); the filter gradient adds the
// blocks' GEMMs in block order, and the blocks depend only on the shapes, so the result does not
// depend on the thread count.
//
// Gradients: d input = conv2d_backprop_input(g, filters), d filters = conv2d_backprop_filter(
// input, g); the two gradient ops are bilinear too and have VJPs of the three ops (second-order
// gradients).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/errors.h"
#include "dtensor/framework/op_util.h"
#include "dtensor/ops/conv_window.h"
#include "dtensor/ops/einsum_rule.h"
#include "dtensor/ops/op_families.h"
#include "tessel/core/blas.h"
#include "tessel/core/parallel.h"
#include "tessel/dtensor/ops.h"

namespace tessel {
namespace detail {
namespace {

constexpr std::string_view kConv = "conv2d";
constexpr std::string_view kConvInput = "conv2d_backprop_input";
constexpr std::string_view kConvFilter = "conv2d_backprop_filter";

// The most patch elements unfolded at once (16 MiB of f32): the image blocks' size.
constexpr int64_t kColsBudget = int64_t{1} << 22;

// ---- shapes ------------------------------------------------------------------------------------

// One convolution's shapes: input [N, H, W, C], filters [KH, KW, C, O], output [N, OH, OW, O].
struct ConvShapes {
  Window2D window;
  Shape output;
};

ConvShapes conv_shapes(std::string_view op, const Shape& input, const Shape& filters,
                       const OpAttrs& attrs) {
  require_rank4(op, "the input", input, "NHWC");
  require_rank4(op, "the filters", filters, "HWIO: height, width, in_channels, out_channels");
  if (input[3] != filters[2]) {
    throw_invalid(op,
                  "the input has {} channels (shape {}, NHWC) but the filters take {} (shape "
                  "{}, HWIO)",
                  input[3], input.to_string(), filters[2], filters.to_string());
  }
  if (filters[0] < 1 || filters[1] < 1) {
    throw_invalid(op, "the filters need at least one tap in height and width, got shape {}",
                  filters.to_string());
  }
  ConvShapes s;
  s.window = make_window(op, attrs, input[1], input[2], filters[0], filters[1], true);
  s.output = Shape({input[0], s.window.out_h, s.window.out_w, filters[3]});
  return s;
}

void require_same_float(std::string_view op, const TensorSpec& a, const TensorSpec& b,
                        std::string_view what_a, std::string_view what_b) {
  require_float(a.dtype, op, what_a);
  if (a.dtype != b.dtype) {
    throw_invalid(op, "{} and {} have different dtypes: {} and {}", what_a, what_b,
                  dtype_name(a.dtype), dtype_name(b.dtype));
  }
}

// attrs.shape, the shape a gradient op gives back, as a rank-4 Shape.
Shape target_shape(std::string_view op, const OpAttrs& attrs, std::string_view what) {
  const Shape target(attrs.shape);
  require_rank4(op, what, target, what == "the input" ? "NHWC" : "HWIO");
  return target;
}

void require_grad_shape(std::string_view op, const Shape& grad, const ConvShapes& s,
                        const Shape& input, const Shape& filters) {
  if (grad != s.output) {
    throw_invalid(op,
                  "the output gradient has shape {} but conv2d of an input {} with filters {} "
                  "gives {}",
                  grad.to_string(), input.to_string(), filters.to_string(), s.output.to_string());
  }
}

TensorSpec infer_conv(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  require_same_float(kConv, in[0], in[1], "the input", "the filters");
  return {conv_shapes(kConv, in[0].shape, in[1].shape, attrs).output, in[0].dtype, {}};
}

TensorSpec infer_conv_input(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  require_same_float(kConvInput, in[0], in[1], "the output gradient", "the filters");
  const Shape input = target_shape(kConvInput, attrs, "the input");
  const ConvShapes s = conv_shapes(kConvInput, input, in[1].shape, attrs);
  require_grad_shape(kConvInput, in[0].shape, s, input, in[1].shape);
  return {input, in[0].dtype, {}};
}

TensorSpec infer_conv_filter(const std::vector<TensorSpec>& in, const OpAttrs& attrs) {
  require_same_float(kConvFilter, in[0], in[1], "the input", "the output gradient");
  const Shape filters = target_shape(kConvFilter, attrs, "the filters");
  const ConvShapes s = conv_shapes(kConvFilter, in[0].shape, filters, attrs);
  require_grad_shape(kConvFilter, in[1].shape, s, in[0].shape, filters);
  return {filters, in[0].dtype, {}};
}

// ---- sharding rules ----------------------------------------------------------------------------

ShardingDecision rule_conv(const std::vector<TensorSpec>& in) {
  require_spatial_whole(kConv, "the input's", in[0].layout);
  require_spatial_whole(kConv, "the filters'", in[1].layout, 0);
  return einsum_sharding("nhwc", "ijco", "nhwo", in[0], in[1]);
}

ShardingDecision rule_conv_input(const std::vector<TensorSpec>& in) {
  require_spatial_whole(kConvInput, "the output gradient's", in[0].layout);
  require_spatial_whole(kConvInput, "the filters'", in[1].layout, 0);
  return einsum_sharding("nhwo", "ijco", "nhwc", in[0], in[1]);
}

ShardingDecision rule_conv_filter(const std::vector<TensorSpec>& in) {
  require_spatial_whole(kConvFilter, "the input's", in[0].layout);
  require_spatial_whole(kConvFilter, "the output gradient's", in[1].layout);
  // The taps are letters of neither operand: the rule decides [in_channels, out_channels].
  ShardingDecision d = einsum_sharding("nhwc", "nHWo", "co", in[0], in[1]);
  SpecList specs = spec_list(d.output);
  specs.insert(specs.begin(), 2, {});
  d.output = make_layout(d.output.mesh(), specs, d.output.partial());
  return d;
}

// ---- CPU kernels -------------------------------------------------------------------------------

// The local block's sizes: the window, n images of c channels in, o channels out.
struct ConvBlock {
  Window2D g;
  int64_t n = 0, c = 0, o = 0;
  int64_t patch() const { return g.k_h * g.k_w * c; }      // one patch row's elements
  int64_t image() const { return g.in_h * g.in_w * c; }    // one input image's elements
  int64_t rows() const { return n * g.out_h; }             // output rows (image, oh), all images
  int64_t row_cells() const { return g.out_w * patch(); }  // patch elements of one output row
  // Output rows per block: at most kColsBudget patch elements at once (at least one row), so
  // that a large image is unfolded in parts and many small ones together.
  int64_t rows_per_block() const {
    return std::clamp<int64_t>(kColsBudget / std::max<int64_t>(1, row_cells()), 1,
                               std::max<int64_t>(rows(), 1));
  }
  // Calls fn(first, count) for each block of output rows, in order.
  template <typename Fn>
  void for_each_block(const Fn& fn) const {
    const int64_t block = rows_per_block();
    for (int64_t first = 0; first < rows(); first += block)
      fn(first, std::min(block, rows() - first));
  }
  // Output rows per thread when unfolding: about 64 K patch elements each.
  int64_t row_grain() const {
    return std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, row_cells()));
  }
};

// Output row oh's patches of one image x [H, W, C] as rows of cols [OW, KH * KW * C] (taps
// row-major, channels innermost, as the HWIO filters' rows); padding reads as 0.
template <typename T>
void im2col_row(const T* x, const ConvBlock& b, int64_t oh, T* cols) {
  const Window2D& g = b.g;
  const int64_t c = b.c;
  for (int64_t ow = 0; ow < g.out_w; ++ow) {
    T* row = cols + ow * b.patch();
    for (int64_t i = 0; i < g.k_h; ++i) {
      const int64_t ih = oh * g.stride_h - g.pad_top + i * g.dilation_h;
      for (int64_t j = 0; j < g.k_w; ++j) {
        const int64_t iw = ow * g.stride_w - g.pad_left + j * g.dilation_w;
        T* dst = row + (i * g.k_w + j) * c;
        if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) {
          std::fill(dst, dst + c, T(0));
        } else {
          std::memcpy(dst, x + (ih * g.in_w + iw) * c, static_cast<size_t>(c) * sizeof(T));
        }
      }
    }
  }
}

// im2col_row's transpose: adds output row oh's patch rows back into their cells of dx (one image).
template <typename T>
void col2im_row(const T* cols, const ConvBlock& b, int64_t oh, T* dx) {
  const Window2D& g = b.g;
  const int64_t c = b.c;
  for (int64_t ow = 0; ow < g.out_w; ++ow) {
    const T* row = cols + ow * b.patch();
    for (int64_t i = 0; i < g.k_h; ++i) {
      const int64_t ih = oh * g.stride_h - g.pad_top + i * g.dilation_h;
      if (ih < 0 || ih >= g.in_h) continue;
      for (int64_t j = 0; j < g.k_w; ++j) {
        const int64_t iw = ow * g.stride_w - g.pad_left + j * g.dilation_w;
        if (iw < 0 || iw >= g.in_w) continue;
        const T* src = row + (i * g.k_w + j) * c;
        T* dst = dx + (ih * g.in_w + iw) * c;
        for (int64_t k = 0; k < c; ++k) dst[k] += src[k];
      }
    }
  }
}

// Unfolds output rows [first, first + count) of x into cols, split over the intra-op threads.
template <typename T>
void unfold(const T* x, const ConvBlock& b, int64_t first, int64_t count, T* cols) {
  parallel_for(count, b.row_grain(), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t row = first + r;
      im2col_row(x + (row / b.g.out_h) * b.image(), b, row % b.g.out_h, cols + r * b.row_cells());
    }
  });
}

// Folds the patch rows of output rows [first, first + count) into dx: each image's rows by one
// thread, in order (windows overlap, so two rows of one image may add to the same cell).
template <typename T>
void fold(const T* cols, const ConvBlock& b, int64_t first, int64_t count, T* dx) {
  const int64_t out_h = b.g.out_h;
  const int64_t first_image = first / out_h, last_image = (first + count - 1) / out_h;
  const int64_t grain = std::max<int64_t>(1, b.row_grain() / out_h);
  parallel_for(last_image - first_image + 1, grain, [&](int64_t begin, int64_t end) {
    for (int64_t image = first_image + begin; image < first_image + end; ++image) {
      const int64_t lo = std::max(first, image * out_h);
      const int64_t hi = std::min(first + count, (image + 1) * out_h);
      for (int64_t row = lo; row < hi; ++row) {
        col2im_row(cols + (row - first) * b.row_cells(), b, row % out_h, dx + image * b.image());
      }
    }
  });
}

// y [N, OH, OW, O] = patches [N * OH * OW, patch] x w [patch, O], block by block of output rows.
template <typename T>
void conv_forward(const T* x, const T* w, T* y, const ConvBlock& b) {
  const int64_t pixels = b.rows() * b.g.out_w;
  if (pixels == 0 || b.o == 0) return;
  if (b.patch() == 0) {
    std::fill(y, y + pixels * b.o, T(0));
    return;
  }
  if (b.g.pointwise()) {
    blas_gemm(false, false, pixels, b.o, b.c, x, b.c, w, b.o, y, b.o);
    return;
  }
  std::vector<T> cols(static_cast<size_t>(b.rows_per_block() * b.row_cells()));
  b.for_each_block([&](int64_t first, int64_t count) {
    unfold(x, b, first, count, cols.data());
    blas_gemm(false, false, count * b.g.out_w, b.o, b.patch(), cols.data(), b.patch(), w, b.o,
              y + first * b.g.out_w * b.o, b.o);
  });
}

// dx [N, H, W, C] = fold(dy [N * OH * OW, O] x w^T [O, patch]).
template <typename T>
void conv_backprop_input(const T* dy, const T* w, T* dx, const ConvBlock& b) {
  std::fill(dx, dx + b.n * b.image(), T(0));
  const int64_t pixels = b.rows() * b.g.out_w;
  if (pixels == 0 || b.o == 0 || b.patch() == 0) return;
  if (b.g.pointwise()) {
    blas_gemm(false, true, pixels, b.c, b.o, dy, b.o, w, b.o, dx, b.c);
    return;
  }
  std::vector<T> cols(static_cast<size_t>(b.rows_per_block() * b.row_cells()));
  b.for_each_block([&](int64_t first, int64_t count) {
    blas_gemm(false, true, count * b.g.out_w, b.patch(), b.o, dy + first * b.g.out_w * b.o, b.o, w,
              b.o, cols.data(), b.patch());
    fold(cols.data(), b, first, count, dx);
  });
}

// dw [patch, O] = the sum over the blocks of patches^T [patch, pixels] x dy [pixels, O], added
// in block order (the blocks depend on the shapes only).
template <typename T>
void conv_backprop_filter(const T* x, const T* dy, T* dw, const ConvBlock& b) {
  const int64_t size = b.patch() * b.o;
  const int64_t pixels = b.rows() * b.g.out_w;
  if (size == 0) return;
  if (pixels == 0) {
    std::fill(dw, dw + size, T(0));
    return;
  }
  if (b.g.pointwise()) {
    blas_gemm(true, false, b.c, b.o, pixels, x, b.c, dy, b.o, dw, b.o);
    return;
  }
  std::vector<T> cols(static_cast<size_t>(b.rows_per_block() * b.row_cells()));
  std::vector<T> part;
  b.for_each_block([&](int64_t first, int64_t count) {
    unfold(x, b, first, count, cols.data());
    if (first > 0) part.resize(static_cast<size_t>(size));
    T* out = first == 0 ? dw : part.data();
    blas_gemm(true, false, b.patch(), b.o, count * b.g.out_w, cols.data(), b.patch(),
              dy + first * b.g.out_w * b.o, b.o, out, b.o);
    if (first > 0) {
      for (int64_t k = 0; k < size; ++k) dw[k] += part[static_cast<size_t>(k)];
    }
  });
}

// The local blocks' sizes: images (n, H, W, c), filters taps and o, from the blocks' shapes.
ConvBlock conv_block(std::string_view op, const Shape& input, const Shape& filters,
                     const OpAttrs& attrs) {
  ConvBlock b;
  b.g = make_window(op, attrs, input[1], input[2], filters[0], filters[1], true);
  b.n = input[0];
  b.c = input[3];
  b.o = filters[3];
  return b;
}

void kernel_conv(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs) {
  const ConvBlock b = conv_block(kConv, in[0].shape(), in[1].shape(), attrs);
  dispatch_float(out.dtype(), kConv, [&]<typename T>() {
    conv_forward<T>(in[0].contiguous().data<T>(), in[1].contiguous().data<T>(), out.data<T>(), b);
  });
}

void kernel_conv_input(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs) {
  const ConvBlock b = conv_block(kConvInput, out.shape(), in[1].shape(), attrs);
  dispatch_float(out.dtype(), kConvInput, [&]<typename T>() {
    conv_backprop_input<T>(in[0].contiguous().data<T>(), in[1].contiguous().data<T>(),
                           out.data<T>(), b);
  });
}

void kernel_conv_filter(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs) {
  const ConvBlock b = conv_block(kConvFilter, in[0].shape(), out.shape(), attrs);
  dispatch_float(out.dtype(), kConvFilter, [&]<typename T>() {
    conv_backprop_filter<T>(in[0].contiguous().data<T>(), in[1].contiguous().data<T>(),
                            out.data<T>(), b);
  });
}

// ---- gradients ---------------------------------------------------------------------------------

// attrs with `shape` set to `like`'s (the gradient ops' target), or cleared (conv2d reads none).
OpAttrs with_shape(const OpAttrs& attrs, const DTensor* like) {
  OpAttrs a = attrs;
  a.shape = like != nullptr ? like->shape().dims() : std::vector<int64_t>{};
  return a;
}

DTensor input_grad(const DTensor& grad, const DTensor& filters, const DTensor& input,
                   const OpAttrs& attrs) {
  return call_op(kConvInput, {grad, filters}, with_shape(attrs, &input));
}

DTensor filter_grad(const DTensor& input, const DTensor& grad, const DTensor& filters,
                    const OpAttrs& attrs) {
  return call_op(kConvFilter, {input, grad}, with_shape(attrs, &filters));
}

DTensor forward(const DTensor& input, const DTensor& filters, const OpAttrs& attrs) {
  return call_op(kConv, {input, filters}, with_shape(attrs, nullptr));
}

// y = conv2d(x, w): dx = backprop_input(g, w), dw = backprop_filter(x, g).
std::vector<DTensor> vjp_conv(const VjpArgs& a) {
  const DTensor &x = a.inputs[0], &w = a.inputs[1];
  return {input_grad(a.grad, w, x, *a.attrs), filter_grad(x, a.grad, w, *a.attrs)};
}

// dx = backprop_input(dy, w): d dy = conv2d(g, w), d w = backprop_filter(g, dy).
std::vector<DTensor> vjp_conv_input(const VjpArgs& a) {
  const DTensor &dy = a.inputs[0], &w = a.inputs[1];
  return {forward(a.grad, w, *a.attrs), filter_grad(a.grad, dy, w, *a.attrs)};
}

// dw = backprop_filter(x, dy): d x = backprop_input(dy, g), d dy = conv2d(x, g).
std::vector<DTensor> vjp_conv_filter(const VjpArgs& a) {
  const DTensor &x = a.inputs[0], &dy = a.inputs[1];
  return {input_grad(dy, a.grad, x, *a.attrs), forward(x, a.grad, *a.attrs)};
}

}  // namespace

void register_conv_ops(OpRegistry& registry) {
  add_window_op(registry, kConv, 2, {infer_conv, rule_conv, kernel_conv, vjp_conv});
  add_window_op(registry, kConvInput, 2,
                {infer_conv_input, rule_conv_input, kernel_conv_input, vjp_conv_input});
  add_window_op(registry, kConvFilter, 2,
                {infer_conv_filter, rule_conv_filter, kernel_conv_filter, vjp_conv_filter});
}

}  // namespace detail

DTensor conv2d(const DTensor& input, const DTensor& filters, const std::vector<int64_t>& strides,
               const std::string& padding, const std::vector<int64_t>& dilations,
               const std::vector<int64_t>& explicit_paddings) {
  OpAttrs attrs;
  attrs.strides = strides;
  attrs.padding = padding;
  attrs.dilations = dilations;
  attrs.explicit_paddings = explicit_paddings;
  return call_op(detail::kConv, {input, filters}, attrs);
}

}  // namespace tessel
