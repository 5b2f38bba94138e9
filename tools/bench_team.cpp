#include "bench_team.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "bench_stats.h"
#include "tessel/core/median.h"

namespace tessel::cli::bench {
namespace {

// Thrown by sync() in the workers that did not fail, so that they leave the job.
struct TeamFailed : std::runtime_error {
  TeamFailed() : std::runtime_error("another worker failed") {}
};

}  // namespace

Team::Team(int size) {
  workers_.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) workers_.emplace_back([this, r] { worker_main(r); });
}

Team::~Team() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void Team::run(const std::function<void(int)>& job) {
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &job;
  error_ = nullptr;
  failed_.store(false);
  arrived_.store(0);
  running_ = size();
  ++generation_;
  start_cv_.notify_all();
  done_cv_.wait(lock, [&] { return running_ == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void Team::worker_main(int rank) {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    try {
      (*job)(rank);
    } catch (const TeamFailed&) {
      // Another worker's exception is the one reported.
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      failed_.store(true);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--running_ == 0) done_cv_.notify_all();
  }
}

void Team::sync() {
  const uint64_t generation = sync_generation_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) == size() - 1) {
    arrived_.store(0, std::memory_order_relaxed);
    sync_generation_.store(generation + 1, std::memory_order_release);
    return;
  }
  while (sync_generation_.load(std::memory_order_acquire) == generation) {
    if (failed_.load(std::memory_order_relaxed)) throw TeamFailed();
    std::this_thread::yield();
  }
}

double measure_memcpy_gbps(int threads, size_t bytes, int repetitions) {
  // 64-byte aligned so that every thread's part starts on a cache line.
  const size_t part = (bytes / static_cast<size_t>(threads)) & ~size_t{63};
  const size_t total = part * static_cast<size_t>(threads);
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> src(static_cast<unsigned char*>(std::aligned_alloc(64, total)));
  std::unique_ptr<unsigned char, Free> dst(static_cast<unsigned char*>(std::aligned_alloc(64, total)));
  if (!src || !dst) throw std::runtime_error("memcpy baseline: out of memory");
  std::vector<std::vector<double>> seconds(static_cast<size_t>(threads),
                                           std::vector<double>(static_cast<size_t>(repetitions) + 1));
  Team team(threads);
  team.run([&](int r) {
    unsigned char* s = src.get() + part * static_cast<size_t>(r);
    unsigned char* d = dst.get() + part * static_cast<size_t>(r);
    // Touch both buffers first (page faults are not part of a copy's cost).
    std::memset(s, r + 1, part);
    std::memset(d, 0, part);
    for (int i = 0; i <= repetitions; ++i) {
      team.sync();
      const Stopwatch watch;
      std::memcpy(d, s, part);
      seconds[static_cast<size_t>(r)][static_cast<size_t>(i)] = watch.seconds();
    }
  });
  std::vector<double> slowest;
  for (int i = 1; i <= repetitions; ++i) {  // repetition 0 is the warm-up
    double t = 0;
    for (int r = 0; r < threads; ++r) t = std::max(t, seconds[static_cast<size_t>(r)][static_cast<size_t>(i)]);
    slowest.push_back(t);
  }
  return 2.0 * static_cast<double>(total) / median(slowest) / 1e9;
}

}  // namespace tessel::cli::bench
