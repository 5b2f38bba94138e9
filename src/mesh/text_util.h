// Internal: small string helpers shared by the Mesh and Layout text parsers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessel::detail {

// Splits on every `sep`; "" gives {""}, "a," gives {"a", ""}.
std::vector<std::string> split(std::string_view text, char sep);
// Parses a whole decimal int64 (optional leading '-'); nullopt-like false on anything else.
bool parse_int64(std::string_view text, int64_t* value);

}  // namespace tessel::detail
