// Byte counts as text (tessel/core/byte_size.h, core/byte_size.h).
#include "core/byte_size.h"

#include <charconv>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

namespace tessel {

std::string format_bytes(int64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

std::optional<int64_t> parse_byte_size(std::string_view text) {
  int64_t count = 0;
  const char* end = text.data() + text.size();
  const auto [rest, ec] = std::from_chars(text.data(), end, count);
  if (ec != std::errc() || rest == text.data() || count < 0) return std::nullopt;
  std::string_view unit(rest, static_cast<size_t>(end - rest));
  if (unit.size() > 1 && (unit.substr(1) == "B" || unit.substr(1) == "iB"))
    unit.remove_suffix(unit.size() - 1);
  int shift = -1;
  if (unit.empty() || unit == "B") shift = 0;
  if (unit == "K" || unit == "k") shift = 10;
  if (unit == "M" || unit == "m") shift = 20;
  if (unit == "G" || unit == "g") shift = 30;
  if (unit == "T" || unit == "t") shift = 40;
  if (shift < 0 || count > (std::numeric_limits<int64_t>::max() >> shift)) return std::nullopt;
  return count << shift;
}

namespace detail {

std::string format_request_bytes(int64_t bytes) {
  if (bytes < 1024) return format_bytes(bytes);
  return fmt::format("{} ({} bytes)", format_bytes(bytes), bytes);
}

}  // namespace detail
}  // namespace tessel
