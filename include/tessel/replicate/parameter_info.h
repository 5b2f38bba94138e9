// ParameterInfo: the host-side argument layout of a replicated computation (TF's
// DistributedTPURewritePass::ParameterInfo, tensorflow/core/tpu/graph_rewrite/
// distributed_tpu_rewrite_pass.h). _TPUReplicate takes, in order: the per-replica inputs,
// replica-major (inputs A, B, C and 2 replicas: A0 B0 C0 A1 B1 C1); the distributed inputs (one
// packed handle each, TPUReplicatedInput's is_packed: E F); the broadcast inputs (X Y); the
// variables (V W); the guaranteed constants. Each replica receives A B C E F X Y V W (+ constants).
// The outputs are replica-major too: num_replicas * retvals_per_replica.
//
//   ParameterInfo p(/*num_replicas=*/2, /*per_replica=*/3, /*distributed=*/2, /*broadcast=*/2,
//                   /*variables=*/2, /*guaranteed_constants=*/0, /*retvals_per_replica=*/1);
//   p.num_inputs_from_host() == 12;  p.num_inputs_to_each_replica() == 9
//   p.first_broadcast_arg_from_host() == 8
//   p.kind(4) == ParameterInfo::Kind::kDistributed      // F, argument 4 of every replica
//   p.host_input_index(1, 2) == 5                        // C1
//   p.host_input_index(1, 4) == 7                        // F: the one handle every replica shares
//
// Arguments are indexed as each replica sees them, [0, num_inputs_to_each_replica()). TF's
// IsBroadcastArg/IsVariableArg overlap when there are distributed inputs (IsBroadcastArg starts at
// the distributed ones, IsVariableArg leaves them out of its offset); kind() gives every index
// exactly one kind, by the order above.
// Errors: Error kInvalidArgument from "ParameterInfo": num_replicas < 1 or a negative count
// (naming it) at construction; an index out of range (naming it and the bound).
// Thread safety: an immutable value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tessel {

class ParameterInfo {
 public:
  enum class Kind { kPerReplica, kDistributed, kBroadcast, kVariable, kGuaranteedConstant };

  ParameterInfo(int64_t num_replicas, int64_t num_per_replica_args, int64_t num_distributed_args,
                int64_t num_broadcast_args, int64_t num_variables,
                int64_t num_guaranteed_constants, int64_t num_retvals_per_replica);

  int64_t num_replicas() const { return num_replicas_; }
  int64_t num_per_replica_args() const { return num_per_replica_args_; }
  int64_t num_distributed_args() const { return num_distributed_args_; }
  int64_t num_broadcast_args() const { return num_broadcast_args_; }
  int64_t num_variables() const { return num_variables_; }
  int64_t num_guaranteed_constants() const { return num_guaranteed_constants_; }
  int64_t num_retvals_per_replica() const { return num_retvals_per_replica_; }

  // The inputs _TPUReplicate takes from the host: replicas * per-replica + the rest.
  int64_t num_inputs_from_host() const;
  // The arguments each replica receives.
  int64_t num_inputs_to_each_replica() const;
  // The outputs returned to the host: replicas * retvals per replica.
  int64_t num_outputs_to_host() const;
  // The host position of the first broadcast input (after the per-replica and distributed ones).
  int64_t first_broadcast_arg_from_host() const;

  // The kind of a replica's argument `arg`.
  Kind kind(int64_t arg) const;
  // The host input that replica `replica`'s argument `arg` comes from.
  int64_t host_input_index(int64_t replica, int64_t arg) const;
  // The host output that replica `replica`'s return value `retval` goes to.
  int64_t host_output_index(int64_t replica, int64_t retval) const;

  std::string to_string() const;
  friend bool operator==(const ParameterInfo&, const ParameterInfo&) = default;

 private:
  int64_t num_replicas_;
  int64_t num_per_replica_args_;
  int64_t num_distributed_args_;
  int64_t num_broadcast_args_;
  int64_t num_variables_;
  int64_t num_guaranteed_constants_;
  int64_t num_retvals_per_replica_;
};

// "per_replica", "distributed", "broadcast", "variable", "guaranteed_constant".
std::string_view parameter_kind_name(ParameterInfo::Kind kind);

}  // namespace tessel
