#include "tessel/comm/collective_options.h"

#include <string>

#include "core/env.h"
#include "core/errors.h"

namespace tessel {

std::string_view algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kRing: return "ring";
    case Algorithm::kHalvingDoubling: return "halving_doubling";
    case Algorithm::kReduceToOne: return "reduce_to_one";
    case Algorithm::kHierarchical: return "hierarchical";
    case Algorithm::kMpi: return "mpi";
  }
  return "unknown";
}

Algorithm algorithm_from_name(std::string_view name) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kDirect, Algorithm::kRing,
                      Algorithm::kHalvingDoubling, Algorithm::kReduceToOne,
                      Algorithm::kHierarchical, Algorithm::kMpi}) {
    if (algorithm_name(a) == name) return a;
  }
  if (name == "tree") return Algorithm::kHalvingDoubling;
  detail::throw_invalid("CollectiveOptions",
                        "unknown algorithm '{}' (expected auto, direct, ring, halving_doubling, "
                        "tree, reduce_to_one, hierarchical or mpi)",
                        name);
}

std::chrono::milliseconds default_collective_timeout() {
  // At most 1e7 s (116 days): a larger value is a typo, and its milliseconds would overflow.
  const double seconds = detail::env_number("TESSEL_COLLECTIVE_TIMEOUT_S", {0.0, 1e7},
                                            "CollectiveOptions", "a positive number of seconds")
                             .value_or(300.0);
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0 + 0.5));
}

}  // namespace tessel
