// The shape op family (registered by register_shape_ops).
#include "dtensor/op_families.h"
#include "dtensor/op_util.h"
#include "tessel/ops.h"

namespace tessel {
namespace detail {

void register_shape_ops(OpRegistry& /*registry*/) {}

}  // namespace detail
}  // namespace tessel
