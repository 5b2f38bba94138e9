// The warnings of accepted and inert TF attributes (inert_attribute.h).
#include "core/inert_attribute.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <mutex>

namespace tessel::detail {
namespace {

std::mutex& warnings_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<std::string>& warned() {
  static std::vector<std::string> keys;
  return keys;
}

}  // namespace

void warn_inert_attribute(std::string_view component, std::string_view attribute,
                          std::string_view value, std::string_view why) {
  const std::string key = fmt::format("{}.{}", component, attribute);
  {
    std::lock_guard<std::mutex> lock(warnings_mutex());
    std::vector<std::string>& keys = warned();
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) return;
    keys.push_back(key);
  }
  std::fputs(fmt::format("tessel: warning: {}: {}={} changes nothing in tessel: {} "
                         "(docs/compatibility.md)\n",
                         component, attribute, value, why)
                 .c_str(),
             stderr);
}

std::vector<std::string> inert_attribute_warnings() {
  std::lock_guard<std::mutex> lock(warnings_mutex());
  return warned();
}

void reset_inert_attribute_warnings() {
  std::lock_guard<std::mutex> lock(warnings_mutex());
  warned().clear();
}

}  // namespace tessel::detail
