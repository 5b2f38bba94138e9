// Byte counts as text: the one formatter and the one parser of sizes, for messages, environment
// variables (TESSEL_HOST_MEMORY_LIMIT="16G") and the CLI's size flags (--bytes 64M).
//
//   format_bytes(21474836480) == "20.0 GiB";   format_bytes(1536) == "1.5 KiB";
//   format_bytes(512) == "512 B"
//   parse_byte_size("64MiB") == 67108864;      parse_byte_size("2g") == 2147483648
//   parse_byte_size("1.5G") == nullopt (whole numbers only)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessel {

// Bytes below 1 KiB exactly ("512 B"), larger counts with one decimal in the largest binary unit
// that keeps the number at least 1 (KiB, MiB, GiB, TiB).
std::string format_bytes(int64_t bytes);

// Digits, optionally followed by a unit K, M, G or T (powers of 1024, either case, optionally
// followed by B or iB), e.g. 4096, 64M, 16MiB, 2g. Anything else (a sign, a fraction, a space),
// or a count beyond int64: nullopt.
std::optional<int64_t> parse_byte_size(std::string_view text);

}  // namespace tessel
