// VariableAggregation: how the replicas' updates of one mirrored variable combine (TF's
// tf.VariableAggregation), and its mapping onto a ReduceOp (TF's reduce_util).
//
//   reduce_op_from_variable_aggregation(VariableAggregation::kMean) == ReduceOp::kMean
#pragma once

#include <string_view>

#include "tessel/core/reduce_op.h"

namespace tessel {

// TF's tf.VariableAggregation (the values are TF's).
enum class VariableAggregation { kNone = 0, kSum = 1, kMean = 2, kOnlyFirstReplica = 3 };

// "NONE", "SUM", "MEAN", "ONLY_FIRST_REPLICA".
std::string_view variable_aggregation_name(VariableAggregation aggregation);

// TF's ReduceOp.from_variable_aggregation: SUM -> SUM, MEAN -> MEAN; NONE and
// ONLY_FIRST_REPLICA have no reduce op: kInvalidArgument with TF's text "Could not convert from
// `tf.VariableAggregation` VariableAggregation.NONE to`tf.distribute.ReduceOp` type".
ReduceOp reduce_op_from_variable_aggregation(VariableAggregation aggregation);

}  // namespace tessel
