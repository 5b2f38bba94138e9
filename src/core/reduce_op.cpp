#include "tessel/core/reduce_op.h"

#include <array>

#include "core/errors.h"

namespace tessel {
namespace {

struct ReduceOpInfo {
  ReduceOp op;
  std::string_view name;        // canonical lower-case name
  std::string_view upper_name;  // TensorFlow's spelling, also accepted
};

constexpr std::array<ReduceOpInfo, 5> kReduceOps = {{
    {ReduceOp::kSum, "sum", "SUM"},
    {ReduceOp::kMean, "mean", "MEAN"},
    {ReduceOp::kMax, "max", "MAX"},
    {ReduceOp::kMin, "min", "MIN"},
    {ReduceOp::kProd, "prod", "PROD"},
}};

}  // namespace

std::string_view reduce_op_name(ReduceOp op) {
  const auto index = static_cast<size_t>(op);
  if (index >= kReduceOps.size()) {
    detail::throw_invalid("ReduceOp", "unknown reduce op value {}", index);
  }
  return kReduceOps[index].name;
}

ReduceOp reduce_op_from_name(std::string_view name) {
  for (const ReduceOpInfo& r : kReduceOps) {
    if (name == r.name || name == r.upper_name) return r.op;
  }
  detail::throw_invalid("ReduceOp", "unknown reduce op '{}' (expected sum, mean, max, min or prod)",
                        name);
}

}  // namespace tessel
