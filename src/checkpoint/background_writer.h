// BackgroundWriter: one long-lived thread that runs one job at a time for AsyncCheckpointer, at a
// lower priority than the caller's threads (nice 10, inherited by the threads a job starts), so
// that a save in the background yields the CPU to training. Kept between saves: starting a thread
// per save cost the caller milliseconds on a loaded machine.
//
// run(job) hands the job over (the previous one must be finished); finished(timeout) waits for
// it; take_failure() returns what it threw (once). The destructor waits for the job in flight.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace tessel::checkpoint::detail {

class BackgroundWriter {
 public:
  BackgroundWriter();
  ~BackgroundWriter();
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  void run(std::function<void()> job);
  // True once the job handed over last has finished (at once when there is none).
  bool finished(std::chrono::milliseconds timeout);
  std::exception_ptr take_failure();

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> job_;   // guarded by mutex_; empty when idle
  bool busy_ = false;           // guarded by mutex_: a job was handed over and has not finished
  bool stop_ = false;           // guarded by mutex_
  std::exception_ptr failure_;  // guarded by mutex_
  std::thread thread_;          // last: starts once the members above exist
};

}  // namespace tessel::checkpoint::detail
