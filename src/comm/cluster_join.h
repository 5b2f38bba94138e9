// Internal: what every Cluster::join implementation checks and computes the same way.
#pragma once

#include <string>
#include <vector>

namespace tessel::detail {

// kInvalidArgument (component "Cluster") unless members and owners have equal lengths, every
// owner is a client of [0, num_clients), no member repeats and `me` owns at least one member.
void check_join(const std::vector<std::string>& members, const std::vector<int>& owners,
                int num_clients, int me);

// The distinct owners of a group, ascending.
std::vector<int> owning_clients(const std::vector<int>& owners);

// The ranks (positions in `members`) that client `me` owns, ascending.
std::vector<int> ranks_owned_by(const std::vector<int>& owners, int me);

}  // namespace tessel::detail
