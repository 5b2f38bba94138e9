// The nn op family (registered by register_nn_ops).
#include "dtensor/op_families.h"
#include "dtensor/op_util.h"
#include "tessel/ops.h"

namespace tessel {
namespace detail {

void register_nn_ops(OpRegistry& /*registry*/) {}

}  // namespace detail
}  // namespace tessel
