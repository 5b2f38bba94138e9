// Internal: the TF attributes tessel accepts, keeps and cannot act on (docs/compatibility.md,
// "Attributes accepted and inert"). The first time one is set to anything but its default, one
// line on stderr says so and why; the value is kept, so that a TF configuration carries over.
//
//   if (md.use_shardy_partitioner) {
//     warn_inert_attribute("ReplicateMetadata", "use_shardy_partitioner", "true",
//                          "tessel partitions by its own sharding rules");
//   }
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessel::detail {

// "tessel: warning: <component>: <attribute>=<value> changes nothing in tessel: <why>", once per
// (component, attribute) in the process. Thread-safe.
void warn_inert_attribute(std::string_view component, std::string_view attribute,
                          std::string_view value, std::string_view why);

// "<component>.<attribute>" of every warning given so far, in order (for tests).
std::vector<std::string> inert_attribute_warnings();
// Forgets the warnings given, so that each is given again (for tests).
void reset_inert_attribute_warnings();

}  // namespace tessel::detail
