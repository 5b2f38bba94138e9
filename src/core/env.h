// Internal: the one reader of environment variables. Every variable tessel reads goes through
// these functions, typed: unset or empty gives the caller's default (nullopt here), and a value
// that does not parse, or lies outside its range, is kInvalidArgument from `component` naming the
// variable and the value:
//
//   env_int("TESSEL_CPU_DEVICES", {1, 1024}, "Runtime", "a positive integer up to 1024")
//       TESSEL_CPU_DEVICES=8     -> 8
//       TESSEL_CPU_DEVICES=lots  -> "Runtime: TESSEL_CPU_DEVICES='lots' is not a positive
//                                    integer up to 1024"
//   env_number("TESSEL_PER_PROCESS_MEMORY_FRACTION", {0.0, 1.0}, "Allocator")   // in (0, 1]
//   env_byte_size("TESSEL_HOST_MEMORY_LIMIT", 1, "Allocator")                  // "512M", "16G"
//   env_flag("TESSEL_NO_AVX2", "Reduce")                     // 1/true/yes/on, 0/false/no/off
//
// `expected` describes a good value in the error ("a positive integer up to 1024"); left empty
// the reader says it from the range ("an integer in [0, 1024]").
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace tessel::detail {

// The text of `name` as set, "" included; nullopt when unset. Only for a variable whose empty
// value means something (TESSEL_GPU_DEVICES="" is no GPU devices); the others use env_string.
std::optional<std::string> env_raw(const char* name);

// The text of `name`; nullopt when unset or empty.
std::optional<std::string> env_string(const char* name);

// Integers from `low` to `high`, both included.
struct IntRange {
  int64_t low = std::numeric_limits<int64_t>::min();
  int64_t high = std::numeric_limits<int64_t>::max();
};

// `name` as a whole decimal integer in `range` (no sign '+', no spaces); unset or empty: nullopt.
std::optional<int64_t> env_int(const char* name, IntRange range, std::string_view component,
                               std::string_view expected = {});

// Numbers above `above` and at most `at_most`: (above, at_most].
struct NumberRange {
  double above = -std::numeric_limits<double>::infinity();
  double at_most = std::numeric_limits<double>::max();
};

// `name` as a decimal floating-point number in `range` (NaN never is); unset or empty: nullopt.
std::optional<double> env_number(const char* name, NumberRange range, std::string_view component,
                                 std::string_view expected = {});

// `name` as a byte count (parse_byte_size: 4096, 64M, 16MiB, 2g) of at least `min`; unset or
// empty: nullopt. The error says "... is not a byte count of at least <min> (e.g. 4096, 512M, 4G)".
std::optional<int64_t> env_byte_size(const char* name, int64_t min, std::string_view component);

// `name` as a switch: 1, true, yes or on; 0, false, no or off (either case); unset or empty:
// `fallback`.
bool env_flag(const char* name, bool fallback, std::string_view component);

}  // namespace tessel::detail
