// The matmul op family (registered by register_matmul_ops).
#include "dtensor/op_families.h"
#include "dtensor/op_util.h"
#include "tessel/ops.h"

namespace tessel {
namespace detail {

void register_matmul_ops(OpRegistry& /*registry*/) {}

}  // namespace detail
}  // namespace tessel
