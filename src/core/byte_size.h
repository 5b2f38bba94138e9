// Internal: byte counts as text, for messages and environment variables (env.h's env_byte_size).
//   format_bytes(21474836480) == "20.0 GiB";  format_bytes(512) == "512 B"
//   format_request_bytes(1536) == "1.5 KiB (1536 bytes)"
//   parse_byte_size("64MiB") == 67108864;     parse_byte_size("1.5G") == nullopt (whole numbers)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessel::detail {

// Bytes below 1 KiB exactly, larger counts with one decimal in the largest binary unit that keeps
// the number at least 1 (KiB, MiB, GiB, TiB).
std::string format_bytes(int64_t bytes);
// As format_bytes, with the exact count after a rounded one: "100.0 MiB (104857600 bytes)",
// "512 B". For a request, which a reader may want to the byte.
std::string format_request_bytes(int64_t bytes);

// Digits, optionally followed by a unit K, M, G or T (powers of 1024, either case, optionally
// followed by B or iB), e.g. 4096, 64M, 16MiB, 2g. Anything else, or a count beyond int64:
// nullopt.
std::optional<int64_t> parse_byte_size(std::string_view text);

}  // namespace tessel::detail
