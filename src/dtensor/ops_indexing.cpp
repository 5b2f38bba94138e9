// The indexing op family (registered by register_indexing_ops).
#include "dtensor/op_families.h"
#include "dtensor/op_util.h"
#include "tessel/ops.h"

namespace tessel {
namespace detail {

void register_indexing_ops(OpRegistry& /*registry*/) {}

}  // namespace detail
}  // namespace tessel
