// replicate()'s variable write-back (variable_write_back.h).
#include "replicate/variable_write_back.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
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

// Variable k's value as one row of the exchange: contiguous, flattened; zeros when the replica
// did not assign it.
Tensor flat_row(const ReplicatedVariable& v, const Tensor& assigned, int64_t elements) {
  if (!assigned.defined()) return Tensor::zeros(Shape{elements}, v.dtype);
  return assigned.contiguous().reshape(Shape{elements});
}

}  // namespace

bool any_mirrored(const std::vector<ReplicatedVariable>& variables) {
  for (const ReplicatedVariable& v : variables) {
    if (v.is_mirrored_variable) return true;
  }
  return false;
}

std::vector<std::vector<Tensor>> exchange_mirrored(GroupReplicaContext& ctx,
                                                   const std::vector<ReplicatedVariable>& variables,
                                                   const std::vector<Tensor>& mine) {
  const auto replicas = static_cast<size_t>(ctx.num_replicas());
  std::vector<std::vector<Tensor>> assigned(replicas, std::vector<Tensor>(variables.size()));
  assigned[static_cast<size_t>(ctx.replica_id())] = mine;
  std::vector<size_t> mirrored;
  std::vector<std::string> names;
  std::vector<int32_t> flags;  // this replica assigned mirrored variable mirrored[i]
  for (size_t k = 0; k < variables.size(); ++k) {
    if (!variables[k].is_mirrored_variable) continue;
    mirrored.push_back(k);
    names.push_back(fmt::format("'{}'", variables[k].name));
    flags.push_back(mine[k].defined() ? 1 : 0);
  }
  if (mirrored.empty()) return assigned;
  const auto m = static_cast<int64_t>(mirrored.size());
  const std::vector<int32_t> all_flags =
      ctx.gather_for_write_back(Tensor::from_vector<int32_t>(flags, Shape{m}),
                                fmt::format("write-back: which replicas assigned the mirrored "
                                            "variables {}",
                                            fmt::join(names, ", ")))
          .to_vector<int32_t>();
  for (size_t i = 0; i < mirrored.size(); ++i) {
    const size_t k = mirrored[i];
    const ReplicatedVariable& v = variables[k];
    bool any = false;
    for (size_t r = 0; r < replicas; ++r) any = any || all_flags[r * mirrored.size() + i] != 0;
    if (!any) continue;  // nothing to write back on any client
    const Shape& shape = v.value(0).shape();
    const int64_t n = shape.num_elements();
    const Tensor values = ctx.gather_for_write_back(
        flat_row(v, mine[k], n), fmt::format("write-back of mirrored variable '{}' ({}{})", v.name,
                                             dtype_name(v.dtype), shape.to_string()));
    for (size_t r = 0; r < replicas; ++r) {
      if (all_flags[r * mirrored.size() + i] == 0) continue;
      const auto start = static_cast<int64_t>(r) * n;
      assigned[r][k] = values.slice(0, start, start + n).reshape(shape);
    }
  }
  return assigned;
}

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
