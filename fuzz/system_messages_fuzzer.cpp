// libFuzzer target: the messages hosts and the system coordinator exchange (src/system/
// system_messages.h) come from other processes, so their decoders see arbitrary bytes. Each must
// reject bad bytes with tessel::Error, and what it accepts must encode and decode again.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "round_trip.h"
#include "system/system_messages.h"

namespace {

// Decodes `bytes` with `decode`: any tessel::Error rejects them; an accepted message must survive
// encode + decode, and anything else (another exception, a crash) is a finding.
template <typename Decode>
void check_decoder(const char* what, const std::string& bytes, int peer, Decode decode) {
  decltype(decode(bytes, peer)) message;
  try {
    message = decode(bytes, peer);
  } catch (const tessel::Error&) {
    return;
  }
  try {
    decode(tessel::detail::encode(message), peer);
  } catch (const tessel::Error& e) {
    std::fprintf(stderr, "%s: an accepted message does not decode after encode: %s\n", what,
                 e.what());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int peer = data[0] % 8;  // the sender / receiver task the bytes claim to be from
  const std::string bytes = tessel::fuzz::bytes_of(data + 1, size - 1);
  check_decoder("decode_host_report", bytes, peer, tessel::detail::decode_host_report);
  check_decoder("decode_coordinator_reply", bytes, peer, tessel::detail::decode_coordinator_reply);
  return 0;
}
