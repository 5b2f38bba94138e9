// parallel.h: the intra-op thread pool and the per-device share of the machine's cores.
#include "tessel/core/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/cpu_relax.h"
#include "core/env.h"
#include "core/errors.h"

namespace tessel {
namespace {

std::atomic<int> g_cpu_devices{0};
// Set on a thread while it runs ranges of a parallel_for: a parallel_for inside one runs inline
// (the outer split already uses the threads this op may have).
thread_local bool t_in_parallel_range = false;
std::atomic<int> g_fixed_threads{-1};  // -1: not read from the environment yet; 0: automatic

int fixed_threads() {
  int fixed = g_fixed_threads.load(std::memory_order_relaxed);
  if (fixed >= 0) return fixed;
  fixed = static_cast<int>(detail::env_int("TESSEL_INTRA_OP_THREADS", {0, 4096}, "parallel_for",
                                           "a thread count from 0 to 4096")
                               .value_or(0));
  int expected = -1;
  g_fixed_threads.compare_exchange_strong(expected, fixed);
  return g_fixed_threads.load(std::memory_order_relaxed);
}

// One parallel_for call: its ranges are claimed one at a time, by the caller and by whichever
// pool threads pick up one of its tickets, until none is left.
struct Job {
  void (*call)(const void*, int64_t, int64_t) = nullptr;
  const void* fn = nullptr;
  int64_t n = 0;
  int64_t chunk = 0;
  int chunks = 0;
  std::atomic<int> next{0};
  std::atomic<int> done{0};
  std::mutex error_mu;
  std::exception_ptr error;

  // Runs ranges until none is left unclaimed.
  void run_ranges() {
    const bool outer = t_in_parallel_range;
    t_in_parallel_range = true;
    for (int i = next.fetch_add(1); i < chunks; i = next.fetch_add(1)) {
      const int64_t begin = i * chunk;
      try {
        call(fn, begin, std::min(n, begin + chunk));
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
      }
      if (done.fetch_add(1) + 1 == chunks) done.notify_all();
    }
    t_in_parallel_range = outer;
  }
};

// How long a pool thread polls for the next job before it sleeps, and a caller for its ranges'
// end before it waits on a futex.
constexpr auto kSpinTime = std::chrono::microseconds(200);

// machine_cores() - 1 threads (the caller is the other), started on first use and kept for the
// life of the process (never destroyed: no thread is joined during static destruction).
class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }

  void post(const std::shared_ptr<Job>& job, int tickets) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int i = 0; i < tickets; ++i) queue_.push_back(job);
      queued_.fetch_add(tickets, std::memory_order_release);
    }
    if (tickets == 1) {
      cv_.notify_one();
    } else {
      cv_.notify_all();
    }
  }

 private:
  void work() {
    for (;;) {
      // A model's ops come back to back: a worker that just finished polls for the next job for
      // a while before it sleeps, so that the next op's ranges start without a futex wake-up
      // (tens of microseconds on a VM, against ranges of a hundred), as OpenMP's workers spin.
      spin_for_work();
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
        queued_.fetch_sub(1, std::memory_order_relaxed);
      }
      job->run_ranges();
    }
  }

  void spin_for_work() const {
    const auto until = std::chrono::steady_clock::now() + kSpinTime;
    while (queued_.load(std::memory_order_acquire) == 0) {
      for (int i = 0; i < 64; ++i) detail::cpu_relax();
      if (std::chrono::steady_clock::now() > until) return;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::atomic<int> queued_{0};  // queue_.size(), readable without the lock
  std::vector<std::thread> workers_;
};

Pool& pool() {
  static Pool* p = new Pool(std::max(1, machine_cores() - 1));
  return *p;
}

}  // namespace

int machine_cores() {
  static const int cores = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }();
  return cores;
}

int intra_op_threads() {
  if (const int fixed = fixed_threads(); fixed > 0) return fixed;
  const int devices = std::max(1, g_cpu_devices.load(std::memory_order_relaxed));
  return std::max(1, machine_cores() / devices);
}

void set_intra_op_threads(int n) {
  if (n < 0 || n > 4096) {
    detail::throw_error(ErrorCode::kInvalidArgument, "set_intra_op_threads",
                        "threads = {}: expected 0 (automatic) or 1 to 4096", n);
  }
  g_fixed_threads.store(n, std::memory_order_relaxed);
}

namespace detail {

CpuCoreShare::CpuCoreShare() { g_cpu_devices.fetch_add(1, std::memory_order_relaxed); }
CpuCoreShare::~CpuCoreShare() { g_cpu_devices.fetch_sub(1, std::memory_order_relaxed); }

int all_cores_threads() {
  const int fixed = fixed_threads();
  return fixed > 0 ? fixed : machine_cores();
}

void run_parallel_for(int64_t n, int64_t grain, void (*call)(const void*, int64_t, int64_t),
                  const void* fn) {
  run_parallel_for_threads(n, grain, intra_op_threads(), call, fn);
}

void run_parallel_for_threads(int64_t n, int64_t grain, int threads,
                              void (*call)(const void*, int64_t, int64_t), const void* fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t most = std::min<int64_t>(std::max(threads, 1), n / grain);
  if (most < 2 || t_in_parallel_range) {
    call(fn, 0, n);
    return;
  }
  auto job = std::make_shared<Job>();
  job->call = call;
  job->fn = fn;
  job->n = n;
  job->chunk = (n + most - 1) / most;
  job->chunks = static_cast<int>((n + job->chunk - 1) / job->chunk);
  pool().post(job, job->chunks - 1);
  job->run_ranges();
  // Ranges a pool thread claimed may still be running: wait for them (they are computing, not
  // waiting on anything, so this ends when they do).
  const auto until = std::chrono::steady_clock::now() + kSpinTime;
  while (job->done.load() < job->chunks && std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 16; ++i) cpu_relax();
  }
  for (int done = job->done.load(); done < job->chunks; done = job->done.load()) {
    job->done.wait(done);
  }
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace detail
}  // namespace tessel
