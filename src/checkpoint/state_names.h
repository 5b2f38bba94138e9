// The rule for the names of a checkpoint State's items (tensor names in the safetensors files,
// keys of the manifest): non-empty paths of '/'-separated non-empty parts, printable ASCII, and
// not "__metadata__" (safetensors' reserved key). Anything else: kInvalidArgument naming it.
#pragma once

#include <algorithm>
#include <string>

#include "core/errors.h"

namespace tessel::checkpoint {

inline void check_item_name(const std::string& name) {
  const bool printable =
      std::all_of(name.begin(), name.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  if (name.empty() || !printable || name == "__metadata__" || name.front() == '/' ||
      name.back() == '/' || name.find("//") != std::string::npos) {
    tessel::detail::throw_invalid("checkpoint",
                                  "item name '{}' is not a path of non-empty '/'-separated parts "
                                  "of printable ASCII (nor __metadata__)",
                                  name);
  }
}

}  // namespace tessel::checkpoint
