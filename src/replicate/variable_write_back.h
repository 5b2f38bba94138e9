// Internal: replicate()'s write-back of the variables its replicas assigned
// (ReplicaContext::assign_variable, replica_context.h): checked whole before anything is written,
// so that a refused write-back leaves every variable as it was.
#pragma once

#include <vector>

#include "tessel/core/tensor.h"
#include "tessel/replicate/replicated_io.h"

namespace tessel::detail {

// assigned[replica][variable]: the host value the replica last assigned, undefined where it
// assigned none. Per-replica variables take each assigning replica's value; mirrored ones the
// replicas' values combined by their aggregation (every replica must have assigned them).
// Errors: kInvalidArgument from "replicate" naming the variable (and the replica that did not
// assign it, or the aggregation that cannot combine its dtype).
void write_back_variables(const std::vector<ReplicatedVariable>& variables,
                          const std::vector<std::vector<Tensor>>& assigned);

}  // namespace tessel::detail
