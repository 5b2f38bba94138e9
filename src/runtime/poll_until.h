// poll_until: the host's wait, with a deadline, for something it can only poll (a CUDA event,
// an NCCL communicator's state). Used by GpuEvent::synchronize and the NCCL transport.
//
// It spins for the first 5 ms, yielding the core between polls (as CUDA's own synchronisation
// does by default), then sleeps between polls with a pause doubling from 50 us to 1 ms.
// Why spin first: a sleep lasts at least the kernel's timer slack (about 50 us) and overshoots
// the end of the work by up to its length. Waits that slept from the start lost 40-60 us per
// NCCL call on an H100 (a 1 GiB all-reduce ran at 0.78 of raw NCCL; docs/benchmarks-history.md,
// "GPUs"). Waits longer than the spin (a stalled GPU, a late peer) sleep, so as not to hold a core.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace tessel::detail {

// How long poll_until spins before it sleeps, and its sleeps' first and longest pause.
inline constexpr std::chrono::milliseconds kPollSpin{5};
inline constexpr std::chrono::microseconds kPollFirstPause{50};
inline constexpr std::chrono::microseconds kPollLongestPause{1000};

// Calls `done()` until it returns true (then returns true) or `deadline` has passed with it
// false (then returns false, never before `deadline`). `done` is called at least once, even
// with a deadline already past, and may throw (a failure seen while polling): that ends the
// wait and reaches the caller.
template <class Done>
bool poll_until(std::chrono::steady_clock::time_point deadline, Done&& done) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point spin_until = Clock::now() + kPollSpin;
  Clock::duration pause = kPollFirstPause;
  for (;;) {
    if (done()) return true;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    if (now < spin_until) {
      std::this_thread::yield();
    } else {
      // Never sleeps past the deadline: the last poll comes at it, not up to a pause later.
      std::this_thread::sleep_for(std::min(pause, deadline - now));
      pause = std::min<Clock::duration>(pause * 2, kPollLongestPause);
    }
  }
}

}  // namespace tessel::detail
