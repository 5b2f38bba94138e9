// Internal: the window of conv2d and the pools (see conv_window.h).
#include "dtensor/ops/conv_window.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>

#include "core/errors.h"
#include "dtensor/framework/op_util.h"

namespace tessel::detail {
namespace {

// The output extent along one spatial dim, and the padding before it ("SAME" works it out).
struct Extent {
  int64_t out = 0;
  int64_t before = 0, after = 0;
};

Extent extent_along(std::string_view op, std::string_view dim, const std::string& padding,
                    int64_t in, int64_t taps, int64_t stride, int64_t dilation, int64_t before,
                    int64_t after) {
  const int64_t effective = (taps - 1) * dilation + 1;
  Extent e;
  if (padding == "SAME") {
    e.out = (in + stride - 1) / stride;
    const int64_t total = std::max<int64_t>((e.out - 1) * stride + effective - in, 0);
    e.before = total / 2;
    e.after = total - e.before;
    return e;
  }
  e.before = before;
  e.after = after;
  const int64_t padded = in + before + after;
  if (padded < effective) {
    throw_invalid(op,
                  "the window spans {} cells in {} ({} taps, dilation {}) but the input's {} is "
                  "{}{} (padding \"{}\"), so no window fits",
                  effective, dim, taps, dilation, dim, in,
                  padding == "EXPLICIT" ? fmt::format(" plus {} + {} of padding", before, after)
                                        : std::string(),
                  padding);
  }
  e.out = (padded - effective) / stride + 1;
  return e;
}

}  // namespace

std::array<int64_t, 2> spatial_pair(std::string_view op, std::string_view what,
                                    const std::vector<int64_t>& values,
                                    const std::array<int64_t, 2>* fallback) {
  const std::string given = fmt::format("[{}]", fmt::join(values, ","));
  std::array<int64_t, 2> hw{};
  switch (values.size()) {
    case 0:
      if (fallback == nullptr) throw_invalid(op, "{} is required (1, 2 or 4 ints)", what);
      return *fallback;
    case 1:
      hw = {values[0], values[0]};
      break;
    case 2:
      hw = {values[0], values[1]};
      break;
    case 4:
      if (values[0] != 1 || values[3] != 1) {
        throw_invalid(op,
                      "{} {} acts on the batch or channel dimension (NHWC: the first and last "
                      "entries must be 1); only height and width are supported",
                      what, given);
      }
      hw = {values[1], values[2]};
      break;
    default:
      throw_invalid(op, "{} must have 1, 2 or 4 entries, got {} ({})", what, values.size(), given);
  }
  if (hw[0] < 1 || hw[1] < 1) throw_invalid(op, "{} must be >= 1, got {}", what, given);
  return hw;
}

Window2D make_window(std::string_view op, const OpAttrs& attrs, int64_t in_h, int64_t in_w,
                     int64_t k_h, int64_t k_w, bool dilated) {
  static constexpr std::array<int64_t, 2> kOnes = {1, 1};
  const std::array<int64_t, 2> stride = spatial_pair(op, "strides", attrs.strides);
  const std::array<int64_t, 2> dilation =
      dilated ? spatial_pair(op, "dilations", attrs.dilations, &kOnes) : kOnes;
  const std::string& padding = attrs.padding;
  const std::vector<int64_t>& pads = attrs.explicit_paddings;
  if (padding != "SAME" && padding != "VALID" && padding != "EXPLICIT") {
    throw_invalid(op, "padding must be \"SAME\", \"VALID\" or \"EXPLICIT\", got \"{}\"", padding);
  }
  if (padding == "EXPLICIT") {
    const std::string given = fmt::format("[{}]", fmt::join(pads, ","));
    if (pads.size() != 8) {
      throw_invalid(op,
                    "explicit_paddings must have 8 entries ((before, after) per NHWC dimension), "
                    "got {} ({})",
                    pads.size(), given);
    }
    for (int64_t p : pads) {
      if (p < 0) throw_invalid(op, "explicit_paddings must be >= 0, got {}", given);
    }
    if (pads[0] != 0 || pads[1] != 0 || pads[6] != 0 || pads[7] != 0) {
      throw_invalid(op, "explicit_paddings {} pads the batch or channel dimension (NHWC)", given);
    }
    if (!dilated && (pads[2] >= k_h || pads[3] >= k_h || pads[4] >= k_w || pads[5] >= k_w)) {
      throw_invalid(op,
                    "explicit_paddings {} must be smaller than the window ({}x{}) on each side, "
                    "so that every window holds an input cell",
                    given, k_h, k_w);
    }
  } else if (!pads.empty()) {
    throw_invalid(op, "explicit_paddings [{}] are given but padding is \"{}\" (not \"EXPLICIT\")",
                  fmt::join(pads, ","), padding);
  }
  const bool explicit_pads = padding == "EXPLICIT";
  const Extent h = extent_along(op, "height", padding, in_h, k_h, stride[0], dilation[0],
                                explicit_pads ? pads[2] : 0, explicit_pads ? pads[3] : 0);
  const Extent w = extent_along(op, "width", padding, in_w, k_w, stride[1], dilation[1],
                                explicit_pads ? pads[4] : 0, explicit_pads ? pads[5] : 0);
  Window2D g;
  g.in_h = in_h;
  g.in_w = in_w;
  g.k_h = k_h;
  g.k_w = k_w;
  g.stride_h = stride[0];
  g.stride_w = stride[1];
  g.dilation_h = dilation[0];
  g.dilation_w = dilation[1];
  g.pad_top = h.before;
  g.pad_bottom = h.after;
  g.pad_left = w.before;
  g.pad_right = w.after;
  g.out_h = h.out;
  g.out_w = w.out;
  return g;
}

void require_rank4(std::string_view op, std::string_view what, const Shape& shape,
                   std::string_view dims) {
  if (shape.rank() != 4) {
    throw_invalid(op, "{} must have rank 4 ({}), got shape {}", what, dims, shape.to_string());
  }
}

void require_spatial_whole(std::string_view op, std::string_view whose, const Layout& layout,
                           int first) {
  const SpecList specs = spec_list(layout);
  if (!specs[static_cast<size_t>(first)].empty() ||
      !specs[static_cast<size_t>(first + 1)].empty()) {
    no_rule(fmt::format("{}: {} height and width (dims {} and {}) are sharded; they must be whole",
                        op, whose, first, first + 1));
  }
}

void add_window_op(OpRegistry& registry, std::string_view name, int num_inputs,
                   const WindowOpFns& fns) {
  OpDef def;
  def.name = std::string(name);
  def.num_inputs = num_inputs;
  def.infer = fns.infer;
  def.shard = [rule = fns.rule](const std::vector<TensorSpec>& in, const TensorSpec&,
                                const OpAttrs&) { return rule(in); };
  def.kernel = [kernel = fns.kernel](const std::vector<Tensor>& in, Tensor& out,
                                     const OpAttrs& attrs,
                                     const LocalContext&) { kernel(in, out, attrs); };
  if (fns.vjp != nullptr) def.vjp = fns.vjp;
  registry.add(std::move(def));
}

}  // namespace tessel::detail
