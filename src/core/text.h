// Internal: the library's small text helpers, one home for each: splitting a list and reading a
// whole decimal integer (the Mesh and Layout text forms, Shape::parse, the environment).
//   split("a,b,", ',') == {"a", "b", ""};   split("", ',') == {""}
//   parse_integer("-12") == -12;            parse_integer("12x") == nullopt
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessel::detail {

// Splits on every `sep`; "" gives {""}, "a," gives {"a", ""}.
std::vector<std::string> split(std::string_view text, char sep);

// The whole of `text` as a decimal int64 (optional leading '-', no '+' or spaces); nullopt on
// anything else, an empty text or a value beyond int64.
std::optional<int64_t> parse_integer(std::string_view text);

}  // namespace tessel::detail
