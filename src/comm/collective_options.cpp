#include "tessel/comm/collective_options.h"

#include <string>

#include "core/enum_names.h"
#include "core/env.h"
#include "core/errors.h"

namespace tessel {

namespace {

constexpr detail::EnumName<Algorithm> kAlgorithmNames[] = {
    {Algorithm::kAuto, "auto"},
    {Algorithm::kDirect, "direct"},
    {Algorithm::kRing, "ring"},
    {Algorithm::kHalvingDoubling, "halving_doubling"},
    {Algorithm::kReduceToOne, "reduce_to_one"},
    {Algorithm::kHierarchical, "hierarchical"},
    {Algorithm::kMpi, "mpi"},
};

}  // namespace

std::string_view algorithm_name(Algorithm algorithm) {
  return detail::name_of(kAlgorithmNames, algorithm, "Algorithm");
}

Algorithm algorithm_from_name(std::string_view name) {
  if (const std::optional<Algorithm> a = detail::value_named(kAlgorithmNames, name)) return *a;
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
