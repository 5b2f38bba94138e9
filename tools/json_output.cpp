#include "json_output.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace tessel::cli {

Json json_number(double value, int significant) {
  if (!std::isfinite(value)) return nullptr;
  // Printing with %.*g and reading back gives the nearest double to the rounded decimal, which
  // nlohmann's shortest round-trip output then prints as that decimal.
  char text[64];
  std::snprintf(text, sizeof text, "%.*g", significant, value);
  return std::strtod(text, nullptr);
}

void print_json(const Json& value) { std::cout << value.dump() << "\n" << std::flush; }

}  // namespace tessel::cli
