// replicate()'s variable write-back (variable_write_back.h).
#include "replicate/variable_write_back.h"

#include <utility>

#include "comm/reduce_kernels.h"
#include "core/errors.h"

namespace tessel::detail {
namespace {

constexpr const char* kComponent = "replicate";

// The mirrored variable's new value: its replicas' assigned values combined by its aggregation.
Tensor combine_mirrored(const ReplicatedVariable& v, size_t k,
                        const std::vector<std::vector<Tensor>>& assigned) {
  size_t assigning = 0;
  while (!assigned[assigning][k].defined()) ++assigning;  // one did (the caller checked)
  for (size_t r = 0; r < assigned.size(); ++r) {
    if (!assigned[r][k].defined()) {
      throw_invalid(kComponent,
                    "variable '{}' is mirrored: replica {} assigned it and replica {} did not; "
                    "every replica updates a mirrored variable (its aggregation {} combines one "
                    "value per replica)",
                    v.name, assigning, r, variable_aggregation_name(v.aggregation));
    }
  }
  if (v.aggregation == VariableAggregation::kNone ||
      v.aggregation == VariableAggregation::kOnlyFirstReplica) {
    return assigned[0][k];  // NONE: one replica (assign_variable refuses it with more)
  }
  const ReduceOp op = reduce_op_from_variable_aggregation(v.aggregation);
  try {
    check_reducible(v.dtype, op);
  } catch (const Error& e) {
    throw_invalid(kComponent, "variable '{}' (aggregation {}): {}", v.name,
                  variable_aggregation_name(v.aggregation), e.what());
  }
  Tensor result = assigned[0][k].clone();
  for (size_t r = 1; r < assigned.size(); ++r) {
    const Tensor value = assigned[r][k].contiguous();
    accumulate(v.dtype, op, result.data(), value.data(), result.num_elements());
  }
  finish_mean(v.dtype, op, result.data(), result.num_elements(),
              static_cast<int64_t>(assigned.size()));
  return result;
}

}  // namespace

void write_back_variables(const std::vector<ReplicatedVariable>& variables,
                          const std::vector<std::vector<Tensor>>& assigned) {
  std::vector<std::pair<Tensor, Tensor>> writes;  // (the variable's tensor, its new value)
  for (size_t k = 0; k < variables.size(); ++k) {
    const ReplicatedVariable& v = variables[k];
    bool any = false;
    for (const std::vector<Tensor>& replica : assigned) any = any || replica[k].defined();
    if (!any) continue;
    if (v.is_mirrored_variable) {
      writes.emplace_back(v.values[0], combine_mirrored(v, k, assigned));
      continue;
    }
    for (size_t r = 0; r < assigned.size(); ++r) {
      if (assigned[r][k].defined()) writes.emplace_back(v.values[r], assigned[r][k]);
    }
  }
  for (auto& [target, value] : writes) target.copy_from(value);
}

}  // namespace tessel::detail
