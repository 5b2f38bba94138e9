// Internal to `tessel bench`: JSON text of the values the --json outputs print.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace tessel::cli::bench {

// A number with 6 significant digits; null for NaN and infinities (JSON has neither).
inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// A quoted string; '"', '\' and control characters escaped.
inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(ch)));
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

}  // namespace tessel::cli::bench
