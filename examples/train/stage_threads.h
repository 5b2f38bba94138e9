// A pipeline's controller threads, one per stage (docs/pipeline.md, "Stage threads"): run(jobs)
// gives job s to thread s and returns when every job has ended, rethrowing the first exception a
// job threw (the others still run to their end). The threads live as long as the object, so the
// per-thread caches of op dispatch stay warm from one step to the next.
//
//   StageThreads threads(2);
//   threads.run({[&] { run_stage(0); }, [&] { run_stage(1); }});
//
// A job that waits for another must bound its wait itself (the pipeline's mailbox does): run()
// waits for the jobs as long as they run.
//
// Thread safety: one run() at a time (kFailedPrecondition otherwise); not from one of its own
// threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessel::train {

class StageThreads {
 public:
  // n >= 1 threads (kInvalidArgument otherwise).
  explicit StageThreads(int n);
  // Joins the threads (after the run in progress, if any, ends).
  ~StageThreads();
  StageThreads(const StageThreads&) = delete;
  StageThreads& operator=(const StageThreads&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }
  // Runs jobs[s] on thread s (jobs.size() == size(), kInvalidArgument otherwise; an empty job does
  // nothing) and waits for all of them.
  void run(std::vector<std::function<void()>> jobs);

 private:
  void loop(size_t index);

  std::mutex mu_;
  std::condition_variable work_, done_;
  std::vector<std::function<void()>> jobs_;  // the run in progress
  uint64_t generation_ = 0;                  // runs started
  size_t finished_ = 0;                      // jobs of this run ended
  bool running_ = false, stopping_ = false;
  std::exception_ptr error_;  // the run's first
  std::vector<std::thread> threads_;
};

}  // namespace tessel::train
