// Internal: the sharding fallback's testing ops (see testing_ops.h).
#include "dtensor/framework/testing_ops.h"

#include <string>

#include "dtensor/framework/op_util.h"
#include "tessel/dtensor/op_registry.h"

namespace tessel::detail {
namespace {

// One op: a running sum down dim 0, forward or in reverse; its VJP is the other direction's op.
OpDef running_sum_op(std::string name, std::string vjp_name, bool reverse) {
  OpDef def;
  def.name = name;
  def.num_inputs = 1;
  def.infer = [name](const std::vector<TensorSpec>& in, const OpAttrs&) {
    require_float(in[0].dtype, name, "dtype");
    if (in[0].shape.rank() < 1) throw_invalid(name, "needs rank >= 1, got a scalar");
    return TensorSpec{in[0].shape, in[0].dtype, {}};
  };
  def.shard = [](const std::vector<TensorSpec>& in, const TensorSpec&, const OpAttrs&) {
    const Layout& layout = in[0].layout;
    if (layout.is_partial()) no_rule("a Partial input");
    if (layout.sharding_specs()[0].is_sharded()) no_rule("dim 0 sharded");
    return ShardingDecision{{layout}, layout};
  };
  def.kernel = [name, reverse](const std::vector<Tensor>& in, Tensor& out, const OpAttrs&,
                               const LocalContext&) {
    const Tensor x = in[0].contiguous();
    const int64_t rows = x.shape().dim(0);
    const int64_t inner = rows == 0 ? 0 : x.num_elements() / rows;
    dispatch_float(x.dtype(), name, [&]<typename T>() {
      const T* src = x.data<T>();
      T* dst = out.data<T>();
      for (int64_t step = 0; step < rows; ++step) {
        const int64_t r = reverse ? rows - 1 - step : step;
        const int64_t prev = reverse ? r + 1 : r - 1;
        for (int64_t j = 0; j < inner; ++j) {
          dst[r * inner + j] = src[r * inner + j] + (step == 0 ? T(0) : dst[prev * inner + j]);
        }
      }
    });
  };
  def.vjp = [vjp_name](const VjpArgs& a) {
    return std::vector<DTensor>{call_op(vjp_name, {a.grad})};
  };
  return def;
}

}  // namespace

void register_testing_ops() {
  static const bool registered = [] {
    OpRegistry& registry = OpRegistry::global();
    registry.add(running_sum_op("testing.cumsum_rows", "testing.reverse_cumsum_rows", false));
    registry.add(running_sum_op("testing.reverse_cumsum_rows", "testing.cumsum_rows", true));
    return true;
  }();
  (void)registered;
}

}  // namespace tessel::detail
