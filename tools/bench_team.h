// Internal to `tessel bench`: a team of worker threads (one per rank or simulated device) and the
// memcpy baseline measured with it (timing and medians: bench_stats.h).
//
//   Team team(4);
//   team.run([&](int rank) {         // runs on every worker, returns when all returned
//     team.sync();                   // spin-yield barrier among the workers
//     ...
//   });
//
// The workers stay alive between run() calls, so thread creation is never timed. sync() waits by
// yielding (the machine may have fewer cores than workers, so it never spins without yielding);
// it throws once any worker's job has thrown, so that a failure never leaves the others waiting.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessel::cli::bench {

class Team {
 public:
  explicit Team(int size);
  ~Team();
  Team(const Team&) = delete;
  Team& operator=(const Team&) = delete;

  int size() const { return static_cast<int>(workers_.size()); }

  // Runs job(rank) on every worker and waits for all of them. If any job throws, the others'
  // sync() calls throw too, and the first exception is rethrown here.
  void run(const std::function<void(int rank)>& job);

  // Barrier among the workers of the current run(): returns when all have called it.
  void sync();

 private:
  void worker_main(int rank);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;  // run() calls so far
  int running_ = 0;          // workers still inside the current job
  bool stop_ = false;
  std::exception_ptr error_;

  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<uint64_t> sync_generation_{0};
  std::atomic<bool> failed_{false};
};

// memcpy bandwidth counted as bytes read + bytes written per second: `threads` threads each copy
// their contiguous 1/threads part of a `bytes`-byte buffer into a second buffer with memcpy;
// one repetition's time is the slowest thread's, the result is 2 * bytes / (median over
// `repetitions` timed repetitions, after one untimed warm-up).
double measure_memcpy_gbps(int threads, size_t bytes, int repetitions);

}  // namespace tessel::cli::bench
