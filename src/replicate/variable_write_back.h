// Internal: replicate()'s write-back of the variables its replicas assigned
// (ReplicaContext::assign_variable, replica_context.h): checked whole before anything is written,
// so that a refused write-back leaves every variable as it was.
#pragma once

#include <vector>

#include "replicate/group_replica_context.h"
#include "tessel/core/tensor.h"
#include "tessel/replicate/replicated_io.h"

namespace tessel::detail {

// Whether some variable is mirrored: across clients, its write-back needs exchange_mirrored.
bool any_mirrored(const std::vector<ReplicatedVariable>& variables);

// Across clients (processes), on the thread of each replica of this client, after its
// computation returned: `mine` is what the replica assigned ([variable], undefined where it
// assigned none, in host memory). Every replica's assignments of the mirrored variables are
// gathered through the call's groups (ctx.gather_for_write_back: which replicas assigned each
// one, then the values of those some replica assigned), so that every client holds the same
// assigned[replica][variable] for them and write_back_variables combines them exactly as the
// one-process call does (same values, same order). Returns that matrix: the mirrored
// variables' entries of every replica, and this replica's own row (`mine`) for the others.
// Errors are the collectives' (kAborted when a replica of any client failed, kDeadlineExceeded
// naming a replica that never arrives, by the call's deadline).
std::vector<std::vector<Tensor>> exchange_mirrored(GroupReplicaContext& ctx,
                                                   const std::vector<ReplicatedVariable>& variables,
                                                   const std::vector<Tensor>& mine);

// assigned[replica][variable]: the host value the replica last assigned, undefined where it
// assigned none. Per-replica variables take each assigning replica's value; mirrored ones the
// replicas' values combined by their aggregation (every replica must have assigned them).
// Errors: kInvalidArgument from "replicate" naming the variable (and the replica that did not
// assign it, or the aggregation that cannot combine its dtype).
void write_back_variables(const std::vector<ReplicatedVariable>& variables,
                          const std::vector<std::vector<Tensor>>& assigned);

}  // namespace tessel::detail
