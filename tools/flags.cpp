#include "flags.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

#include "tessel/core/byte_size.h"

namespace tessel::cli {
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

// "a positive integer", "an integer in [1, 64]", ...: what an integer flag expects. A bound at
// (or above) the target type's largest value is no bound.
std::string integer_kind(int64_t low, int64_t high) {
  if (high < kIntMax) {
    return "an integer in [" + std::to_string(low) + ", " + std::to_string(high) + "]";
  }
  if (low == 1) return "a positive integer";
  if (low == 0) return "a non-negative integer";
  return "an integer >= " + std::to_string(low);
}

// A byte count as the size flags take it: 4096, 4K, 16M, 1G, 1024G.
std::string size_text(int64_t bytes) {
  const char* units[] = {"G", "M", "K"};
  for (int i = 0; i < 3; ++i) {
    const int shift = 30 - 10 * i;
    if (bytes != 0 && bytes % (int64_t{1} << shift) == 0) {
      return std::to_string(bytes >> shift) + units[i];
    }
  }
  return std::to_string(bytes);
}

// The whole of `text` as a decimal integer, or nothing (also on overflow).
std::optional<int64_t> whole_integer(std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [at, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || at != end) return std::nullopt;
  return value;
}

}  // namespace

bool wants_help(const Args& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

std::vector<std::string> split_list(const std::string& text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

UsageError::UsageError(std::string command, std::string message)
    : std::runtime_error(command + ": " + message),
      command_(std::move(command)),
      message_(std::move(message)) {}

FlagParser::FlagParser(std::string command) : command_(std::move(command)) {}

void FlagParser::add(Names names, bool takes_value,
                     std::function<void(const std::string&, const std::string&)> handle) {
  flags_.push_back(Flag{std::vector<std::string>(names.begin(), names.end()), takes_value,
                        std::move(handle)});
}

void FlagParser::integer(Names names, int64_t& target, int64_t low, int64_t high) {
  add(names, true, [this, &target, low, high](const std::string& flag, const std::string& value) {
    target = parse_integer(flag, value, low, high);
  });
}

void FlagParser::integer(Names names, int& target, int64_t low, int64_t high) {
  high = std::min(high, kIntMax);
  add(names, true, [this, &target, low, high](const std::string& flag, const std::string& value) {
    target = static_cast<int>(parse_integer(flag, value, low, high));
  });
}

void FlagParser::positive(Names names, int64_t& target) { integer(names, target, 1, kNoLimit); }

void FlagParser::size(Names names, int64_t& target, int64_t low, int64_t high) {
  add(names, true, [this, &target, low, high](const std::string& flag, const std::string& value) {
    target = parse_size(flag, value, low, high);
  });
}

void FlagParser::number(Names names, double& target) {
  add(names, true, [this, &target](const std::string& flag, const std::string& value) {
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(v)) {
      fail(flag + " expects a number, got '" + value + "'");
    }
    target = v;
  });
}

void FlagParser::text(Names names, std::string& target) {
  add(names, true, [&target](const std::string&, const std::string& value) { target = value; });
}

void FlagParser::text(Names names, std::optional<std::string>& target) {
  add(names, true, [&target](const std::string&, const std::string& value) { target = value; });
}

void FlagParser::set(Names names, bool& target, bool value) {
  add(names, false, [&target, value](const std::string&, const std::string&) { target = value; });
}

void FlagParser::custom(
    Names names, std::function<void(const std::string& flag, const std::string& value)> handle) {
  add(names, true, std::move(handle));
}

void FlagParser::positional(std::function<void(const std::string& argument)> handle) {
  positional_ = std::move(handle);
}

const FlagParser::Flag* FlagParser::find(const std::string& name) const {
  for (const Flag& flag : flags_) {
    for (const std::string& n : flag.names) {
      if (n == name) return &flag;
    }
  }
  return nullptr;
}

void FlagParser::parse(const Args& args) const {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.empty() || arg[0] != '-') {
      if (!positional_) fail("unexpected argument '" + arg + "'");
      positional_(arg);
      continue;
    }
    std::string name = arg;
    std::optional<std::string> inline_value;  // --iters=5
    if (const size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string::npos) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    const Flag* flag = find(name);
    if (flag == nullptr) fail("unknown option '" + name + "'");
    if (!flag->takes_value) {
      if (inline_value) fail(name + " takes no value");
      flag->handle(name, "");
    } else if (inline_value) {
      flag->handle(name, *inline_value);
    } else if (i + 1 < args.size()) {
      flag->handle(name, args[++i]);
    } else {
      fail(name + " needs a value");
    }
  }
}

void FlagParser::fail(const std::string& message) const { throw UsageError(command_, message); }

int64_t FlagParser::parse_integer(const std::string& flag, const std::string& text, int64_t low,
                                  int64_t high) const {
  const std::optional<int64_t> value = whole_integer(text);
  if (!value || *value < low || *value > high) {
    fail(flag + " expects " + integer_kind(low, high) + ", got '" + text + "'");
  }
  return *value;
}

int64_t FlagParser::parse_size(const std::string& flag, const std::string& text, int64_t low,
                               int64_t high) const {
  const std::optional<int64_t> bytes = parse_byte_size(text);
  if (!bytes) fail(flag + ": '" + text + "' is not a size (e.g. 4096, 4K, 16M, 1G)");
  if (*bytes < low || *bytes > high) {
    fail(flag + " expects a size in [" + size_text(low) + ", " + size_text(high) + "], got '" +
         text + "'");
  }
  return *bytes;
}

}  // namespace tessel::cli
