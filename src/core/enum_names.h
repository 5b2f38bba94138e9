// Internal: an enum's names, listed once as a table from which both directions follow (the form
// of every public `<enum>_name` / `<enum>_from_name` pair whose enum has nothing else to list):
//
//   constexpr EnumName<Algorithm> kAlgorithmNames[] = {{Algorithm::kAuto, "auto"}, ...};
//   name_of(kAlgorithmNames, Algorithm::kRing, "CollectiveOptions") == "ring"
//   value_named(kAlgorithmNames, "ring") == Algorithm::kRing;  value_named(..., "x") == nullopt
//
// A value outside the table (an integer cast to the enum) has no name: kInvalidArgument from
// `component` naming the integer, as dtype_name and reduce_op_name answer.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <type_traits>

#include "core/errors.h"

namespace tessel::detail {

template <typename Enum>
struct EnumName {
  Enum value;
  std::string_view name;
};

template <typename Enum, size_t N>
std::string_view name_of(const EnumName<Enum> (&names)[N], Enum value, std::string_view component) {
  for (const EnumName<Enum>& n : names) {
    if (n.value == value) return n.name;
  }
  throw_invalid(component, "unknown value {}", static_cast<std::underlying_type_t<Enum>>(value));
}

// The value whose name is `name` exactly; nullopt for any other text (the caller's error names
// what it expected).
template <typename Enum, size_t N>
std::optional<Enum> value_named(const EnumName<Enum> (&names)[N], std::string_view name) {
  for (const EnumName<Enum>& n : names) {
    if (n.name == name) return n.value;
  }
  return std::nullopt;
}

}  // namespace tessel::detail
