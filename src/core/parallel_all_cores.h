// Internal: parallel_for for work that the process's devices wait for, so that it may use every
// core the process may run on rather than one device's share (tessel/core/parallel.h): a
// checkpoint restore's copies on the caller's thread, before any device has work again. The count
// is set_intra_op_threads's (or TESSEL_INTRA_OP_THREADS) when fixed, else machine_cores().
//
//   detail::parallel_for_all_cores(chunks, 1, [&](int64_t begin, int64_t end) { ... });
//   detail::for_each_index_all_cores(chunks, [&](uint64_t chunk) { ... });
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "tessel/core/parallel.h"

namespace tessel::detail {

// parallel_for(n, grain, fn) over at most all_cores_threads() ranges.
template <typename Fn>
void parallel_for_all_cores(int64_t n, int64_t grain, const Fn& fn) {
  static_assert(std::is_invocable_v<const Fn&, int64_t, int64_t>, "fn(int64_t begin, int64_t end)");
  run_parallel_for_threads(
      n, grain, all_cores_threads(),
      [](const void* f, int64_t begin, int64_t end) { (*static_cast<const Fn*>(f))(begin, end); },
      &fn);
}

// Calls fn(i) for every i in [0, count) on up to all_cores_threads() threads, each taking the
// next index when it is done with one, so that a thread the machine is slow to run (other
// processes on its core) delays the call by one index's work at most, not by a fixed share.
template <typename Fn>
void for_each_index_all_cores(uint64_t count, const Fn& fn) {
  std::atomic<uint64_t> next{0};
  const auto threads = static_cast<int64_t>(
      std::min<uint64_t>(count, static_cast<uint64_t>(all_cores_threads())));
  parallel_for_all_cores(threads, 1, [&](int64_t, int64_t) {
    for (uint64_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) fn(i);
  });
}

}  // namespace tessel::detail
