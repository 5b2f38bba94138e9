// Internal: the 2-D window that conv2d and the pools slide over NHWC images (ops_conv.cpp,
// ops_pool.cpp), worked out from the ops' attributes under TF's conventions and checked, and the
// sharding check and registration helper the two families share.
//
// One output cell (oh, ow) reads the input cells (oh * stride_h - pad_top + i * dilation_h,
// ow * stride_w - pad_left + j * dilation_w) for i < k_h, j < k_w; cells outside the input are
// padding (zeros for conv2d, not counted by the pools). Output sizes, with the effective window
// e = (k - 1) * dilation + 1:
//   "VALID":    (in - e) / stride + 1, no padding (in < e: kInvalidArgument);
//   "SAME":     ceil(in / stride), padding max((out - 1) * stride + e - in, 0) split with the
//               extra cell after (TF's);
//   "EXPLICIT": (in + before + after - e) / stride + 1 with explicit_paddings' pads.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tessel/core/shape.h"
#include "tessel/dtensor/op_registry.h"
#include "tessel/mesh/layout.h"

namespace tessel::detail {

struct Window2D {
  int64_t in_h = 0, in_w = 0;  // the input's spatial extent
  int64_t k_h = 1, k_w = 1;    // the window's (filter's) taps
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int64_t out_h = 0, out_w = 0;

  // No padding, stride 1 and a 1x1 window: output cell (h, w) reads input cell (h, w) alone.
  bool pointwise() const {
    return k_h == 1 && k_w == 1 && stride_h == 1 && stride_w == 1 && pad_top == 0 &&
           pad_left == 0 && out_h == in_h && out_w == in_w;
  }
};

// TF's 1, 2 or 4 ints of `what` ("strides", "dilations", "ksize") as (height, width): one int is
// both; four are one per NHWC dim with the N and C ones 1. Empty: `fallback` when given, else
// kInvalidArgument (required). Values below 1: kInvalidArgument naming the op and the value.
std::array<int64_t, 2> spatial_pair(std::string_view op, std::string_view what,
                                    const std::vector<int64_t>& values,
                                    const std::array<int64_t, 2>* fallback = nullptr);

// The window of op `op` over an in_h x in_w input for a k_h x k_w window (the filter's taps or
// ksize): strides and padding (and explicit_paddings) from attrs, dilations too when `dilated`
// (conv2d; the pools take none). A pool's explicit pads must each be smaller than its window, so
// that every window holds an input cell. Errors: kInvalidArgument naming the op and the value.
Window2D make_window(std::string_view op, const OpAttrs& attrs, int64_t in_h, int64_t in_w,
                     int64_t k_h, int64_t k_w, bool dilated);

// `shape` has rank 4 (`dims`: "NHWC" or "HWIO" says what the dims are), else kInvalidArgument
// naming the op, `what` ("input", "filters", ...) and the shape.
void require_rank4(std::string_view op, std::string_view what, const Shape& shape,
                   std::string_view dims);

// The sharding rules' check: dims 1 and 2 of `layout` (an NHWC image's height and width; with
// `first` 0, dims 0 and 1: an HWIO filter's) unsharded, else no rule (kUnimplemented: the
// sharding fallback gathers them). `whose` names the tensor in the message ("the input's").
void require_spatial_whole(std::string_view op, std::string_view whose, const Layout& layout,
                           int first = 1);

// Registers an op of these families from plain functions: its shape inference, its sharding
// rule (which reads only the input specs), its CPU kernel (no LocalContext: the window's blocks
// need none) and its VJP (null: none).
struct WindowOpFns {
  TensorSpec (*infer)(const std::vector<TensorSpec>& in, const OpAttrs& attrs);
  ShardingDecision (*rule)(const std::vector<TensorSpec>& in);
  void (*kernel)(const std::vector<Tensor>& in, Tensor& out, const OpAttrs& attrs);
  std::vector<DTensor> (*vjp)(const VjpArgs& args);
};
void add_window_op(OpRegistry& registry, std::string_view name, int num_inputs,
                   const WindowOpFns& fns);

}  // namespace tessel::detail
