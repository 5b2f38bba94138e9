// Internal: point-to-point transfers of element ranges in segments, so that a receiver needs at
// most one segment of temporary memory.
#pragma once

#include <cstdint>
#include <vector>

#include <memory>

#include "comm/algorithms.h"
#include "comm/scratch.h"

namespace tessel::detail {

class SegmentedLink {
 public:
  SegmentedLink(Transport& t, const AllReduceArgs& a);

  // Sends elements [offset, offset + count) of `buffer` to `peer`.
  void send(int peer, const void* buffer, int64_t offset, int64_t count);
  // Receives `count` elements from `peer` into buffer[offset...].
  void recv(int peer, void* buffer, int64_t offset, int64_t count);
  // Receives `count` elements from `peer` and combines them into buffer[offset...].
  void recv_reduce(int peer, void* buffer, int64_t offset, int64_t count);

 private:
  Transport& t_;
  const AllReduceArgs& a_;
  const size_t item_;
  int64_t segment_;               // elements per segment
  std::unique_ptr<ScratchBuffer> scratch_;  // one segment, for recv_reduce; made on first use
};

}  // namespace tessel::detail
