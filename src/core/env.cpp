// The one reader of environment variables (env.h).
#include "core/env.h"

#include <cstdlib>

#include "core/byte_size.h"
#include "core/errors.h"
#include "core/text.h"

namespace tessel::detail {
namespace {

constexpr IntRange kAnyInteger{};

// What an integer in `range` is, for the error when the caller gave no description.
std::string integer_kind(IntRange range) {
  if (range.low == kAnyInteger.low && range.high == kAnyInteger.high) return "an integer";
  if (range.high == kAnyInteger.high) return fmt::format("an integer >= {}", range.low);
  return fmt::format("an integer in [{}, {}]", range.low, range.high);
}

[[noreturn]] void bad_value(std::string_view component, const char* name, const std::string& text,
                            std::string_view expected) {
  throw_invalid(component, "{}='{}' is not {}", name, text, expected);
}

}  // namespace

std::optional<std::string> env_raw(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::nullopt;
  return std::string(text);
}

std::optional<std::string> env_string(const char* name) {
  std::optional<std::string> text = env_raw(name);
  if (text && text->empty()) return std::nullopt;
  return text;
}

std::optional<int64_t> env_int(const char* name, IntRange range, std::string_view component,
                               std::string_view expected) {
  const std::optional<std::string> text = env_string(name);
  if (!text) return std::nullopt;
  const std::optional<int64_t> value = parse_integer(*text);
  if (!value || *value < range.low || *value > range.high) {
    bad_value(component, name, *text, expected.empty() ? integer_kind(range) : expected);
  }
  return value;
}

std::optional<double> env_number(const char* name, NumberRange range, std::string_view component,
                                 std::string_view expected) {
  const std::optional<std::string> text = env_string(name);
  if (!text) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text->c_str(), &end);
  if (end != text->c_str() + text->size() || !(value > range.above && value <= range.at_most)) {
    bad_value(component, name, *text,
              expected.empty() ? fmt::format("a number in ({}, {}]", range.above, range.at_most)
                               : std::string(expected));
  }
  return value;
}

std::optional<int64_t> env_byte_size(const char* name, int64_t min, std::string_view component) {
  const std::optional<std::string> text = env_string(name);
  if (!text) return std::nullopt;
  const std::optional<int64_t> bytes = parse_byte_size(*text);
  if (!bytes || *bytes < min) {
    bad_value(component, name, *text,
              fmt::format("a byte count of at least {} (e.g. 4096, 512M, 4G)", min));
  }
  return bytes;
}

bool env_flag(const char* name, bool fallback, std::string_view component) {
  const std::optional<std::string> text = env_string(name);
  if (!text) return fallback;
  std::string lower;
  for (const char c : *text) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  for (const char* yes : {"1", "true", "yes", "on"}) {
    if (lower == yes) return true;
  }
  for (const char* no : {"0", "false", "no", "off"}) {
    if (lower == no) return false;
  }
  bad_value(component, name, *text, "a switch (1, true, yes, on or 0, false, no, off)");
}

}  // namespace tessel::detail
