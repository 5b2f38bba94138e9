// Intra-op parallelism: one large op of one device split over several cores.
//
// A device runs its ops in order on one worker thread (runtime/stream.h). A large op -- a
// matmul, an elementwise op over millions of elements -- may in addition split its work over a
// process-wide pool of threads: parallel_for(n, grain, fn) calls fn(begin, end) on disjoint
// ranges covering [0, n), at most intra_op_threads() of them at once, the calling thread taking
// a share itself, and returns when all are done (the first exception a range throws is rethrown
// in the caller, after the others finish).
//
// How many threads an op may use: the cores this process may run on (sched_getaffinity),
// divided among the CPU devices alive in the process, at least 1. One CPU device on a 2-core
// machine splits its ops in two; four devices on 2 cores split nothing, so that a mesh of
// several devices never has more threads computing than there are cores. The caller always runs
// ranges itself and takes back whatever no pool thread has started, so a busy pool slows an op
// down but never blocks it. set_intra_op_threads(n) (or TESSEL_INTRA_OP_THREADS=n) fixes the
// count instead; 0 goes back to the automatic share.
//
//   tessel::parallel_for(rows, 64, [&](int64_t begin, int64_t end) {
//     for (int64_t r = begin; r < end; ++r) normalize_row(r);
//   });
//
// Thread safety: every function may be called from any thread, parallel_for from several at once.
#pragma once

#include <cstdint>
#include <type_traits>

namespace tessel {

// The CPUs this process may run on (sched_getaffinity; hardware_concurrency where it fails), >= 1.
int machine_cores();

// The threads one op may use now (>= 1): set_intra_op_threads's value when set, else
// machine_cores() / (CPU devices alive), at least 1.
int intra_op_threads();

// n >= 1 fixes intra_op_threads() at n; 0 restores the automatic share. Anything else:
// kInvalidArgument naming the value.
void set_intra_op_threads(int n);

namespace detail {
void run_parallel_for(int64_t n, int64_t grain, void (*call)(const void*, int64_t, int64_t),
                  const void* fn);
// The same over at most `threads` ranges (src/core/parallel_all_cores.h uses it).
void run_parallel_for_threads(int64_t n, int64_t grain, int threads,
                              void (*call)(const void*, int64_t, int64_t), const void* fn);
// set_intra_op_threads's value when set, else machine_cores().
int all_cores_threads();

// Held by each CPU device while it lives (runtime/device.cpp): intra_op_threads() divides the
// cores among the holders.
class CpuCoreShare {
 public:
  CpuCoreShare();
  ~CpuCoreShare();
  CpuCoreShare(const CpuCoreShare&) = delete;
  CpuCoreShare& operator=(const CpuCoreShare&) = delete;
};
}  // namespace detail

// Calls fn(begin, end) over [0, n) split into at most intra_op_threads() ranges of at least
// `grain` elements each (one range, on the calling thread, when n < 2 * grain). n <= 0 calls
// nothing.
template <typename Fn>
void parallel_for(int64_t n, int64_t grain, const Fn& fn) {
  static_assert(std::is_invocable_v<const Fn&, int64_t, int64_t>, "fn(int64_t begin, int64_t end)");
  detail::run_parallel_for(
      n, grain,
      [](const void* f, int64_t begin, int64_t end) { (*static_cast<const Fn*>(f))(begin, end); },
      &fn);
}

}  // namespace tessel
