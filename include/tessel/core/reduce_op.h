// ReduceOp: how values from several devices combine (collectives and Partial layouts).
//
// kMean is a sum divided by the number of participants. Names print as "sum", "mean", "max",
// "min", "prod"; reduce_op_from_name parses them (and TF's upper-case "SUM"/"MEAN").
#pragma once

#include <string_view>

namespace tessel {

enum class ReduceOp { kSum, kMean, kMax, kMin, kProd };

std::string_view reduce_op_name(ReduceOp op);
// Unknown name: Error kInvalidArgument naming it.
ReduceOp reduce_op_from_name(std::string_view name);

}  // namespace tessel
