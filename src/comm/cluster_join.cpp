// Internal: argument checks shared by the Cluster implementations (see cluster_join.h).
#include "comm/cluster_join.h"

#include <algorithm>
#include <set>

#include "core/errors.h"

namespace tessel::detail {

void check_join(const std::vector<std::string>& members, const std::vector<int>& owners,
                int num_clients, int me) {
  constexpr std::string_view kCluster = "Cluster";
  if (members.size() != owners.size()) {
    throw_invalid(kCluster, "join: {} members but {} owners", members.size(), owners.size());
  }
  std::set<std::string> seen;
  for (size_t r = 0; r < members.size(); ++r) {
    if (owners[r] < 0 || owners[r] >= num_clients) {
      throw_invalid(kCluster, "join: member {} ({}) is owned by client {}, outside [0, {})", r,
                    members[r], owners[r], num_clients);
    }
    if (!seen.insert(members[r]).second) {
      throw_invalid(kCluster, "join: member {} is listed twice", members[r]);
    }
  }
  if (std::find(owners.begin(), owners.end(), me) == owners.end()) {
    throw_invalid(kCluster, "join: client {} owns none of the members [{}]", me,
                  fmt::join(members, ", "));
  }
}

std::vector<int> owning_clients(const std::vector<int>& owners) {
  const std::set<int> distinct(owners.begin(), owners.end());
  return {distinct.begin(), distinct.end()};
}

std::vector<int> ranks_owned_by(const std::vector<int>& owners, int me) {
  std::vector<int> ranks;
  for (size_t r = 0; r < owners.size(); ++r) {
    if (owners[r] == me) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

}  // namespace tessel::detail
