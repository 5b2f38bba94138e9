#include "comm/segments.h"

#include <algorithm>

#include "comm/reduce_kernels.h"
#include "tessel/comm/collective_options.h"

namespace tessel::detail {

SegmentedLink::SegmentedLink(Transport& t, const AllReduceArgs& a)
    : t_(t), a_(a), item_(dtype_size(a.dtype)) {
  const size_t bytes = a.segment_bytes ? a.segment_bytes : kDefaultSegmentBytes;
  segment_ = std::max<int64_t>(1, static_cast<int64_t>(bytes / item_));
}

void SegmentedLink::send(int peer, const void* buffer, int64_t offset, int64_t count) {
  const auto* p = static_cast<const uint8_t*>(buffer);
  for (int64_t o = 0; o < count; o += segment_) {
    const int64_t n = std::min(segment_, count - o);
    t_.send(peer, kAlgorithmTag, p + (offset + o) * item_, n * item_, *a_.signature, a_.deadline);
  }
}

void SegmentedLink::recv(int peer, void* buffer, int64_t offset, int64_t count) {
  auto* p = static_cast<uint8_t*>(buffer);
  for (int64_t o = 0; o < count; o += segment_) {
    const int64_t n = std::min(segment_, count - o);
    t_.recv(peer, kAlgorithmTag, p + (offset + o) * item_, n * item_, *a_.signature, a_.deadline);
  }
}

void SegmentedLink::recv_reduce(int peer, void* buffer, int64_t offset, int64_t count) {
  if (!scratch_) scratch_ = std::make_unique<ScratchBuffer>(a_.scratch, static_cast<size_t>(segment_) * item_);
  auto* p = static_cast<uint8_t*>(buffer);
  for (int64_t o = 0; o < count; o += segment_) {
    const int64_t n = std::min(segment_, count - o);
    t_.recv(peer, kAlgorithmTag, scratch_->data(), n * item_, *a_.signature, a_.deadline);
    accumulate(a_.dtype, a_.op, p + (offset + o) * item_, scratch_->data(), n);
  }
}

}  // namespace tessel::detail
