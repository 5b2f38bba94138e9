// Internal helpers that format and throw tessel::Error in one line:
//   throw_invalid("Mesh", "dimension {} does not exist", name);
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessel/core/error.h"

namespace tessel::detail {

template <typename... Args>
[[noreturn]] void throw_error(ErrorCode code, std::string_view component,
                              fmt::format_string<Args...> format, Args&&... args) {
  throw Error(code, component, fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void throw_invalid(std::string_view component, fmt::format_string<Args...> format,
                                Args&&... args) {
  throw_error(ErrorCode::kInvalidArgument, component, format, std::forward<Args>(args)...);
}

}  // namespace tessel::detail
