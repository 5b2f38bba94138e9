// DTensor ids: a process-wide counter (gradient tapes key their records by id).
#include <atomic>

#include "tessel/dtensor/dtensor.h"

namespace tessel {

uint64_t DTensor::next_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace tessel
