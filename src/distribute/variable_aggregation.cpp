// VariableAggregation's names and its ReduceOp (TF's reduce_util).
#include "tessel/distribute/variable_aggregation.h"

#include "core/errors.h"

namespace tessel {

std::string_view variable_aggregation_name(VariableAggregation aggregation) {
  switch (aggregation) {
    case VariableAggregation::kNone:
      return "NONE";
    case VariableAggregation::kSum:
      return "SUM";
    case VariableAggregation::kMean:
      return "MEAN";
    case VariableAggregation::kOnlyFirstReplica:
      return "ONLY_FIRST_REPLICA";
  }
  detail::throw_invalid("VariableAggregation", "unknown value {}", static_cast<int>(aggregation));
}

ReduceOp reduce_op_from_variable_aggregation(VariableAggregation aggregation) {
  if (aggregation == VariableAggregation::kSum) return ReduceOp::kSum;
  if (aggregation == VariableAggregation::kMean) return ReduceOp::kMean;
  // TF's text, its missing space included.
  detail::throw_invalid("ReduceOp",
                        "Could not convert from `tf.VariableAggregation` VariableAggregation.{} "
                        "to`tf.distribute.ReduceOp` type",
                        variable_aggregation_name(aggregation));
}

}  // namespace tessel
