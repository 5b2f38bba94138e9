// TF's ParameterInfo: the host-side argument layout of _TPUReplicate (see parameter_info.h).
#include "tessel/replicate/parameter_info.h"

#include <fmt/format.h>

#include "core/errors.h"

namespace tessel {
namespace {

constexpr const char* kComponent = "ParameterInfo";

void check_count(int64_t value, int64_t minimum, const char* name) {
  if (value < minimum) {
    detail::throw_invalid(kComponent, "{} must be >= {}; got {}", name, minimum, value);
  }
}

void check_index(int64_t value, int64_t bound, const char* name) {
  if (value < 0 || value >= bound) {
    detail::throw_invalid(kComponent, "{} {} is out of range [0, {})", name, value, bound);
  }
}

}  // namespace

ParameterInfo::ParameterInfo(int64_t num_replicas, int64_t num_per_replica_args,
                             int64_t num_distributed_args, int64_t num_broadcast_args,
                             int64_t num_variables, int64_t num_guaranteed_constants,
                             int64_t num_retvals_per_replica)
    : num_replicas_(num_replicas),
      num_per_replica_args_(num_per_replica_args),
      num_distributed_args_(num_distributed_args),
      num_broadcast_args_(num_broadcast_args),
      num_variables_(num_variables),
      num_guaranteed_constants_(num_guaranteed_constants),
      num_retvals_per_replica_(num_retvals_per_replica) {
  check_count(num_replicas, 1, "num_replicas");
  check_count(num_per_replica_args, 0, "num_per_replica_args");
  check_count(num_distributed_args, 0, "num_distributed_args");
  check_count(num_broadcast_args, 0, "num_broadcast_args");
  check_count(num_variables, 0, "num_variables");
  check_count(num_guaranteed_constants, 0, "num_guaranteed_constants");
  check_count(num_retvals_per_replica, 0, "num_retvals_per_replica");
}

int64_t ParameterInfo::num_inputs_from_host() const {
  return num_replicas_ * num_per_replica_args_ + num_inputs_to_each_replica() -
         num_per_replica_args_;
}

int64_t ParameterInfo::num_inputs_to_each_replica() const {
  return num_per_replica_args_ + num_distributed_args_ + num_broadcast_args_ + num_variables_ +
         num_guaranteed_constants_;
}

int64_t ParameterInfo::num_outputs_to_host() const {
  return num_replicas_ * num_retvals_per_replica_;
}

int64_t ParameterInfo::first_broadcast_arg_from_host() const {
  return num_replicas_ * num_per_replica_args_ + num_distributed_args_;
}

ParameterInfo::Kind ParameterInfo::kind(int64_t arg) const {
  check_index(arg, num_inputs_to_each_replica(), "argument");
  int64_t end = num_per_replica_args_;
  if (arg < end) return Kind::kPerReplica;
  if (arg < (end += num_distributed_args_)) return Kind::kDistributed;
  if (arg < (end += num_broadcast_args_)) return Kind::kBroadcast;
  if (arg < end + num_variables_) return Kind::kVariable;
  return Kind::kGuaranteedConstant;
}

int64_t ParameterInfo::host_input_index(int64_t replica, int64_t arg) const {
  check_index(replica, num_replicas_, "replica");
  if (kind(arg) == Kind::kPerReplica) return replica * num_per_replica_args_ + arg;
  // Every other argument is one host input that all replicas share.
  return num_replicas_ * num_per_replica_args_ + (arg - num_per_replica_args_);
}

int64_t ParameterInfo::host_output_index(int64_t replica, int64_t retval) const {
  check_index(replica, num_replicas_, "replica");
  check_index(retval, num_retvals_per_replica_, "return value");
  return replica * num_retvals_per_replica_ + retval;
}

std::string ParameterInfo::to_string() const {
  return fmt::format(
      "ParameterInfo(num_replicas={}, per_replica={}, distributed={}, broadcast={}, "
      "variables={}, guaranteed_constants={}, retvals_per_replica={})",
      num_replicas_, num_per_replica_args_, num_distributed_args_, num_broadcast_args_,
      num_variables_, num_guaranteed_constants_, num_retvals_per_replica_);
}

std::string_view parameter_kind_name(ParameterInfo::Kind kind) {
  switch (kind) {
    case ParameterInfo::Kind::kPerReplica: return "per_replica";
    case ParameterInfo::Kind::kDistributed: return "distributed";
    case ParameterInfo::Kind::kBroadcast: return "broadcast";
    case ParameterInfo::Kind::kVariable: return "variable";
    case ParameterInfo::Kind::kGuaranteedConstant: return "guaranteed_constant";
  }
  return "";
}

}  // namespace tessel
