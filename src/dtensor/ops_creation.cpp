// The creation op family (registered by register_creation_ops).
#include "dtensor/op_families.h"
#include "dtensor/op_util.h"
#include "tessel/ops.h"

namespace tessel {
namespace detail {

void register_creation_ops(OpRegistry& /*registry*/) {}

}  // namespace detail
}  // namespace tessel
