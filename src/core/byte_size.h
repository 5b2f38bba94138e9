// Internal: byte counts as text for the library's messages, beside the public formatter and
// parser (tessel/core/byte_size.h).
//   format_request_bytes(1536) == "1.5 KiB (1536 bytes)"
#pragma once

#include <cstdint>
#include <string>

#include "tessel/core/byte_size.h"

namespace tessel::detail {

// The public functions, for the internal callers that name them detail::format_bytes.
using ::tessel::format_bytes;
using ::tessel::parse_byte_size;

// As format_bytes, with the exact count after a rounded one: "100.0 MiB (104857600 bytes)",
// "512 B". For a request, which a reader may want to the byte.
std::string format_request_bytes(int64_t bytes);

}  // namespace tessel::detail
